"""Compaction (agentrl/store/compact.py): a finished run's commits rewritten as one, and nothing lost.

The promises, each attacked: after `compact` a run has one commit (one Parquet file per table) and
its old files are gone; the ledger names only that commit, so no ingest takes a row twice;
`rebuild` from the compacted chunks and the decisions log gives back the same store, reviews and
all; and a compaction SIGKILLed at any step loses nothing, in the live store and in a store
rebuilt from what it left. Runs are the real preset pair (trained once per session) or written
by the real ChunkWriter; the CLI runs in a subprocess.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.record.chunks import ChunkWriter, claim_run, list_commits, release_run
from agentrl.record.rows import CHUNK_TABLES
from agentrl.record.rundir import DB_FILENAME, create_run_dir, iso, utc_now
from agentrl.store import queries
from agentrl.store.compact import compact_run
from agentrl.store.health import rebuild
from agentrl.store.ingest import Ingestor, connect
from helpers import REPO_ROOT, agentrl, ok
from test_health import decide_everything, snapshot

RUN_ID = "20260101-000000-compact-0000"
STEPS = 24
GROUP = 8


def counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in (*CHUNK_TABLES, "step_components")}


def chunk_bytes(run_root: Path) -> int:
    return sum(p.stat().st_size for p in (run_root / "chunks").iterdir())


def components(con, run_ids) -> list[tuple]:
    frame = queries.reward_components_for_runs(con, run_ids)
    return [(r.run_id, r.step, r.component, round(r.value, 9)) for r in frame.itertuples()]


def test_compact_leaves_one_commit_per_run_and_rebuild_from_it_loses_no_row_and_no_review(pair_store):
    con, runs_dir, ids = pair_store
    decide_everything(con, runs_dir, ids)
    roots = {run_id: runs_dir / run_id for run_id in ids.values()}
    commits_before = {run_id: len(list_commits(root)) for run_id, root in roots.items()}
    bytes_before = {run_id: chunk_bytes(root) for run_id, root in roots.items()}
    rows_before = counts(con)
    reviews_before = con.execute("SELECT * FROM reviews ORDER BY review_id").fetchall()
    components_before = components(con, list(ids.values()))
    con.close()

    result = ok(agentrl("compact", "--runs-dir", runs_dir))
    assert result.stdout.count(" commits -> 1 (") == 2, result.stdout
    con = connect(runs_dir)
    try:
        for run_id, root in roots.items():
            (commit,) = list_commits(root)  # one commit ...
            names = sorted(p.name for p in (root / "chunks").iterdir())
            assert names == sorted([commit.name, *(Path(p).name for p in commit.files.values())])  # ... nothing else
            assert commit.number == commits_before[run_id]  # numbered after the commits it replaced
            assert chunk_bytes(root) < bytes_before[run_id]
            ledger = queries.ledger_keys(con, run_id)
            assert ledger == [f"{run_id}/chunks/{commit.name}"]  # the ledger names it alone
        assert Ingestor(con, runs_dir).ingest().files == 0  # nothing is taken twice
        assert counts(con) == rows_before
        compacted = snapshot(con)
    finally:
        con.close()

    (runs_dir / DB_FILENAME).unlink()
    ok(agentrl("rebuild", "--runs-dir", runs_dir))
    con = connect(runs_dir)
    try:
        rebuilt = snapshot(con)
        assert counts(con) == rows_before
        assert con.execute("SELECT * FROM reviews ORDER BY review_id").fetchall() == reviews_before
        assert components(con, list(ids.values())) == components_before
        # Every table as it was, the ledger included; step_components compared by value above.
        assert {t: v for t, v in rebuilt.items() if t != "step_components"} == \
               {t: v for t, v in compacted.items() if t != "step_components"}
    finally:
        con.close()


def write_run(runs_dir: Path, steps: int = STEPS, status: str = "succeeded"):
    run = create_run_dir(runs_dir, RUN_ID, {"run_id": RUN_ID, "name": "compact", "kind": "script", "scorer": "outcome",
                                            "created_at": iso(utc_now()), "config": {}})
    with ChunkWriter(run.root, interval=3600) as writer:
        for step in range(1, steps + 1):
            writer.append("trajectories", [{"run_id": RUN_ID, "step": step, "traj_idx": i, "task_id": "t",
                                            "reward": float(i), "components": {"outcome": 1.0, "cost": -0.01 * i}}
                                           for i in range(GROUP)])
            writer.append("action_probs", {"run_id": RUN_ID, "step": step, "state": "s", "action": "a", "prob": 1.0})
            writer.append("steps", {"run_id": RUN_ID, "step": step, "ts": utc_now()})
            writer.flush()
    run.update_status(status=status, ended_at=iso(utc_now()))
    return run


EXPECTED = {"trajectories": STEPS * GROUP, "steps": STEPS, "action_probs": STEPS, "step_components": STEPS * 2}


def assert_whole(con) -> None:
    got = counts(con)
    assert {t: got[t] for t in EXPECTED} == EXPECTED
    twice = con.execute("SELECT count(*) FROM (SELECT step, traj_idx FROM trajectories GROUP BY ALL HAVING count(*) > 1)")
    assert twice.fetchone()[0] == 0


def test_a_run_is_compacted_only_when_ended_fully_taken_and_free_of_writers(runs_dir):
    run = write_run(runs_dir, status="running")
    (commit,) = [c for c in list_commits(run.root) if c.number == 3]
    commit.files["steps"].write_bytes(b"torn")  # a commit the store cannot take ...
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir, log=lambda message: None)
        ingestor.ingest()
        assert compact_run(ingestor, run).skipped == "not compacted: the run has not ended"
        run.update_status(status="succeeded")
        ingestor.ingest()
        assert RUN_ID in ingestor.drained
        assert "has not taken 1 of its commits" in compact_run(ingestor, run).skipped  # ... is never compacted away
        assert len(list_commits(run.root)) == STEPS
    finally:
        con.close()


def test_a_writer_holding_the_run_keeps_compaction_off(runs_dir):
    run = write_run(runs_dir)
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        ingestor.ingest()
        ingestor.ingest()  # the tick that finds nothing more: the run is drained
        held = claim_run(run.root)
        try:
            assert compact_run(ingestor, run).skipped == "not compacted: a writer holds the run"
        finally:
            release_run(held)
        report = compact_run(ingestor, run)
        assert (report.commits, report.rows) == (STEPS, STEPS * (GROUP + 2))
        assert len(list_commits(run.root)) == 1
    finally:
        con.close()


COMPACT_UNTIL = """
import os, signal, sys
from pathlib import Path
from agentrl.record.rundir import RunDir
from agentrl.store.compact import compact_run
from agentrl.store.ingest import Ingestor, connect

