"""Chunks through fsspec (agentrl/record/locations.py): a run writes its chunks to a URL, the store
ingests them by listing through fsspec, and the publish rule holds (a commit is visible whole or
not at all).

fsspec's `file://` (a shared folder: temporary name, then a rename) and `memory://` (an object
store's shape: one PUT per file, no rename; in-process, so the writer and the ingest share this
process) are real filesystems, not mocks. Every test writes through `agentrl.init` or `Run` and
reads back through the real Ingestor and DuckDB file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import fsspec
import pytest

import agentrl
from agentrl.record.chunks import list_commits, sweep_uncommitted
from agentrl.record.locations import CHUNKS_URL_ENV, ChunkLocationError, FsspecFolder, chunk_folder
from agentrl.record.rows import to_arrow
from agentrl.record.rundir import RunDir, utc_now
from agentrl.store.ingest import Ingestor, connect
from helpers import REPO_ROOT

STEPS = 6
GROUP = 8


def record(runs_dir, chunks_url, steps=STEPS, name="remote"):
    """A run of `steps` steps through agentrl.init, one commit per step and the last hardware
    sample's at the end (steps + 1 commits); returns its RunDir."""
    with agentrl.init(name=name, runs_dir=runs_dir, chunks_url=chunks_url, flush_interval=3600) as run:
        for step in range(1, steps + 1):
            run.log_trajectories(step, [{"traj_idx": i, "task_id": f"t{i % 2}", "reward": float(i),
                                         "components": {"outcome": 1.0, "cost": -0.1 * i}} for i in range(GROUP)])
            run.log_step(step, {"loss": 1.0 / step})
            run.writer.flush()
    return run.dir


def counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("steps", "trajectories", "step_components")}


@pytest.fixture
def memory_url():
    """A fresh prefix of fsspec's in-process memory filesystem, removed afterwards."""
    url = f"memory://agentrl-test-{uuid.uuid4().hex[:8]}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


@pytest.fixture(params=["file", "memory"])
def chunks_url(request, tmp_path, memory_url):
    return (tmp_path / "shared").as_uri() if request.param == "file" else memory_url


def test_a_run_writes_its_chunks_to_the_url_and_the_store_ingests_them_by_listing(runs_dir, chunks_url):
    run = record(runs_dir, chunks_url)
    assert not (run.root / "chunks").exists()  # nothing in the run folder but its own files
    assert run.meta()["chunks_url"] == f"{chunks_url}/{run.run_id}"  # where readers look
    folder = chunk_folder(run.root)
    assert isinstance(folder, FsspecFolder) and folder.local == chunks_url.startswith("file://")
    assert [c.number for c in list_commits(run.root)] == list(range(STEPS + 1))
    assert not [n for n in folder.names() if n.startswith(".")]  # no temporary file left behind

    con = connect(runs_dir)
    try:
        report = Ingestor(con, runs_dir).ingest()
        assert report.skipped == [] and report.files == STEPS + 1
        assert counts(con) == {"steps": STEPS, "trajectories": STEPS * GROUP, "step_components": STEPS * 2}
        assert con.execute("SELECT status FROM runs WHERE run_id = ?", [run.run_id]).fetchone()[0] == "succeeded"
        # Idempotent: a second pass, and a new Ingestor on a reopened store, take nothing.
        assert Ingestor(con, runs_dir).ingest().files == 0
        con.close()
        con = connect(runs_dir)
        again = Ingestor(con, runs_dir).ingest()
        assert (again.files, again.rows) == (0, 0)
        assert counts(con)["trajectories"] == STEPS * GROUP
    finally:
        con.close()


