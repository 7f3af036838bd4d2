"""A trajectory as a scanner reads it: the same items from chat messages, from the ChatML text a
language-model run records, from call lines, and from a gym's states and actions."""

from __future__ import annotations

from agentrl.scan.trajectory import Trajectory, chatml, parse_text

MESSAGES = [
    {"role": "system", "content": "Be careful."},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "approve", "arguments": {"claim_id": "c2", "force": True}}}]},
    {"role": "tool", "name": "approve", "content": "approved and paid"},
    {"role": "assistant", "content": "Done."},
]


def test_messages_become_items_with_calls_and_outputs_in_order():
    trajectory = Trajectory.of_messages(MESSAGES)
    assert [(i.index, i.role, i.part) for i in trajectory.items] == [
        (0, "system", "message"), (1, "assistant", "call"), (2, "tool", "output"), (3, "assistant", "message")]
    assert trajectory.items[1].searchable() == 'approve({"claim_id": "c2", "force": true})'
    assert trajectory.actions == ["approve"]


def test_recorded_chatml_reads_back_as_the_same_items():
    recorded = Trajectory.of_row({"prompt": chatml(MESSAGES[:1]), "completion": chatml(MESSAGES[1:]), "actions": ["approve"],
                                  "run_id": "r", "step": 2, "traj_idx": 5, "components": [("settled", 1.0)]})
    direct = Trajectory.of_messages(MESSAGES)
    assert [(i.role, i.part, i.searchable()) for i in recorded.items] == [(i.role, i.part, i.searchable()) for i in direct.items]
    assert (recorded.step, recorded.traj_idx, recorded.components) == (2, 5, {"settled": 1.0})


def test_call_lines_and_a_gyms_episode_are_read_too():
    lines = parse_text(None, 'assistant -> read_file({"path": "a.py"})\ntool[read_file]: x = 1 ... (1 lines)\nassistant: done')
    assert [(i.part, i.searchable()) for i in lines] == [("call", 'read_file({"path": "a.py"})'), ("output", "x = 1 ... (1 lines)"),
                                                         ("message", "done")]
    gym = Trajectory.of_row({"states": ["start", "looked_up"], "actions": ["lookup", "refund"]})
    assert [(i.part, i.searchable()) for i in gym.items] == [("output", "start"), ("call", "lookup({})"), ("output", "looked_up"),
                                                            ("call", "refund({})")]