runs_dir, run_id, point = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
con = connect(runs_dir)
ingestor = Ingestor(con, runs_dir)
while ingestor.ingest().files:
    pass

def fault(at):
    if at == point:
        os.kill(os.getpid(), signal.SIGKILL)

compact_run(ingestor, RunDir(runs_dir / run_id), fault=fault)
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["table", "marker", "ledger", "removing"])
def test_a_compaction_sigkilled_at_any_step_loses_nothing(runs_dir, tmp_path, point):
    run = write_run(runs_dir)
    proc = subprocess.run([sys.executable, "-c", COMPACT_UNTIL, str(runs_dir), RUN_ID, point], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr

    # What it left, rebuilt from scratch: the chunks alone hold every row once.
    copy = tmp_path / "copy"
    shutil.copytree(runs_dir, copy)
    for stale in copy.glob(f"{DB_FILENAME}*"):
        stale.unlink()
    rebuild(copy)
    con = connect(copy)
    try:
        assert_whole(con)
    finally:
        con.close()

    # The live store (its log replayed): the next ingest takes nothing twice, the next compaction finishes.
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        while ingestor.ingest().files:
            pass
        assert_whole(con)
        compact_run(ingestor, run)
        (commit,) = list_commits(run.root)
        assert sorted(p.name for p in (run.root / "chunks").iterdir()) == \
               sorted([commit.name, *(Path(p).name for p in commit.files.values())])
        assert queries.ledger_keys(con, RUN_ID) == [f"{RUN_ID}/chunks/{commit.name}"]
        assert Ingestor(con, runs_dir).ingest().files == 0
        assert_whole(con)
    finally:
        con.close()
    (runs_dir / DB_FILENAME).unlink()
    rebuild(runs_dir)
    con = connect(runs_dir)
    try:
        assert_whole(con)
    finally:
        con.close()
