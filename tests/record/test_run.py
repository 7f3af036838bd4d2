"""Tests of agentrl/record/run.py: the one record writer every engine (and a user's script) uses.

A run's status goes queued -> running -> its final status, also when the work raises or the
disk fills at the last flush; a stop request is honoured during a step delay; status.json's step
follows the run without the caller writing it.
"""

from __future__ import annotations

import pytest

from helpers import wait_for
from agentrl.record.chunks import chunk_files
from agentrl.record.rows import RecordError, StepRecord, TrajectoryRecord
from agentrl.record.run import Run
from agentrl.record.rundir import new_run


@pytest.fixture
def run_dir(runs_dir):
    return new_run(runs_dir, "writer", "tabular", "outcome", {}, total_steps=3)


def log_one_step(run: Run, step: int) -> None:
    rows = [TrajectoryRecord(step=step, traj_idx=i, task_id="t", reward=1.0, success=True) for i in range(2)]
    run.log_trajectories(rows)
    run.log_step(StepRecord.from_trajectories(step, rows))
    run.step_done(step)


def test_status_goes_running_then_succeeded_with_every_row_flushed_first(run_dir):
    assert run_dir.status()["status"] == "queued"
    with Run(run_dir, total_steps=3) as run:
        assert run_dir.status()["status"] == "running"
        for step in (1, 2, 3):
            log_one_step(run, step)
        run.finish("succeeded")
    status = run_dir.status()
    assert (status["status"], status["step"], status["error"]) == ("succeeded", 3, None)
    assert len(chunk_files(run_dir.root, "trajectories")) >= 1
    assert sum(1 for _ in chunk_files(run_dir.root, "steps")) >= 1


def test_a_raising_run_is_failed_with_its_error(run_dir):
    with pytest.raises(ValueError):
        with Run(run_dir) as run:
            log_one_step(run, 1)
            raise ValueError("the model diverged")
    status = run_dir.status()
    assert status["status"] == "failed" and status["error"] == "ValueError: the model diverged"


def test_ctrl_c_in_a_users_loop_stops_it_and_marks_the_run_cancelled(run_dir):
    with pytest.raises(KeyboardInterrupt):
        with Run(run_dir):
            raise KeyboardInterrupt
    assert run_dir.status()["status"] == "cancelled"


