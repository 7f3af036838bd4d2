"""Tests of agentrl/integrations/trl.py: a TRL GRPO script recorded by `AgentrlCallback`.

Real TRL throughout, on the committed tiny model: `examples/trl_grpo_script.py` run as a user
runs it (a subprocess, not through our engine), and short in-process trainings for what the
example does not show (TRL's own completions table, a stop request, another process's rank).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, store_rows
from agentrl.record.rundir import list_run_dirs

pytestmark = pytest.mark.lm

CPU_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    """`python examples/trl_grpo_script.py --steps 2` as a user runs it; its runs directory."""
    root = tmp_path_factory.mktemp("trl-example")
    runs_dir = root / "runs"
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("AGENTRL_RUN_DIR", None)
    result = subprocess.run([sys.executable, "examples/trl_grpo_script.py", "--steps", "2", "--runs-dir", str(runs_dir),
                             "--output-dir", str(root / "trl")], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return runs_dir


@pytest.mark.slow
def test_the_example_script_lands_its_run_steps_completions_and_tool_metrics_in_duckdb(example_run):
    runs = store_rows(example_run, "SELECT name, kind, status, total_steps, config->>'$.model' FROM runs")
    assert len(runs) == 1
    name, kind, status, total, model = runs[0]
    assert (name, kind, status, total) == ("trl-grpo-script", "script", "succeeded", 2)
    assert model.endswith("tiny-refund-lm")
    steps = store_rows(example_run, "SELECT step, mean_reward, metrics FROM steps ORDER BY step")
    assert [s[0] for s in steps] == [1, 2]
    for _, mean_reward, metrics in steps:
        assert {"reward", "reward_std", "rewards/refund_paid/mean", "rewards/tool_cost/mean", "tools/call_frequency",
                "tools/failure_frequency", "entropy"} <= set(metrics)
        assert mean_reward == pytest.approx(metrics["reward"])
        assert metrics["tools/call_frequency"] > 0  # the tiny model calls the tools
    trajectories = store_rows(example_run, "SELECT step, components, reward, actions, task_id, completion FROM trajectories")
    assert len(trajectories) == 2 * 8  # 8 completions per step
    for _, components, reward, actions, task_id, completion in trajectories:
        assert set(components) == {"refund_paid", "tool_cost"}
        assert reward == pytest.approx(components["refund_paid"] + components["tool_cost"])
        assert actions and set(actions) <= {"lookup", "request_approval", "refund", "finish"}
        assert task_id in {"small", "large", "medium", "huge"}  # from the reward function's log_extra
        assert "-> " in completion  # the transcript shows each tool call
    # Each step's mean reward is the mean of its completions' rewards (TRL's own arithmetic).
    for step, mean_reward, _ in steps:
        rewards = [t[2] for t in trajectories if t[0] == step]
        assert sum(rewards) / len(rewards) == pytest.approx(mean_reward, abs=1e-5)


def _train(tmp_path, callback, reward_funcs, steps: int = 2, **config):
    """A few plain-prompt GRPO steps on the tiny model, in this process."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.tasks.refund.tiny_model import default_model_dir

    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    torch.set_num_threads(1)
    model_dir = str(default_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    dataset = Dataset.from_list([{"prompt": f"refund order {i}:", "task_id": f"t{i}"} for i in range(4)])
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), max_steps=steps, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=8, learning_rate=1e-3, logging_steps=1, use_cpu=True, bf16=False,
                      report_to="none", save_strategy="no", disable_tqdm=True, seed=0, **config)
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[callback])
    trainer.train()
    return trainer


def length(completions, log_extra=None, task_id=None, **kwargs):
    if log_extra is not None:
        log_extra("task_id", list(task_id))
        log_extra("note", [f"{len(c)} chars" for c in completions])
    return [len(c) / 10 for c in completions]


def has_r(completions, **kwargs):
    return [float("r" in c) for c in completions]


