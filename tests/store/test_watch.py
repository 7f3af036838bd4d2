"""Tests of agentrl/store/watch.py and the wake-up of `BackgroundIngest`: a commit is ingested at
once, not at the next tick of the clock."""

from __future__ import annotations

import threading
import time

from helpers import wait_for
from agentrl.record.run import Run
from agentrl.record.rundir import new_run
from agentrl.store.ingest import BackgroundIngest, Ingestor, connect
from agentrl.store.watch import CommitWatch


def test_a_commit_is_a_change_and_quiet_is_not(runs_dir):
    run_dir = new_run(runs_dir, "watched", "script", "outcome", {})
    watch = CommitWatch(runs_dir, rescan_s=0.0)
    assert not watch.changed()  # no chunks yet
    run = Run(run_dir, flush_interval=3600)
    run.log_step(1, {"loss": 1.0})
    run.writer.flush()
    assert watch.changed()  # found on the rescan: a new run's first commit
    assert not watch.changed()
    run.log_step(2, {"loss": 1.0})
    run.writer.flush()
    assert watch.changed()
    run.finish()


def test_a_run_idle_past_the_window_is_no_longer_polled(runs_dir):
    run_dir = new_run(runs_dir, "idle", "script", "outcome", {})
    with Run(run_dir, flush_interval=3600) as run:
        run.log_step(1, {"loss": 1.0})
    watch = CommitWatch(runs_dir, rescan_s=0.0, active_window_s=0.0)
    time.sleep(0.01)
    assert not watch.changed()


def test_background_ingest_takes_a_commit_long_before_its_next_tick(runs_dir):
    runs_dir.mkdir(parents=True)
    con = connect(runs_dir)
    ingestor = Ingestor(con, runs_dir)
    lock = threading.Lock()

    def tick() -> None:
        with lock:
            ingestor.ingest()

    def steps() -> int:
        with lock:
            return con.execute("SELECT count(*) FROM steps").fetchone()[0]

    # One tick now, the next in an hour: only the wake-up can take the step in time.
    loop = BackgroundIngest(tick, interval=3600, wake=CommitWatch(runs_dir, rescan_s=0.0).changed, poll=0.01)
    try:
        time.sleep(0.2)
        with Run(new_run(runs_dir, "woken", "script", "outcome", {})) as run:
            run.log_step(1, {"loss": 1.0})
            assert wait_for(lambda: steps() == 1, timeout=20), "the commit was not ingested until the clock's tick"
    finally:
        loop.stop()
        con.close()


def test_a_wake_up_that_fails_falls_back_to_the_clock(runs_dir):
    runs_dir.mkdir(parents=True)
    ticks: list[float] = []

    def broken() -> bool:
        raise OSError("watch failed")

    loop = BackgroundIngest(lambda: ticks.append(time.monotonic()), interval=0.05, wake=broken, poll=0.01)
    try:
        assert wait_for(lambda: len(ticks) >= 4, timeout=10)
        assert loop.wake is None
    finally:
        loop.stop()


def test_a_new_runs_first_commit_is_a_change_without_waiting_for_the_next_listing(runs_dir):
    """issue 28: a new run's folder was found only by the once-a-second listing."""
    runs_dir.mkdir(parents=True)
    watch = CommitWatch(runs_dir, rescan_s=3600)  # the clock's listing never comes in this test
    assert not watch.changed()
    run = Run(new_run(runs_dir, "new", "script", "outcome", {}), flush_interval=3600)
    assert not watch.changed()  # a run folder, nothing committed yet
    run.log_step(1, {"loss": 1.0})
    run.writer.flush()
    assert watch.changed()
    assert not watch.changed()
    run.log_step(2, {"loss": 1.0})
    run.writer.flush()
    assert watch.changed()
    run.finish()
