"""The built-in scanners the field expects, each citing what decided, and the task's own `verify`
scored as a scanner."""

from __future__ import annotations

from expense_runs import TASK_SPEC

from agentrl.scan import load_scanner
from agentrl.scan.trajectory import Trajectory
from agentrl.tasks import load_task


def calls(*pairs, **fields) -> Trajectory:
    return Trajectory.of_messages([{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": n, "arguments": a}}]}
                                   for n, a in pairs], **fields)


def test_one_component_holding_90_percent_of_the_reward_is_a_hit():
    scanner = load_scanner("builtin:dominant_component")
    hit = scanner.scan(calls(components={"settled": 1.0, "calls": -0.05}))
    assert hit.hit and hit.explanation.startswith("component 'settled' is 95% of the reward")
    assert not scanner.scan(calls(components={"settled": 1.0, "calls": -0.2})).hit
    assert not scanner.scan(calls(components={"settled": 1.0})).hit  # one component dominates nothing


def test_a_reward_3_sd_above_its_steps_mean_is_a_spike():
    scanner = load_scanner("builtin:reward_spike")
    batch = [0.1] * 20 + [2.0]
    assert scanner.scan(calls(reward=2.0, step_rewards=batch)).hit
    assert not scanner.scan(calls(reward=0.1, step_rewards=batch)).hit
    assert not scanner.scan(calls(reward=2.0)).hit  # no batch to compare with


def test_the_same_call_twice_is_a_hit_citing_both_and_other_arguments_are_not():
    scanner = load_scanner("builtin:repeated_call")
    result = scanner.scan(calls(("check", {"id": 1}), ("read", {}), ("check", {"id": 1})))
    assert result.hit and result.references == (0, 2)
    assert not scanner.scan(calls(("check", {"id": 1}), ("check", {"id": 2}))).hit


def test_arguments_breaking_the_tools_schema_and_unknown_tools_are_hits():
    task = load_task(TASK_SPEC)
    scanner = load_scanner("builtin:schema_arguments")
    wrong_type = scanner.scan(calls(("read_claim", {}), ("approve", {"claim_id": 7}), task=task))
    assert wrong_type.hit and wrong_type.references == (1,) and wrong_type.explanation == "approve: claim_id: 7 is not of type 'string'"
    assert scanner.scan(calls(("pay_out", {}), task=task)).explanation == "call to 'pay_out', which is no tool of the task"
    assert not scanner.scan(calls(("approve", {"claim_id": "c1", "force": True}), task=task)).hit


def test_verify_is_a_scanner_that_replays_a_stored_trajectory_through_the_task(tmp_path):
    from agentrl.scan.trajectory import chatml

    task = load_task(TASK_SPEC)
    scanner = load_scanner("builtin:verify", task)
    over_limit = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": n, "arguments": a}}]}
                  for n, a in (("check_receipt", {"claim_id": "c3"}), ("approve", {"claim_id": "c3"}))]
    row = {"task_id": "c3", "completion": chatml(over_limit), "actions": ["check_receipt", "approve"]}
    assert not scanner.scan(Trajectory.of_row(row, task=task)).hit  # 300 EUR: within the limit, and verify sees nothing else
    assert load_scanner("builtin:verify").version != scanner.version  # the task's verify is part of its version