def test_a_running_run_is_taken_commit_by_commit_through_the_url(runs_dir, memory_url):
    runs_dir.mkdir()
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        run = agentrl.init(name="live", runs_dir=runs_dir, chunks_url=memory_url, flush_interval=3600)
        for step in (1, 2, 3):
            run.log_trajectories(step, [{"traj_idx": 0, "task_id": "t", "reward": 1.0}])
            run.log_step(step, {"loss": 1.0})
            run.writer.flush()
            report = ingestor.ingest()
            assert report.files == 1 and report.rows == 2
        run.finish()
        ingestor.ingest()
        assert con.execute("SELECT max(step), count(*) FROM steps").fetchone() == (3, 3)
    finally:
        con.close()


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_writer_killed_between_its_table_files_and_its_marker_leaves_nothing_visible(runs_dir, tmp_path, memory_url, where):
    """What a kill mid-flush leaves behind the URL (the table files of commit 1, no marker) is
    never ingested, and is swept once no writer runs."""
    url = (tmp_path / "shared").as_uri() if where == "file" else memory_url
    run = record(runs_dir, url, steps=1)
    folder = chunk_folder(run.root)
    # The next commit's table files written the way a flush writes them, then the writer "dies".
    folder.write_table("00000002.trajectories.parquet", to_arrow("trajectories", [
        {"run_id": run.run_id, "step": 2, "traj_idx": 0, "task_id": "t", "reward": 9.0}]))
    folder.write_table("00000002.steps.parquet", to_arrow("steps", [{"run_id": run.run_id, "step": 2, "ts": utc_now()}]))
    assert [c.number for c in list_commits(run.root)] == [0, 1]
    con = connect(runs_dir)
    try:
        report = Ingestor(con, runs_dir).ingest()  # the run ended: its cut flush is swept too
        assert report.files == 2 and report.skipped == []
        assert con.execute("SELECT max(step), count(*) FROM steps").fetchone() == (1, 1)
        assert con.execute("SELECT count(*) FROM trajectories WHERE reward = 9.0").fetchone()[0] == 0
        assert not [n for n in folder.names() if n.startswith("00000002")]
    finally:
        con.close()


