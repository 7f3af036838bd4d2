"""The LM run process (agentrl/engines/trl/engine.py): a short real GRPO run, read back through the store.

Drives `run_trl` end to end on the built-in tiny model (a few optimiser steps, tiny sizes), then
ingests the run's chunks as the dashboard does and checks every table the pages read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("trl")

from agentrl.config import make_config
from agentrl.launcher import create_run
from agentrl.store.ingest import connect, ingest_once
from agentrl.engines.trl.engine import ModelDirError, run_trl


def short_config(**overrides):
    values = {
        "kind": "trl", "scorer": "guarded", "name": "lm-short", "rounds": 3, "group_size": 4, "lr": 1e-3, "eval_every": 2,
        "lm": {"tasks_per_step": 2, "max_completion_length": 96, "max_tool_calls": 8},
    }
    values.update(overrides)
    return make_config(**values)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """One 3-step guarded run, ingested: (run_id, store connection, log lines)."""
    yield from run_in_store(tmp_path_factory.mktemp("lm") / "runs", short_config())


def run_in_store(runs_dir, config):
    """Run `config` to success in this process, ingest it, and yield (run_id, store connection, log lines)."""
    run = create_run(runs_dir, config)
    lines: list[str] = []
    assert run_trl(config, run, log=lines.append) == "succeeded", lines
    assert run.status()["status"] == "succeeded" and run.status()["step"] == config.rounds
    ingest_once(runs_dir)
    con = connect(runs_dir)
    yield run.run_id, con, lines
    con.close()


def rows(con, sql, run_id):
    return con.execute(sql, [run_id]).fetchall()


def test_steps_are_numbered_from_one_with_every_trl_metric(short_run):
    run_id, con, _ = short_run
    steps = rows(con, "SELECT step, vetoed, vetoed_updates, updates, transitions, metrics FROM steps WHERE run_id = ? ORDER BY step", run_id)
    assert [s[0] for s in steps] == [1, 2, 3]
    for _, vetoed, vetoed_updates, updates, transitions, metrics in steps:
        assert vetoed_updates == 0 and 0 <= vetoed <= 8 and updates <= 8 - vetoed and transitions > 0
        assert {"reward", "reward_std", "entropy", "rewards/outcome/mean", "rewards/step_cost/mean", "rewards/guard/mean", "tools/call_frequency", "clip_ratio/region_mean"} <= set(metrics)


def test_trajectories_carry_prompt_completion_and_every_reward_component(short_run):
    run_id, con, _ = short_run
    trajectories = rows(con, "SELECT step, task_id, actions, reward, components, eligible, vetoed, prompt, completion FROM trajectories WHERE run_id = ?", run_id)
    assert len(trajectories) == 3 * 8
    for step, task_id, actions, reward, components, eligible, vetoed, prompt, completion in trajectories:
        assert set(components) == {"outcome", "violation_penalty", "duplicate_penalty", "step_cost"}
        assert reward == pytest.approx(sum(components.values()))
        assert vetoed == (not eligible)
        assert "Handle this refund request." in prompt and completion
        assert task_id in {"train-low", "train-high", "recover-low", "recover-high"}
    assert sum("<tool_call>" in t[-1] for t in trajectories) > len(trajectories) // 2


def test_action_probs_at_the_sensitive_state_from_step_zero_sum_to_one(short_run):
    run_id, con, _ = short_run
    sums = rows(con, "SELECT step, state, sum(prob), count(*) FROM action_probs WHERE run_id = ? GROUP BY step, state ORDER BY step", run_id)
    assert [(s, state) for s, state, _, _ in sums] == [(0, "known_high"), (1, "known_high"), (2, "known_high"), (3, "known_high")]
    assert all(total == pytest.approx(1.0) and n == 4 for _, _, total, n in sums)
    start = dict(rows(con, "SELECT action, prob FROM action_probs WHERE run_id = ? AND step = 0", run_id))
    assert start["request_approval"] == pytest.approx(0.914, abs=0.02)  # the warm start is SPEC 8's cloned policy


def test_held_out_evals_at_the_start_every_eval_every_steps_and_the_end(short_run):
    run_id, con, _ = short_run
    evals = rows(con, "SELECT step, split, count(*) FROM evals WHERE run_id = ? GROUP BY step, split ORDER BY step, split", run_id)
    assert evals == [(0, "held_out", 4), (2, "held_out", 4), (3, "held_out", 4), (3, "probe", 2)]


def test_the_end_saves_the_adapter_a_promotion_bundles(short_run):
    run_id, con, _ = short_run
    run_dir = con.execute("SELECT run_dir FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    from pathlib import Path

    adapter = Path(run_dir) / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()


def test_the_budget_estimate_includes_the_runtime(short_run):
    # Whether it bounds the measured peak is checked on a run in its own process
    # (tests/test_lm_end_to_end.py): this one shares the test process and its memory.
    run_id, con, _ = short_run
    budgets = {(c, s): b for c, b, s in rows(con, "SELECT component, bytes, source FROM budgets WHERE run_id = ?", run_id)}
    assert budgets[("runtime", "estimate")] > 0


def test_hardware_and_budget_rows(short_run):
    run_id, con, lines = short_run
    assert rows(con, "SELECT count(*) FROM hardware WHERE run_id = ? AND rss_bytes > 0", run_id)[0][0] >= 1
    budgets = {(c, s): b for c, b, s in rows(con, "SELECT component, bytes, source FROM budgets WHERE run_id = ?", run_id)}
    assert budgets[("process_peak_rss", "measured")] > 100 * 2**20
    assert budgets[("weights", "estimate")] > 0 and ("total", "estimate") in budgets
    assert any(line.startswith("totals: steps 3") for line in lines)


def test_a_stop_request_ends_the_run_between_steps_as_cancelled(runs_dir):
    config = short_config(rounds=20, eval_every=0)
    run = create_run(runs_dir, config)

    def log(message: str) -> None:
        if message.startswith("step 1/"):
            run.request_stop()

    assert run_trl(config, run, log=log) == "cancelled"
    assert run.status()["status"] == "cancelled" and run.status()["step"] == 1


def test_a_missing_model_directory_fails_the_run_with_a_clear_error(runs_dir, tmp_path):
    config = short_config(lm={"model": str(tmp_path / "no-such-model")})
    run = create_run(runs_dir, config)
    with pytest.raises(ModelDirError, match="does not exist"):
        run_trl(config, run, log=lambda message: None)
    status = run.status()
    assert status["status"] == "failed" and "no-such-model" in status["error"]


def test_importing_the_lm_modules_loads_no_torch():
    code = (
        "import sys, agentrl.engines.trl.engine, agentrl.tasks.refund.tools, agentrl.tasks.refund.task, agentrl.tasks.loader, agentrl.tasks.refund.tiny_model; "
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'trl', 'streamlit') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[3]))
    assert json.loads(out.stdout) == []


def test_every_processes_gpu_peak_reaches_the_store_beside_the_per_gpu_estimate(runs_dir):
    """No GPU here: torch.cuda's counters and NVML come through `GpuPeaks`' seams (tests/gpu_stand_ins.py);
    the rest is the engine's own path into DuckDB and the Hardware page's table."""
    from agentrl.analysis.hardware import gpu_by_rank
    from agentrl.engines.trl.budget import GB, ModelShape, estimate_budget, format_bytes
    from agentrl.engines.trl.engine import _gpu_step_metrics, _record_gpu_peaks, record_measured_budget
    from agentrl.engines.trl.ranks import Ranks
    from agentrl.record.hardware import GpuPeaks
    from agentrl.record.run import Run
    from agentrl.record.rundir import new_run
    from agentrl.store import queries

    from gpu_stand_ins import FakeCuda, FakeNvml

    budget = estimate_budget(ModelShape.from_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                                     "intermediate_size": 128, "vocab_size": 100}),
                             8, "all-linear", sequences=4, tokens_per_sequence=64, machine_bytes=16 * GB)
    cuda = FakeCuda()
    gpu = GpuPeaks(cuda=cuda, nvml=FakeNvml(mig=True))
    run_dir = new_run(runs_dir, "gpu", "trl", "guarded", {}, total_steps=1)
    with Run(run_dir, total_steps=1, before_close=lambda run: record_measured_budget(run, print)) as run:
        cuda.allocate(3 * 10**9, 4 * 10**9)
        cuda.allocate(10**9, 4 * 10**9)
        assert _gpu_step_metrics(Ranks(), gpu) == {"gpu/peak_allocated_bytes/rank 0": 3e9, "gpu/peak_reserved_bytes/rank 0": 4e9}
        _record_gpu_peaks(Ranks(), gpu, budget, run)
        run.finish("succeeded")
    ingest_once(runs_dir)
    con = connect(runs_dir)
    rows = queries.budget_for_run(con, run_dir.run_id).set_index("component")
    assert rows.at["gpu_peak", "measured_bytes"] == 3 * 10**9
    assert rows.at["total", "measured_bytes"] == 3 * 10**9 + rows.at["process_peak_rss", "measured_bytes"]
    table = gpu_by_rank(queries.budget_for_run(con, run_dir.run_id))
    on_gpu = budget.weights + budget.adapter + budget.kv_cache + budget.activations_logits  # what one process puts there
    assert rows.at["gpu_peak/rank 0", "estimate_bytes"] == on_gpu
    assert table.to_dict("records") == [{"rank": 0, "estimate": format_bytes(on_gpu), "peak allocated": "3.0 GB",
                                         "peak reserved": "4.0 GB", "GPU memory": "10.7 GB"}]
    con.close()


def test_without_a_gpu_no_gpu_rows_and_no_step_metrics(runs_dir):
    from agentrl.engines.trl.engine import _gpu_step_metrics, _record_gpu_peaks
    from agentrl.engines.trl.ranks import Ranks, SilentRun
    from agentrl.record.hardware import GpuPeaks
    from agentrl.record.rundir import new_run

    class NoCuda:
        def is_available(self):
            return False

    gpu = GpuPeaks(cuda=NoCuda())
    run = SilentRun(new_run(runs_dir, "cpu", "trl", "guarded", {}, total_steps=1))
    assert _gpu_step_metrics(Ranks(), gpu) == {}
    _record_gpu_peaks(Ranks(), gpu, None, run)
    assert run.gpu_peak_bytes is None