def test_with_trls_own_completions_table_each_row_has_its_advantage_and_extras(runs_dir, tmp_path):
    from agentrl.integrations.trl import AgentrlCallback

    callback = AgentrlCallback(runs_dir=runs_dir, name="table")
    _train(tmp_path, callback, [length, has_r], log_completions=True, reward_weights=[1.0, 0.5])
    rows = store_rows(runs_dir, "SELECT step, reward, components, advantages, task_id, extras, completion FROM trajectories "
                                "ORDER BY step, traj_idx")
    assert [r[0] for r in rows] == [1] * 4 + [2] * 4
    for _, reward, components, advantages, task_id, extras, completion in rows:
        assert reward == pytest.approx(components["length"] + 0.5 * components["has_r"])  # TRL's weighted sum
        assert len(advantages) == 1  # TRL's advantage of the completion
        assert task_id in {"t0", "t1", "t2", "t3"}
        assert extras == {"note": f"{len(completion)} chars"}
    (status,) = store_rows(runs_dir, "SELECT status FROM runs")[0]
    assert status == "succeeded"


def test_a_stop_request_ends_training_after_the_step_and_the_run_is_cancelled(runs_dir, tmp_path):
    from agentrl.integrations.trl import AgentrlCallback

    callback = AgentrlCallback(runs_dir=runs_dir, name="stopped")

    def asks_to_stop(completions, **kwargs):
        callback.run.dir.request_stop()  # as the dashboard's Cancel does, during the first step
        return [0.0 for _ in completions]

    trainer = _train(tmp_path, callback, [length, asks_to_stop], steps=5)
    assert trainer.state.global_step == 1
    assert store_rows(runs_dir, "SELECT status FROM runs") == [("cancelled",)]
    assert store_rows(runs_dir, "SELECT count(*) FROM steps") == [(1,)]


def test_only_the_main_process_records(runs_dir, tmp_path):
    from transformers import TrainerControl, TrainerState
    from trl import GRPOConfig

    from agentrl.integrations.trl import AgentrlCallback

    callback = AgentrlCallback(runs_dir=runs_dir)
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, bf16=False, report_to="none")
    state = TrainerState(is_world_process_zero=False, max_steps=3)
    callback.on_train_begin(args, state, TrainerControl())
    callback.on_log(args, state, TrainerControl(), logs={"loss": 1.0, "reward": 0.5})
    callback.on_train_end(args, state, TrainerControl())
    assert callback.run is None and list_run_dirs(runs_dir) == []


def test_an_engine_can_record_through_the_callback_into_its_own_run(runs_dir, tmp_path):
    """How our `trl` engine uses it: `run=` its own Run, its own rows per step, its probes after each step."""
    from agentrl.integrations.trl import AgentrlCallback
    from agentrl.record.rows import StepRecord, TrajectoryRecord
    from agentrl.record.run import Run
    from agentrl.record.rundir import new_run

    class EngineCallback(AgentrlCallback):
        def trajectories(self, step, completions, logs):
            return [TrajectoryRecord(step=step, traj_idx=i, task_id="t", reward=0.0, vetoed=i == 0) for i in range(4)]

        def step_row(self, step, logs, trajectories):
            return StepRecord.from_trajectories(step, trajectories, vetoed_updates=0, updates=3, metrics={"loss": logs["loss"]})

        def before_step_row(self, step):
            self.run.log_action_probs(step, "known_high", {"refund": 0.25, "request_approval": 0.75})

        def step_recorded(self, step):
            self.run.step_done(step)

    run = Run(new_run(runs_dir, "engine", "trl", "guarded", {}), total_steps=2)
    _train(tmp_path, EngineCallback(run=run), [length])
    assert run.dir.status()["status"] == "running"  # the engine, not the callback, ends its run
    run.finish("succeeded")
    assert store_rows(runs_dir, "SELECT step, vetoed, updates, success_rate FROM steps ORDER BY step") == [(1, 1, 3, 0.0), (2, 1, 3, 0.0)]
    assert store_rows(runs_dir, "SELECT count(*) FROM action_probs") == [(4,)]