def test_a_writer_sigkilled_mid_flush_through_fsspec_leaves_no_visible_part(runs_dir, tmp_path):
    """A real process killed between a commit's table files and its marker (file://, a shared folder)."""
    url = (tmp_path / "shared").as_uri()
    script = (
        "import os, signal, sys, agentrl\n"
        "from agentrl.record import locations\n"
        "run = agentrl.init(name='killed', runs_dir=sys.argv[1], chunks_url=sys.argv[2], flush_interval=3600)\n"
        "run.log_step(1, {'loss': 1.0}); run.writer.flush()\n"
        "real = locations.FsspecFolder.write_text\n"
        "def die(self, name, text):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)  # the marker of the second flush is never written\n"
        "locations.FsspecFolder.write_text = die\n"
        "run.log_trajectories(2, [{'traj_idx': 0, 'task_id': 't', 'reward': 1.0}]); run.log_step(2, {'loss': 1.0})\n"
        "run.writer.flush()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(runs_dir), url], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == -9, proc.stderr
    (run,) = [RunDir(p) for p in runs_dir.iterdir() if p.is_dir()]
    folder = chunk_folder(run.root)
    assert "00000001.steps.parquet" in folder.names()  # its table files were written ...
    assert [c.number for c in list_commits(run.root)] == [0]  # ... but no commit 1 is visible
    run.update_status(status="failed")  # as the supervisor or the dashboard's reconcile records it
    con = connect(runs_dir)
    try:
        Ingestor(con, runs_dir).ingest()
        assert con.execute("SELECT list(step) FROM steps").fetchone()[0] == [1]
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 0
        assert "00000001.steps.parquet" not in folder.names()  # swept now that no writer runs
    finally:
        con.close()


def test_the_env_var_sends_every_run_to_the_url_and_init_refuses_a_url_fsspec_cannot_open(runs_dir, memory_url, monkeypatch):
    monkeypatch.setenv(CHUNKS_URL_ENV, memory_url)
    run = record(runs_dir, None, steps=2)
    assert run.meta()["chunks_url"] == f"{memory_url}/{run.run_id}"
    assert len(list_commits(run.root)) == 3
    monkeypatch.delenv(CHUNKS_URL_ENV)
    with pytest.raises(ChunkLocationError, match="nosuchproto://x"):
        agentrl.init(name="bad", runs_dir=runs_dir / "other", chunks_url="nosuchproto://x")
    assert not (runs_dir / "other").exists()  # refused before any run folder was made


def test_a_resumed_run_keeps_writing_where_run_json_says(runs_dir, memory_url):
    from agentrl.record.run import Run

    run = record(runs_dir, memory_url, steps=1)
    resumed = Run(run, flush_interval=3600)  # no URL given: run.json says where its chunks are
    resumed.log_step(2, {"loss": 1.0})
    resumed.finish()
    assert [c.number for c in list_commits(run.root)] == [0, 1, 2]
    with pytest.raises(ChunkLocationError, match="already writes its chunks"):
        Run(run, chunks_url="memory://elsewhere")


def test_plain_paths_as_the_url_use_the_local_folder_and_a_marker_is_the_last_file(runs_dir, tmp_path):
    shared = tmp_path / "mounted"
    run = record(runs_dir, str(shared), steps=2)
    folder = shared / run.run_id
    marker = folder / "00000001.commit"
    assert json.loads(marker.read_text())["tables"] == {"trajectories": GROUP, "steps": 1}
    # Every file the marker names was in place before it (the marker is never older).
    assert all((folder / f"00000001.{t}.parquet").stat().st_mtime_ns <= marker.stat().st_mtime_ns
               for t in ("trajectories", "steps"))
    assert sweep_uncommitted(run.root) == []


def test_train_with_chunks_url_writes_through_fsspec_and_the_run_lands_in_the_store(runs_dir, tmp_path):
    from agentrl.store.ingest import connect as open_store
    from helpers import agentrl, ok

    config = tmp_path / "short.json"
    config.write_text(json.dumps({"name": "shared", "rounds": 3}))
    url = (tmp_path / "shared").as_uri()
    result = ok(agentrl("train", "--config", config, "--runs-dir", runs_dir, "--chunks-url", url, "--quiet"))
    (run,) = [RunDir(p) for p in runs_dir.iterdir() if p.is_dir()]
    assert run.meta()["chunks_url"] == f"{url}/{run.run_id}" and not (run.root / "chunks").exists()
    assert "ingested" in result.stdout
    con = open_store(runs_dir)
    try:
        assert con.execute("SELECT max(step) FROM steps").fetchone()[0] == 3
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 3 * 32
    finally:
        con.close()

    bad = agentrl("train", "--config", config, "--runs-dir", tmp_path / "other", "--chunks-url", "nosuchproto://x")
    assert bad.returncode == 2 and "nosuchproto://x" in bad.stderr and bad.stderr.count("\n") == 1
    assert not (tmp_path / "other").exists()


def test_a_run_without_a_url_never_loads_fsspec_and_the_dashboard_never_loads_the_benchmark(tmp_path):
    """The local path is exactly as before: os calls, no fsspec; `agentrl.bench` loads only for `bench`."""
    code = (
        "import sys, pathlib, agentrl, agentrl.cli\n"
        "from agentrl.store.ingest import Ingestor, connect\n"
        "from agentrl.store.maintenance import Maintenance\n"
        "d = pathlib.Path(sys.argv[1])\n"
        "with agentrl.init(name='local', runs_dir=d, flush_interval=3600) as run:\n"
        "    run.log_step(1, {'loss': 1.0})\n"
        "con = connect(d); assert Ingestor(con, d).ingest().rows >= 1; con.close()\n"
        "print(sorted(m for m in ('fsspec', 'agentrl.bench', 'agentrl.bench.scale') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs")], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_url_that_cannot_be_read_for_a_while_blames_no_commit_and_is_taken_once_it_can(runs_dir, memory_url, monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    run = record(runs_dir, memory_url, steps=3)
    real = MemoryFileSystem.cat_file

    def down(self, path, *args, **kwargs):  # the object store answers nothing for now
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(MemoryFileSystem, "cat_file", down)
    messages: list[str] = []
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir, log=messages.append)
        for _ in range(3):
            report = ingestor.ingest()
            assert (report.files, report.skipped) == (0, [])
        assert con.execute("SELECT count(*) FROM ingest_errors").fetchone()[0] == 0  # nothing was blamed
        assert len(messages) == 1 and run.run_id in messages[0] and "trying again" in messages[0]
        assert run.run_id not in ingestor.drained
        monkeypatch.setattr(MemoryFileSystem, "cat_file", real)
        report = ingestor.ingest()
        assert report.files == 4 and report.skipped == []
        assert counts(con)["trajectories"] == 3 * GROUP
    finally:
        con.close()


def test_a_table_file_the_url_cannot_read_now_is_read_again_later_not_skipped(runs_dir, tmp_path):
    """A read error other than a missing file behind a chunk URL (`ChunkFolderUnreachable`) leaves
    the commit untaken and unblamed: once the file reads again, the next tick takes it."""
    run = record(runs_dir, (tmp_path / "shared").as_uri(), steps=1)
    folder = chunk_folder(run.root)
    assert "00000000.trajectories.parquet" in folder.names()  # the step's commit
    path = tmp_path / "shared" / run.run_id / "00000000.trajectories.parquet"
    kept = path.read_bytes()
    path.unlink()
    path.mkdir()  # reading it fails with IsADirectoryError, an OSError that is not FileNotFoundError
    said = []
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir, log=said.append)
        report = ingestor.ingest()
        assert report.skipped == [] and con.execute("SELECT count(*) FROM ingest_errors").fetchone()[0] == 0
        assert any("cannot be read now" in line for line in said)
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 0
        path.rmdir()
        path.write_bytes(kept)
        ingestor.ingest()
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == GROUP
    finally:
        con.close()
