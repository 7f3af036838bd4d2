"""The built-in tiny LM (agentrl/tiny_model.py and its committed build in agentrl/assets/).

It loads offline, calls the refund tools in a form TRL parses, starts where the SPEC's cloned
policy starts (SPEC 8: about 0.914 request_approval at known_high, uniform at recover), and is
rebuilt bit for bit from its seed.
"""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentrl.tasks.refund.gym import ACTIONS
from agentrl.engines.tabular.imitation import clone_expert
from agentrl.tasks.refund.tools import (
    next_action_distribution,
    play_greedy,
    render_ids,
    state_histories,
    token_stream,
    tool_methods,
    transcript,
)
from agentrl.tasks.refund.tasksets import EXPERT_TASKS, TRAIN_TASKS
from agentrl.tasks.refund.tiny_model import (
    build_tiny_model,
    decision_offset,
    default_model_dir,
    text_fingerprint,
)


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    path = default_model_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    return model, tokenizer


def test_the_committed_model_is_small_and_complete():
    path = default_model_dir()
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= names
    assert sum(p.stat().st_size for p in path.iterdir()) < 1_000_000


def test_the_committed_model_was_built_for_the_current_prompts_and_tools():
    # The model only knows the texts it was cloned on; a changed prompt or tool docstring needs a rebuild:
    #   .venv/bin/python -m agentrl.tiny_model
    assert json.loads((default_model_dir() / "build.json").read_text())["text_fingerprint"] == text_fingerprint()


def test_trl_recognises_the_chat_template_for_tool_calling(tiny):
    from trl.chat_template_utils import (
        add_response_schema,
        is_chat_template_prefix_preserving,
        supports_tool_calling,
    )

    _, tokenizer = tiny
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    add_response_schema(tokenizer)  # raises for a template TRL cannot parse
    assert decision_offset(tokenizer) == 1  # one token after <tool_call> names the tool


def test_greedily_it_calls_the_tools_on_a_train_task(tiny):
    model, tokenizer = tiny
    episodes = play_greedy(model, tokenizer, TRAIN_TASKS[:2])
    assert [e.actions for e in episodes] == [["lookup", "refund", "finish"], ["lookup", "request_approval", "refund", "finish"]]
    for episode in episodes:
        assert episode.parse_failures == 0 and episode.trajectory.success
        assert episode.messages[-1] == {"role": "assistant", "content": "Done."}


def test_it_starts_where_the_cloned_policy_starts(tiny):
    model, tokenizer = tiny
    clone = clone_expert(EXPERT_TASKS)
    for state in ("known_high", "known_low", "recover"):
        dist = next_action_distribution(model, tokenizer, state_histories(TRAIN_TASKS, state))
        assert sum(dist.values()) == pytest.approx(1.0)
        for action, expected in zip(ACTIONS, clone.probabilities(state)):
            assert dist[action] == pytest.approx(expected, abs=0.02), (state, action)


def test_the_probe_reads_the_token_stream_of_a_grpo_rollout(tiny):
    _, tokenizer = tiny
    history = transcript(TRAIN_TASKS[1], ["lookup"], final_answer=False)
    rendered = render_ids(tokenizer, history, tool_methods(), add_generation_prompt=True)
    assert token_stream(tokenizer, history, tool_methods()).ids == rendered


def test_a_build_is_deterministic(tmp_path):
    torch.set_num_threads(1)
    first = build_tiny_model(tmp_path / "a", seed=3, bc_steps=2, episodes=40, log=lambda message: None)
    second = build_tiny_model(tmp_path / "b", seed=3, bc_steps=2, episodes=40, log=lambda message: None)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
