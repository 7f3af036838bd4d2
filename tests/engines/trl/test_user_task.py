"""The LM engine on a task from outside the package (examples/calendar_booking): a short real GRPO run
read back through the store, and any local model directory checked by the memory budget."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("trl")

from agentrl.config import make_config
from agentrl.engines.registry import engine_of
from helpers import REPO_ROOT, agentrl
from test_trl_engine import rows, run_in_store

EXAMPLE = f"{REPO_ROOT / 'examples' / 'calendar_booking' / 'task.py'}:TASK"
QWEN3_1_7B = {
    "model_type": "qwen3", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
}


def example_config(**overrides):
    values = {"kind": "trl", "task": EXAMPLE, "scorer": "guarded", "name": "calendar-short", "rounds": 3, "group_size": 4,
              "eval_every": 2, "lm": {"tasks_per_step": 2, "max_completion_length": 64, "max_tool_calls": 6}}
    values.update(overrides)
    return make_config(**values)


@pytest.fixture(scope="module")
def calendar_run(tmp_path_factory):
    yield from run_in_store(tmp_path_factory.mktemp("calendar") / "runs", example_config())


def test_every_reward_function_is_a_component_and_the_guard_adds_its_penalty(calendar_run):
    run_id, con, _ = calendar_run
    trajectories = rows(con, "SELECT task_id, actions, reward, components, violation, eligible, vetoed, verifier_reason "
                             "FROM trajectories WHERE run_id = ?", run_id)
    assert len(trajectories) == 3 * 8
    for task_id, actions, reward, components, violation, eligible, vetoed, reason in trajectories:
        assert set(components) == {"booked", "calls", "violation_penalty"}
        assert reward == pytest.approx(sum(components.values()), abs=1e-6)
        assert eligible == (not violation) and vetoed == (not eligible)
        assert (reason == "cancelled a colleague's meeting") == violation
        assert task_id in {"mon-9", "tue-14-dana", "wed-10-eli", "thu-16"}
    assert sum(bool(t[1]) and t[1][0] == "check_slot" for t in trajectories) > len(trajectories) // 2  # the warm start's habit


def test_the_decision_point_distribution_is_recorded_from_step_zero(calendar_run):
    run_id, con, _ = calendar_run
    sums = rows(con, "SELECT step, state, sum(prob), count(*) FROM action_probs WHERE run_id = ? GROUP BY step, state ORDER BY step", run_id)
    assert [(s, state, n) for s, state, _, n in sums] == [(step, "slot taken", 5) for step in range(4)]
    assert all(total == pytest.approx(1.0) for _, _, total, _ in sums)
    start = dict(rows(con, "SELECT action, prob FROM action_probs WHERE run_id = ? AND step = 0", run_id))
    assert start["book_next_free"] > start["cancel_conflict"] > 0.01  # cloned: mostly honest, sometimes the shortcut


def test_held_out_rows_and_exploit_probes_are_played_greedily(calendar_run):
    run_id, con, lines = calendar_run
    evals = rows(con, "SELECT step, split, count(*) FROM evals WHERE run_id = ? GROUP BY step, split ORDER BY step, split", run_id)
    assert evals == [(0, "held_out", 4), (2, "held_out", 4), (3, "held_out", 4), (3, "probe", 2)]
    assert any(line.startswith("task calendar-booking: 4 train rows, 4 eval rows, 2 exploit probes") for line in lines)


def test_the_run_is_an_ordinary_trl_run_in_the_store(calendar_run):
    run_id, con, _ = calendar_run
    (config,) = rows(con, "SELECT config FROM runs WHERE run_id = ?", run_id)[0]
    assert json.loads(config)["task"] == EXAMPLE
    steps = rows(con, "SELECT step, vetoed_updates, metrics FROM steps WHERE run_id = ? ORDER BY step", run_id)
    assert [s[0] for s in steps] == [1, 2, 3] and all(s[1] == 0 for s in steps)
    assert {"rewards/booked/mean", "rewards/calls/mean", "rewards/guard/mean"} <= set(steps[0][2])


def big_model_dir(tmp_path):
    folder = tmp_path / "Qwen3-1.7B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_1_7B))
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_any_local_model_directory_is_sized_from_its_config_json(tmp_path):
    config = example_config(lm={"model": str(big_model_dir(tmp_path)), "machine_memory_gb": 64, "tasks_per_step": 2})
    preflight = engine_of(config).preflight(config)
    assert preflight.refusal is None and "weights" in preflight.report


def test_a_model_that_cannot_fit_is_refused_in_one_line_before_anything_is_written(tmp_path):
    config = {"kind": "trl", "task": EXAMPLE, "lm": {"model": str(big_model_dir(tmp_path)), "machine_memory_gb": 4}}
    (tmp_path / "big.json").write_text(json.dumps(config))
    result = agentrl("train", "--config", tmp_path / "big.json", "--runs-dir", tmp_path / "runs")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "weights" in line
    assert not (tmp_path / "runs").exists()
