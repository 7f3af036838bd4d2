"""Incremental discovery of new commits (agentrl/store/discovery.py): a tick never lists a running
run's folder again after the first look, so its cost does not grow with the steps already taken.

The listings are counted by wrapping the real `LocalFolder.names` (it still lists); the commits are
written by the real ChunkWriter and taken by the real Ingestor into a DuckDB file.
"""

from __future__ import annotations

import os

import pytest

from agentrl.record.chunks import ChunkWriter, list_commits
from agentrl.record.locations import LocalFolder
from agentrl.record.rundir import create_run_dir, iso, utc_now
from agentrl.store.discovery import PROBE_LIMIT
from agentrl.store.ingest import Ingestor, connect

RUN_ID = "20260101-000000-live-0000"


@pytest.fixture
def listings(monkeypatch):
    """How many times each chunk folder was listed (by anyone: a writer lists it once as it starts)."""
    seen: dict[str, int] = {}
    real = LocalFolder.names

    def counted(self):
        seen[str(self.path)] = seen.get(str(self.path), 0) + 1
        return real(self)

    monkeypatch.setattr(LocalFolder, "names", counted)
    return seen


@pytest.fixture
def live(runs_dir):
    run = create_run_dir(runs_dir, RUN_ID, {"run_id": RUN_ID, "name": "live", "kind": "script", "scorer": "outcome",
                                            "created_at": iso(utc_now()), "config": {}})
    run.update_status(status="running", pid=os.getpid())
    return run


def commit_steps(run, steps) -> None:
    writer = ChunkWriter(run.root, interval=3600)
    for step in steps:
        writer.append("trajectories", [{"run_id": RUN_ID, "step": step, "traj_idx": 0, "task_id": "t", "reward": 1.0,
                                        "components": {"outcome": 1.0}}])
        writer.append("steps", {"run_id": RUN_ID, "step": step, "ts": utc_now()})
        writer.flush()
    writer.close()


def stored_steps(con) -> list[int]:
    return [r[0] for r in con.execute("SELECT step FROM steps ORDER BY step").fetchall()]


def test_a_running_run_is_listed_once_then_each_new_commit_is_found_by_its_number(runs_dir, live, listings):
    commit_steps(live, range(1, 51))
    folder = str(live.root / "chunks")
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        before = listings[folder]
        assert ingestor.ingest().files == 50
        assert listings[folder] == before + 1  # the first look at a run lists its folder
        for step in range(51, 56):
            commit_steps(live, [step])
            before = listings[folder]
            assert ingestor.ingest().files == 1
            assert ingestor.ingest().files == 0  # an idle tick
            assert listings[folder] == before  # ... and no tick since listed it again
        assert stored_steps(con) == list(range(1, 56))

        live.update_status(status="succeeded", ended_at=iso(utc_now()))
        before = listings[folder]
        ingestor.ingest()  # the run ended: a listing finds whatever a look missed, and one sweeps a cut flush
        assert listings[folder] == before + 2 and RUN_ID in ingestor.drained
        ingestor.ingest()
        assert listings[folder] == before + 2  # a drained run is not looked at again
    finally:
        con.close()


def test_a_backlog_past_the_probe_limit_is_listed_and_taken_whole(runs_dir, live, listings):
    commit_steps(live, [1])
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        ingestor.ingest()
        commit_steps(live, range(2, PROBE_LIMIT + 12))  # more waiting than a tick looks for one by one
        before = listings[str(live.root / "chunks")]
        report = ingestor.ingest()
        assert report.files == PROBE_LIMIT + 10 and report.skipped == []
        assert stored_steps(con) == list(range(1, PROBE_LIMIT + 12))
        assert listings[str(live.root / "chunks")] == before + 1
    finally:
        con.close()


def test_a_commit_after_a_gap_is_taken_when_the_run_ends_and_a_restart_takes_only_what_is_new(runs_dir, live):
    commit_steps(live, [1, 2])
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        ingestor.ingest()
        # A commit numbered past a missing one (never written by our writer, which numbers without
        # gaps): a look for the next number does not see it ...
        (commit,) = [c for c in list_commits(live.root) if c.number == 1]
        for table, path in commit.files.items():
            os.link(path, path.with_name(path.name.replace("00000001", "00000003")))
        os.link(commit.marker, commit.marker.with_name("00000003.commit"))
        assert ingestor.ingest().files == 0
        # ... the listing after the run's end does, and takes it once.
        live.update_status(status="succeeded", ended_at=iso(utc_now()))
        assert ingestor.ingest().files == 1
        assert stored_steps(con) == [1, 2, 2]
        con.close()
        con = connect(runs_dir)
        assert Ingestor(con, runs_dir).ingest().files == 0  # a restart takes nothing twice
    finally:
        con.close()
