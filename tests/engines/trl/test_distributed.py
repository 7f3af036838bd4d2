"""A `trl` run on several processes (agentrl/engines/trl/distributed.py, rank.py, ranks.py).

The config and the machine checks, the `accelerate launch` command, the one-process `Ranks`,
the Launch form's new fields; then real runs on 2 CPU processes (accelerate's multi-CPU mode over
gloo) through `python -m agentrl train` and the launcher, read back through the store: the
whole batch recorded once, a cancel that stops both processes after the same step, a crash in
one process that fails the run with its reason. Nothing is mocked in the runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentrl.config import ConfigError, make_config
from agentrl.engines.registry import engine_of
from agentrl.engines.trl.distributed import STRATEGY_CONFIGS, accelerate_config, gpu_memory, launch_argv
from agentrl.engines.trl.ranks import Ranks, SilentRun
from agentrl.launcher import Launcher, create_run
from agentrl.record.rundir import RUN_DIR_ENV, RUNS_DIR_ENV, RunDir
from helpers import REPO_ROOT, agentrl, store_rows, wait_for

NO_GPU = pytest.mark.skipif(bool(gpu_memory()), reason="checks what a machine without a GPU refuses")


def lm_config(**overrides):
    """A short run on the built-in tiny refund model: 2 tasks x group 4 = 8 rollouts a step."""
    values = {"kind": "trl", "name": "lm-two", "scorer": "guarded", "rounds": 2, "group_size": 4, "eval_every": 0,
              "probe_every": 0, "lm": {"tasks_per_step": 2, "max_completion_length": 96, "max_tool_calls": 8},
              "distributed": {"num_processes": 2}}
    values.update(overrides)
    return make_config(**values)


def problem(**values):
    with pytest.raises(ConfigError) as error:
        make_config(kind="trl", **values)
    return error.value


# -- the config ----------------------------------------------------------------------------------


def test_the_default_is_one_process_and_nothing_distributed():
    settings = make_config(kind="trl").distributed
    assert (settings.num_processes, settings.strategy, settings.use_vllm, settings.vllm_mode) == (1, "ddp", False, "colocate")


def test_processes_that_cannot_split_a_step_evenly_are_refused_naming_the_field():
    error = problem(distributed={"num_processes": 3})  # 2 tasks x group 8 = 16 rollouts
    (found,) = error.problems
    assert found.label == "Processes and GPUs"
    assert found.message == ("3 processes cannot split a step's 16 rollouts (tasks per step 2 x group size 8) evenly; "
                             "use 1 or a divisor of 16 such as [2, 4, 8, 16]")


@pytest.mark.parametrize("values, says", [
    ({"strategy": "zero4"}, "unknown sharding strategy 'zero4'; use one of ['ddp', 'zero1', 'zero2', 'zero3', 'fsdp']"),
    ({"strategy": "zero3"}, "'zero3' splits the model across processes; set processes to 2 or more, or use 'ddp'"),
    ({"vllm_mode": "remote"}, "unknown vLLM mode 'remote'; use 'colocate' or 'server'"),
    ({"vllm_server_url": "http://127.0.0.1:8000"}, "a vLLM server URL is used only with vLLM in 'server' mode"),
    ({"num_processes": 0}, "must be at least 1"),
])
def test_settings_that_cannot_work_anywhere_are_one_line_errors(values, says):
    error = problem(distributed=values)
    assert "\n" not in str(error)
    assert says in str(error) or says in [p.message.split(" (you entered")[0] for p in error.problems]


@NO_GPU
@pytest.mark.parametrize("strategy, needs", [("zero1", "DeepSpeed ZeRO"), ("zero3", "DeepSpeed ZeRO"), ("fsdp", "FSDP")])
def test_sharding_strategies_are_refused_on_a_machine_without_gpus(strategy, needs):
    config = lm_config(distributed={"num_processes": 2, "strategy": strategy})
    assert engine_of(config).preflight(config).refusal == (
        f"sharding strategy {strategy!r} needs GPUs ({needs} shards across CUDA devices) and this machine has none; "
        "use 'ddp', which runs the 2 processes on the CPU over gloo")


@NO_GPU
def test_more_cpu_processes_than_cores_are_refused():
    cores = os.cpu_count()
    config = lm_config(group_size=cores + 1, lm={"tasks_per_step": 1}, distributed={"num_processes": cores + 1})
    assert engine_of(config).preflight(config).refusal == (
        f"{cores + 1} CPU processes are more than this machine's {cores} cores (no GPU found); set processes to at most {cores}")


@NO_GPU
def test_vllm_is_refused_without_a_gpu_and_the_config_still_loads():
    config = lm_config(distributed={"num_processes": 1, "use_vllm": True, "vllm_mode": "server",
                                    "vllm_server_url": "http://127.0.0.1:8000"})
    assert engine_of(config).preflight(config).refusal.startswith("vLLM (use_vllm) needs a GPU and this machine has none")


@NO_GPU
def test_train_refuses_fsdp_here_in_one_line_before_making_a_run_folder(tmp_path):
    path = tmp_path / "fsdp.json"
    path.write_text(json.dumps({"kind": "trl", "distributed": {"num_processes": 2, "strategy": "fsdp"}}))
    result = agentrl("train", "--config", path, "--runs-dir", tmp_path / "runs")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: sharding strategy 'fsdp' needs GPUs (FSDP shards across CUDA devices) and this machine has none; "
        "use 'ddp', which runs the 2 processes on the CPU over gloo"]
    assert not (tmp_path / "runs").exists()


def test_a_two_process_cpu_run_passes_the_preflight_with_its_budget():
    config = lm_config()
    preflight = engine_of(config).preflight(config)
    assert preflight.refusal is None
    assert "per process  2 processes" in preflight.report and "accelerate launch" in preflight.report
    assert "Each step's rollouts are split among 2 processes (ddp" in engine_of(config).cost(config)


# -- the command -----------------------------------------------------------------------------------


def test_accelerate_launch_is_an_argument_list_with_trls_config_loopback_and_a_free_port():
    argv = launch_argv(lm_config())
    assert argv[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert argv[-2:] == ["-m", "agentrl.engines.trl.rank"]
    options = dict(zip(argv[3:-2:2], argv[4:-2:2]))
    assert options == {"--config_file": str(accelerate_config("ddp")), "--num_processes": "2", "--num_machines": "1",
                       "--main_process_ip": "127.0.0.1", "--main_process_port": "0", "--mixed_precision": "no",
                       "--dynamo_backend": "no"}


@pytest.mark.parametrize("strategy", sorted(STRATEGY_CONFIGS))
def test_every_strategy_names_a_config_trl_ships(strategy):
    path = accelerate_config(strategy)
    assert path.is_file() and path.parent.name == "accelerate_configs"
    text = path.read_text()
    assert {"ddp": "MULTI_GPU", "zero1": "zero_stage: 1", "zero2": "zero_stage: 2", "zero3": "zero_stage: 3",
            "fsdp": "fsdp_version: 2"}[strategy] in text


def test_grpo_gets_each_process_its_share_of_the_batch_and_vllm_passed_through(tmp_path):
    pytest.importorskip("trl")
    from agentrl.engines.trl.engine import grpo_args

    args = grpo_args(lm_config(distributed={"num_processes": 2}), tmp_path)
    assert (args.per_device_train_batch_size, args.num_generations, args.use_vllm) == (4, 4, False)
    one = grpo_args(lm_config(distributed={"num_processes": 1}), tmp_path)
    assert one.per_device_train_batch_size == 8 and (one.use_vllm, one.vllm_mode) == (False, "colocate")
    served = grpo_args(lm_config(distributed={"num_processes": 1, "use_vllm": True, "vllm_mode": "server",
                                              "vllm_server_url": "http://127.0.0.1:8123"}), tmp_path)
    assert (served.use_vllm, served.vllm_mode, served.vllm_server_base_url) == (True, "server", "http://127.0.0.1:8123")


# -- one process: Ranks is the identity; other processes write nothing --------------------------------


def test_one_process_ranks_return_what_they_are_given():
    ranks, records, batch = Ranks(), [object(), object()], object()
    assert ranks.main and not ranks.many
    assert ranks.whole_step(records, batch) == (records, batch) and ranks.whole_step(records, batch)[0] is records
    assert ranks.agree(True) is True and ranks.agree(False) is False and ranks.sums([3, 0]) == [3, 0]
    with pytest.raises(ValueError, match="process index 2 is not among 2 processes"):
        Ranks(2, 2)


def test_a_silent_run_takes_every_call_and_writes_nothing(runs_dir):
    run = create_run(runs_dir, lm_config())
    before = sorted(p.name for p in run.root.iterdir())
    silent = SilentRun(run)
    silent.log_trajectories(1, [{"traj_idx": 0, "task_id": "t", "reward": 1.0}])
    silent.log_step(1, {"loss": 0.5})
    silent.log_evals(1, [])
    silent.log_action_probs(1, "s", {"a": 1.0})
    silent.log("events", [])
    silent.writer.flush_soon()
    silent.step_done(1)
    run.request_stop()
    assert silent.stop() is False  # the main process decides
    assert sorted(p.name for p in run.root.iterdir()) == sorted([*before, "stop"])
    assert run.status()["status"] == "queued"


def test_the_launch_form_shows_the_new_fields_by_label_and_the_budget_per_process(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60)
    at.switch_page("pages/1_Launch.py")
    at.run()
    next(s for s in at.selectbox if s.label == "Preset").set_value("lm-refund-guarded").run()
    assert "Processes and GPUs" in [m.value.strip("*") for m in at.markdown]
    strategy = next(s for s in at.selectbox if s.label == "Sharding strategy")
    assert list(strategy.options) == ["ddp", "zero1", "zero2", "zero3", "fsdp"]
    assert next(s for s in at.selectbox if s.label == "Generation mode (vLLM)").options == ["colocate", "server"]
    assert any(c.label == "Generate with vLLM" for c in at.checkbox)
    assert any(t.label == "Server URL (vLLM)" for t in at.text_input)
    next(n for n in at.number_input if n.label == "Processes").set_value(2).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("per process  2 processes" in c.value for c in at.code)
    if not gpu_memory():
        next(s for s in at.selectbox if s.label == "Sharding strategy").set_value("zero3").run()
        assert any("needs GPUs" in e.value for e in at.error)
        assert next(b for b in at.button if b.label == "Start run").disabled


# -- real runs on 2 CPU processes ------------------------------------------------------------------------


def write_config(tmp_path: Path, **overrides) -> Path:
    path = tmp_path / "config.json"
    path.write_text(lm_config(**overrides).to_json())
    return path


def processes_of(run: RunDir) -> list[psutil.Process]:
    """Every live process started for `run` (the engine passes the run folder down to each rank)."""
    root, found = str(run.root.resolve()), []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(RUN_DIR_ENV) == root:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def only_run(runs_dir: Path) -> RunDir:
    (folder,) = [p for p in runs_dir.iterdir() if (p / "run.json").is_file()]
    return RunDir(folder)


@pytest.mark.slow
@pytest.mark.lm
def test_a_two_process_run_records_each_step_once_with_the_whole_batch(tmp_path):
    runs_dir = tmp_path / "runs"
    result = agentrl("train", "--config", write_config(tmp_path), "--runs-dir", runs_dir, timeout=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "accelerate launch: 2 processes, ddp" in result.stdout
    # Rank 1 prints and records nothing: every step's line is there once.
    assert [line.split()[1] for line in result.stdout.splitlines() if line.startswith("step ")] == ["1/2", "2/2"]

    assert store_rows(runs_dir, "SELECT status, kind FROM runs") == [("succeeded", "trl")]
    steps = store_rows(runs_dir, "SELECT step, metrics['reward'], transitions FROM steps ORDER BY step")
    assert [s[0] for s in steps] == [1, 2]
    for step, logged_reward, transitions in steps:
        rows = store_rows(runs_dir, "SELECT traj_idx, task_id, reward, len(actions) FROM trajectories WHERE step = ? "
                                    "ORDER BY traj_idx", [step])
        # The whole batch, once: 8 rollouts numbered 0..7, the first group (rank 0's 4) and the second (rank 1's).
        assert [r[0] for r in rows] == list(range(8))
        groups = [{r[1] for r in rows[:4]}, {r[1] for r in rows[4:]}]
        assert all(len(g) == 1 for g in groups) and groups[0] != groups[1]
        # TRL's logged reward is the mean over every process's rollouts: it is the mean of the rows recorded.
        assert logged_reward == pytest.approx(sum(r[2] for r in rows) / 8, abs=1e-5)
        assert transitions == sum(r[3] for r in rows)
    assert store_rows(runs_dir, "SELECT count(*), count(DISTINCT (step, traj_idx)) FROM trajectories") == [(16, 16)]
    assert store_rows(runs_dir, "SELECT step, split, count(*) FROM evals GROUP BY ALL ORDER BY ALL") == [
        (0, "held_out", 4), (2, "held_out", 4), (2, "probe", 2)]

    run = only_run(runs_dir)
    status = run.status()
    assert (status["status"], status["reported_status"], status["exit_code"]) == ("succeeded", "succeeded", 0)
    assert status["writer_pid"] != status["pid"]  # rank 0 wrote the chunks; the run process only the status
    assert not (run.root / "ranks").exists() and (run.root / "adapter" / "adapter_model.safetensors").is_file()
    budgets = dict(store_rows(runs_dir, "SELECT source || ':' || component, bytes FROM budgets"))
    assert budgets["estimate:launcher"] > 0 and budgets["estimate:total"] > 2 * 900_000_000
    # The measured peak is every process of the run (each rank alone imports torch, over 0.36 GB).
    assert budgets["measured:total"] > 2 * 360_000_000
    assert processes_of(run) == []


@pytest.mark.slow
@pytest.mark.lm
def test_cancelling_a_two_process_run_stops_both_after_the_same_step(tmp_path):
    runs_dir = tmp_path / "runs"
    launcher = Launcher(runs_dir)
    run = RunDir(runs_dir / launcher.start(lm_config(name="lm-two-cancel", rounds=40, step_delay=0.5)))
    assert wait_for(lambda: (run.status() or {}).get("step", 0) >= 1, timeout=240), run.tail_log(20)
    ranks = [p for p in processes_of(run) if "RANK" in p.environ()]  # torchrun numbers each training process
    assert sorted(p.environ()["RANK"] for p in ranks) == ["0", "1"]
    launcher.cancel(run.run_id)  # the Live page's Cancel: the stop file
    # No `reconcile` here: it would kill the group after its grace period; this asks for a clean stop.
    assert wait_for(lambda: (run.status() or {}).get("status") in ("succeeded", "failed", "cancelled"), timeout=150), run.tail_log(20)
    status = run.status()
    assert status["status"] == "cancelled" and status["reported_status"] == "cancelled"
    assert status["exit_code"] == 0, run.tail_log(20)  # accelerate exits 0 only when every process did
    assert wait_for(lambda: processes_of(run) == [], timeout=30), processes_of(run)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)
    steps = [s for (s,) in store_rows(runs_dir, "SELECT step FROM steps ORDER BY step")]
    assert steps == list(range(1, len(steps) + 1)) and 1 <= len(steps) < 40
    per_step = store_rows(runs_dir, "SELECT count(*), count(DISTINCT traj_idx) FROM trajectories GROUP BY step")
    assert per_step == [(8, 8)] * len(steps)
    assert store_rows(runs_dir, "SELECT status FROM runs") == [("cancelled",)]
    assert launcher.reconcile() == []


CRASHING_TASK = '''"""The refund task, except that process 1 of a multi-process run fails in its first training reward."""
import copy
import os

from agentrl.tasks.refund.task import REFUND_TASK, outcome as refund_outcome


def outcome(completions, environments=None, trainer_state=None, **kwargs):
    if trainer_state is not None and os.environ.get("RANK") == "1":  # TRL passes trainer_state in training only
        raise RuntimeError("reward function failed on purpose on rank 1")
    return refund_outcome(completions, environments=environments, **kwargs)


TASK = copy.copy(REFUND_TASK)
TASK.name = "refund-crash"
TASK.reward_funcs = [outcome, *REFUND_TASK.reward_funcs[1:]]
'''


@pytest.mark.slow
@pytest.mark.lm
def test_a_process_that_crashes_fails_the_run_with_its_reason_and_leaves_none_behind(tmp_path):
    task = tmp_path / "crashing_task.py"
    task.write_text(CRASHING_TASK)
    runs_dir = tmp_path / "runs"
    result = agentrl("train", "--config", write_config(tmp_path, task=f"{task}:TASK"), "--runs-dir", runs_dir, timeout=280)
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    run = only_run(runs_dir)
    reason = "rank 1 of 2 failed: RuntimeError: reward function failed on purpose on rank 1"
    assert run.status()["status"] == "failed" and run.status()["error"] == reason
    assert json.loads((run.root / "ranks" / "1.error").read_text())["rank"] == 1
    assert store_rows(runs_dir, "SELECT status, error FROM runs") == [("failed", reason)]
    assert store_rows(runs_dir, "SELECT count(*) FROM steps") == [(0,)]
    assert processes_of(run) == []