def test_a_final_flush_that_fails_marks_the_run_failed_not_succeeded(run_dir, monkeypatch):
    import agentrl.record.chunks as chunks

    run = Run(run_dir)
    log_one_step(run, 1)
    monkeypatch.setattr(chunks, "_write_atomic", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    run.finish("succeeded")
    status = run_dir.status()
    assert status["status"] == "failed"
    assert "could not be written" in status["error"] and "No space left" in status["error"]


def test_a_stop_request_cuts_a_step_delay_short(run_dir):
    with Run(run_dir, step_delay=3600) as run:
        run_dir.request_stop()
        log_one_step(run, 1)  # would sleep an hour without the stop
        assert run.stop_requested()
        run.finish("cancelled")
    assert run_dir.status()["status"] == "cancelled"


def test_a_step_delay_that_has_already_passed_never_sleeps_a_negative_time(run_dir, monkeypatch):
    """On a loaded machine the deadline can pass between the loop's check and its sleep (issue 12:
    `sleep length must be non-negative` failed one run in six)."""
    import types

    import agentrl.record.run as run_module

    run = Run(run_dir, step_delay=0.1)
    # The clock jumps past the deadline right after the loop's check: the next read is late.
    readings = iter([100.0, 100.05, 100.2])
    slept: list[float] = []
    fake = types.SimpleNamespace(monotonic=lambda: next(readings, 100.2), sleep=slept.append)
    monkeypatch.setattr(run_module, "time", fake)
    try:
        run.step_done(1)
    finally:
        monkeypatch.undo()
        run.close()
    assert all(s >= 0 for s in slept), slept


def test_status_json_follows_the_step_without_the_caller_writing_it(run_dir):
    with Run(run_dir, flush_interval=0.05) as run:
        for step in (1, 2):
            log_one_step(run, step)
        assert wait_for(lambda: run_dir.status()["step"] == 2, timeout=10.0)
        run.finish("succeeded")


def test_hardware_and_status_are_sampled_even_when_steps_end_faster_than_the_interval(run_dir):
    """Every step's end wakes the flusher early; the once-an-interval sample must still happen."""
    import time

    with Run(run_dir, flush_interval=0.3) as run:
        deadline = time.monotonic() + 3.0
        step = 0
        while time.monotonic() < deadline:
            step += 1
            log_one_step(run, step)
            time.sleep(0.05)
        assert run_dir.status()["step"] >= 1
        run.finish("succeeded")
    from agentrl.record.chunks import chunk_files
    import pyarrow.parquet as pq

    samples = sum(pq.read_table(p).num_rows for p in chunk_files(run_dir.root, "hardware"))
    assert samples >= 3


def test_a_misspelt_or_missing_field_fails_in_the_call_naming_it(run_dir):
    with Run(run_dir) as run:
        with pytest.raises(RecordError, match="'rewad' \\(did you mean 'reward'\\?\\)"):
            run.log_trajectories(1, [{"traj_idx": 0, "task_id": "t", "rewad": 1.0}])
        with pytest.raises(RecordError, match="trajectories.task_id must be given"):
            run.log_trajectories(1, [{"traj_idx": 0, "reward": 1.0}])
        with pytest.raises(RecordError, match="rows must be TrajectoryRecord or dict, not list"):
            run.log_trajectories(1, [[0, "t", 1.0]])
        run.finish("succeeded")


def test_a_wrong_value_is_raised_by_the_next_call_naming_the_field_and_the_rest_is_recorded(run_dir):
    """Values are checked off the caller's path: the error comes one call later, with the step it was logged at."""
    run = Run(run_dir)
    run.log_trajectories(1, [{"traj_idx": 0, "task_id": "t", "reward": "lots"}, {"traj_idx": 1, "task_id": "t", "reward": 1.0}])
    run.log_step(1, {"loss": 0.5})
    run.writer.flush()  # the step is complete, so its rows are checked and written now
    # The call that raises an earlier row's error still records its own step.
    with pytest.raises(RecordError, match=r"trajectories.reward must be a number, not 'lots' \(logged with step 1\); that row was not recorded"):
        run.log_step(2, {"loss": 0.5})
    # A metric that is not a number is left out and named; its step keeps the other metrics.
    run.log_step(3, {"loss": "high", "kl": 0.1})
    with pytest.raises(RecordError, match=r"metric 'loss' must be a number or bool, not 'high'; it was left out \(logged with step 3\)"):
        run.finish("succeeded")
    import pyarrow.parquet as pq

    (path,) = chunk_files(run_dir.root, "trajectories")
    assert pq.read_table(path).column("traj_idx").to_pylist() == [1]
    steps = [row for p in chunk_files(run_dir.root, "steps") for row in pq.read_table(p).select(["step", "metrics"]).to_pylist()]
    assert steps == [{"step": 1, "metrics": [("loss", 0.5)]}, {"step": 2, "metrics": [("loss", 0.5)]},
                     {"step": 3, "metrics": [("kl", 0.1)]}]
    status = run_dir.status()
    assert status["status"] == "succeeded" and "1 rows did not fit" in status["warnings"][0]


def test_a_row_of_another_step_than_the_call_is_refused_in_the_call(run_dir):
    with Run(run_dir) as run:
        with pytest.raises(RecordError, match="a row of step 2 was logged as step 1"):
            run.log_trajectories(1, [{"step": 2, "traj_idx": 0, "task_id": "t", "reward": 1.0}])
        with pytest.raises(RecordError, match="a row of step 2 was logged as step 1"):
            run.log_trajectories(1, [TrajectoryRecord(step=2, traj_idx=0, task_id="t", reward=1.0)])
        with pytest.raises(RecordError, match="step must be an int"):
            run.log_step("one", {"loss": 1.0})


def test_a_second_writer_on_one_run_folder_is_refused_before_it_touches_the_status(run_dir):
    """Two writers would number their commits alike and overwrite each other's rows."""
    from agentrl.record.chunks import WriterBusyError

    with Run(run_dir) as first:
        status = run_dir.status()
        with pytest.raises(WriterBusyError, match="already being written"):
            Run(run_dir)
        assert run_dir.status() == status
        log_one_step(first, 1)
    with Run(run_dir) as again:  # released at close
        log_one_step(again, 2)


def test_a_steps_rows_are_never_committed_before_its_step_row(run_dir):
    """Whenever the flusher fires, every committed trajectory belongs to a committed step."""
    import pyarrow.parquet as pq

    from agentrl.record.chunks import list_commits

    with Run(run_dir, total_steps=3, flush_interval=3600) as run:
        for step in (1, 2):
            rows = [TrajectoryRecord(step=step, traj_idx=i, task_id="t", reward=1.0, success=True) for i in range(2)]
            run.log_trajectories(step, rows)
            run.log_action_probs(step, "known_high", {"refund": 0.5, "finish": 0.5})
            run.writer.flush()  # a timed flush landing mid-step
            for commit in list_commits(run_dir.root):
                steps = set(pq.read_table(commit.files["steps"]).column("step").to_pylist()) if "steps" in commit.files else set()
                for table in ("trajectories", "action_probs"):
                    if table in commit.files:
                        assert set(pq.read_table(commit.files[table]).column("step").to_pylist()) <= steps | {0}, table
            run.log_step(StepRecord.from_trajectories(step, rows))
        run.finish()


def test_a_removed_run_json_stops_the_run_which_ends_failed_saying_so_and_puts_it_back(run_dir):
    meta = run_dir.meta()
    with Run(run_dir, total_steps=3) as run:
        log_one_step(run, 1)
        run_dir.meta_path.unlink()
        log_one_step(run, 2)
        assert run.stop_requested()  # the work stops at its next check
        run.finish("succeeded")
    status = run_dir.status()
    assert (status["status"], status["error"]) == ("failed", "run.json was removed at step 2")
    assert run_dir.meta() == meta  # back, so the store finds the run, its rows and its end


def test_a_removed_run_folder_is_never_made_again(run_dir, tmp_path):
    with Run(run_dir, total_steps=3) as run:
        log_one_step(run, 1)
        run_dir.root.rename(tmp_path / "bin")
        with pytest.raises(Exception):  # the flusher cannot write: the next step says so
            for step in (2, 3):
                log_one_step(run, step)
                run.writer.flush()
        run.finish("succeeded")
    assert not run_dir.root.exists()
    assert run.status == "failed" and run.error.startswith("the run folder was removed at step")
