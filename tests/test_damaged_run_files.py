"""Garbage in each run file costs that run only, named with its path: in the launcher's reconcile,
`runs`, `ingest` and the dashboard's ingest loop (issue 12, finding 1).

One good run is trained once; each test copies it beside runs whose run.json or status.json is
damaged in one of the ways the issue found, and checks the good run still goes through whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentrl.launcher import Launcher
from agentrl.record.rundir import RUNS_DIR_ENV, RunDir, list_run_dirs
from agentrl.store import queries
from agentrl.store.ingest import Ingestor, connect
from helpers import agentrl, ok

DAMAGE = {
    # run folder name: (file, bytes)
    "bad-status-not-utf8": ("status.json", b'\xff\xfe{"status": "running"}'),
    "bad-status-pid-abc": ("status.json", b'{"status": "running", "pid": "abc"}'),
    "bad-status-pid-minus-5": ("status.json", b'{"status": "running", "pid": -5, "create_time": 1.0}'),
    "bad-status-create-time": ("status.json", b'{"status": "running", "pid": 1, "create_time": "yesterday"}'),
    "bad-meta-list": ("run.json", b"[1,2]"),
    "bad-meta-not-utf8": ("run.json", b"\xff\xfe\x00"),
    "bad-meta-total-steps": ("run.json", b'{"run_id": "x", "name": "x", "total_steps": "lots", "config": {}}'),
}


@pytest.fixture(scope="module")
def _good_run(tmp_path_factory) -> tuple[Path, str]:
    runs_dir = tmp_path_factory.mktemp("good") / "runs"
    ok(agentrl("train", "--preset", "refund-outcome", "--runs-dir", runs_dir, "--quiet"))
    for path in runs_dir.glob("agentrl.duckdb*"):
        path.unlink()
    (run,) = list_run_dirs(runs_dir)
    return run.root, run.run_id


@pytest.fixture
def damaged(_good_run, runs_dir) -> tuple[Path, str]:
    """A runs dir with the good run and one damaged copy of it per case of DAMAGE."""
    good_root, good_id = _good_run
    runs_dir.mkdir()
    shutil.copytree(good_root, runs_dir / good_id)
    for name, (file, content) in DAMAGE.items():
        shutil.copytree(good_root, runs_dir / name)
        (runs_dir / name / file).write_bytes(content)
    return runs_dir, good_id


def test_reconcile_skips_each_damaged_run_naming_its_file(damaged):
    runs_dir, good_id = damaged
    launcher = Launcher(runs_dir)
    assert launcher.reconcile() == []
    damaged_status = {name for name, (file, _) in DAMAGE.items() if file == "status.json"}
    assert set(launcher.unreadable) == damaged_status
    for name in damaged_status:
        assert launcher.unreadable[name].startswith(str(runs_dir / name / "status.json"))
    assert RunDir(runs_dir / good_id).status()["status"] == "succeeded"


def test_ingest_takes_the_good_run_whole_and_names_each_damaged_file_once(damaged):
    runs_dir, good_id = damaged
    logged = []
    con = connect(runs_dir)
    try:
        report = Ingestor(con, runs_dir, log=logged.append).ingest()
        assert sorted(Path(p).relative_to(runs_dir).as_posix() for p, _ in report.skipped) == sorted(
            f"{name}/{file}" for name, (file, _) in DAMAGE.items())
        assert list(queries.list_runs(con)["run_id"]) == [good_id]
        assert queries.trajectory_count(con, good_id) == 30 * 32
        errors = queries.ingest_errors(con)
        assert len(errors) == len(DAMAGE)
        # Named once: a second pass over unchanged files says nothing more.
        again = Ingestor(con, runs_dir, log=logged.append).ingest()
        assert again.skipped == [] and len(logged) == len(DAMAGE)

        # A damaged file that is repaired is taken, and its error no longer stands.
        shutil.copy2(runs_dir / good_id / "status.json", runs_dir / "bad-status-pid-abc" / "status.json")
        fixed = Ingestor(con, runs_dir, log=logged.append).ingest()
        # The repaired copy lands whole: the same rows as the good run it was copied from.
        assert fixed.skipped == [] and fixed.rows == report.rows > 1000
        assert "bad-status-pid-abc/status.json" not in set(queries.ingest_errors(con)["path"])
    finally:
        con.close()


def test_cli_runs_and_ingest_list_the_good_run_and_name_each_damaged_file(damaged):
    runs_dir, good_id = damaged
    listing = ok(agentrl("runs", "--runs-dir", runs_dir))
    lines = listing.stdout.splitlines()
    assert any(line.startswith(good_id) and "succeeded" in line for line in lines)
    for name, (file, _) in DAMAGE.items():
        (line,) = [line for line in lines if line.startswith(name + " ")]
        assert "unreadable" in line and str(runs_dir / name / file) in line
    assert "Traceback" not in listing.stderr

    result = ok(agentrl("ingest", "--runs-dir", runs_dir))
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == len(DAMAGE)
    for name, (file, _) in DAMAGE.items():
        assert f"skipped {runs_dir / name / file}: " in result.stderr
    # Every row of the good run's committed chunks, and nothing of the damaged ones.
    import pyarrow.parquet as pq

    chunks = sorted((runs_dir / good_id / "chunks").glob("*.parquet"))
    rows = sum(pq.read_metadata(path).num_rows for path in chunks)
    assert rows > 1000 and f"ingested {rows} rows from " in result.stdout


def test_the_dashboard_ingest_loop_keeps_going_past_damaged_runs(damaged, monkeypatch):
    from streamlit.testing.v1 import AppTest

    runs_dir, good_id = damaged
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert list(at.dataframe[0].value["run_id"]) == [good_id]
    assert not [w.value for w in at.warning if "Background ingest" in w.value]
