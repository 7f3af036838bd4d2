"""A read-only runs directory and a full disk (issue 12, finding 6).

Read-only: `ingest` says so in one line, `export`, `runs` and `check` read without writing. Full
disk: `train` leaves no empty run folder, and a run that fills the disk is failed with the reason.
As root both are real file systems (a read-only bind mount, a small tmpfs); as another user the
read-only case is file modes and the full disk a file-size limit (RLIMIT_FSIZE), which fails
writes the same way.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.record.rundir import DB_FILENAME, list_run_dirs
from helpers import REPO_ROOT, agentrl, fill_disk, ok

ROOT = os.geteuid() == 0


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only(path: Path):
    """`path` made read-only: a read-only bind mount onto itself as root, file modes otherwise."""
    if ROOT:
        if not (_mount("--bind", str(path), str(path)) and _mount("-o", "remount,bind,ro", str(path))):
            subprocess.run(["umount", str(path)], capture_output=True)
            pytest.skip("root cannot bind-mount here (no CAP_SYS_ADMIN)")
        try:
            yield path
        finally:
            subprocess.run(["umount", str(path)], check=True)
    else:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        try:
            yield path
        finally:
            for p, mode in modes.items():
                p.chmod(mode)


def test_a_read_only_runs_dir_can_be_listed_checked_and_exported_and_ingest_says_why_it_cannot(trained_pair, tmp_path):
    runs_dir, ids = trained_pair
    with read_only(runs_dir):
        assert not os.access(runs_dir, os.W_OK)
        result = agentrl("ingest", "--runs-dir", runs_dir)
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            f"error: runs directory {str(runs_dir)!r} is read-only; ingest writes {DB_FILENAME} there. "
            "Read what is stored with `python -m agentrl export`, or ingest a writable copy"]
        listing = ok(agentrl("runs", "--runs-dir", runs_dir))
        assert ids["guarded"] in listing.stdout and "succeeded" in listing.stdout
        assert "ok: " in ok(agentrl("check", "--runs-dir", runs_dir)).stdout
        exported = ok(agentrl("export", ids["guarded"], "--out", tmp_path / "out", "--runs-dir", runs_dir))
        assert {Path(line).name for line in exported.stdout.split()} >= {"steps.parquet", "trajectories.parquet"}
        assert "Traceback" not in result.stderr + listing.stderr + exported.stderr


# --- a full disk ------------------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(path: Path, size_kb: int):
    """A runs directory on a file system of `size_kb` KiB (root), or None for the file-size limit."""
    path.mkdir(parents=True)
    if ROOT and _mount("-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)):
        try:
            yield True
        finally:
            subprocess.run(["umount", "-l", str(path)], check=True)
    else:
        yield False


def train_on(runs_dir: Path, size_kb: int, real: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AGENTRL_RUNS_DIR", None)
    limit = None if real else size_kb * 1024 // 4  # no file may grow past this: writes fail as on a full disk

    def limited():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "agentrl", "train", "--preset", "refund-outcome", "--runs-dir",
                           str(runs_dir / "runs"), "--quiet"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=limited)


def test_train_on_a_disk_too_full_for_a_run_folder_leaves_none_and_says_so_in_one_line(tmp_path):
    disk = tmp_path / "disk"
    with small_disk(disk, 8) as real:
        if not real:
            pytest.skip("a disk too small for run.json needs a tmpfs (root)")
        result = train_on(disk, 8, real)
        assert result.returncode == 2, result.stdout + result.stderr
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: ") and "No space left on device" in line
        assert list_run_dirs(disk / "runs") == [] and not any(p.is_dir() for p in (disk / "runs").iterdir())


def test_a_run_that_fills_the_disk_is_failed_with_the_reason_not_left_running(tmp_path):
    disk = tmp_path / "disk"
    with small_disk(disk, 48) as real:
        result = train_on(disk, 48, real)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == 3, result.stdout + result.stderr  # the run failed, and `train` says so
        (run,) = list_run_dirs(disk / "runs")
        status = run.status()
        assert status["status"] == "failed"
        assert "could not be written" in status["error"]
        assert ("No space left on device" if real else "File too large") in status["error"]
        assert f"run {run.run_id} failed" in result.stdout
        leftovers = [p.name for p in (run.root / "chunks").iterdir() if p.name.startswith(".")]
        assert leftovers == []  # no half-written temporary file stays behind
    shutil.rmtree(tmp_path, ignore_errors=True)


# --- issue 22, finding 5: a full disk is said as such, never as damage -----------------------------


def _trained_on(disk: Path) -> Path:
    """A finished refund run, not yet ingested, in `disk/runs`."""
    from agentrl.config import load_preset
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.launcher import create_run

    runs_dir = disk / "runs"
    runs_dir.mkdir()
    config = load_preset("refund-outcome")
    run_tabular(config, create_run(runs_dir, config), log=lambda message: None)
    return runs_dir


def test_ingest_on_a_full_disk_says_the_disk_is_full_and_leaves_no_empty_store(tmp_path):
    from agentrl.store.db import StoreFullError
    from agentrl.store.ingest import ingest_once

    disk = tmp_path / "disk"
    with small_disk(disk, 1024) as real:
        if not real:
            pytest.skip("a full disk needs a tmpfs (root)")
        runs_dir = _trained_on(disk)
        filler = fill_disk(disk)
        result = agentrl("ingest", "--runs-dir", runs_dir)
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: the disk is full: ") and "damaged" not in line
        with pytest.raises(StoreFullError):  # what `train`'s final ingest calls
            ingest_once(runs_dir, wait_s=0.0)
        assert not (runs_dir / DB_FILENAME).exists()  # no 0-byte store that would read as damaged later
        filler.unlink()
        assert "ingested 1184 rows" in ok(agentrl("ingest", "--runs-dir", runs_dir)).stdout


def test_rebuild_on_a_disk_too_small_for_the_copy_fails_in_one_line_and_removes_its_temporary_files(tmp_path):
    disk = tmp_path / "disk"
    with small_disk(disk, 20480) as real:
        if not real:
            pytest.skip("a full disk needs a tmpfs (root)")
        runs_dir = _trained_on(disk)
        ok(agentrl("ingest", "--runs-dir", runs_dir))
        before = sorted(p.name for p in runs_dir.iterdir())
        filler = fill_disk(disk)
        result = agentrl("rebuild", "--runs-dir", runs_dir)
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: the disk is full: rebuilding ") and "untouched" in line
        assert sorted(p.name for p in runs_dir.iterdir()) == before  # no .rebuild-PID file or its log left
        assert "ok: " in ok(agentrl("check", "--runs-dir", runs_dir)).stdout  # the old store is as it was
        filler.unlink()
        assert "rebuilt " in ok(agentrl("rebuild", "--runs-dir", runs_dir)).stdout


def test_a_decision_or_an_export_on_a_full_disk_says_the_disk_is_full(tmp_path):
    disk = tmp_path / "disk"
    with small_disk(disk, 20480) as real:
        if not real:
            pytest.skip("a full disk needs a tmpfs (root)")
        runs_dir = _trained_on(disk)
        ok(agentrl("ingest", "--runs-dir", runs_dir))
        (run,) = list_run_dirs(runs_dir)
        fill_disk(disk)
        for command in (["review", "approve", run.run_id, "30/0"], ["export", run.run_id, "--out", disk / "out"],
                        ["promote", run.run_id, "--override", "a test"]):
            result = agentrl(*command, "--runs-dir", runs_dir)
            assert result.returncode == 2, result.stderr
            (line,) = result.stderr.splitlines()
            assert line.startswith("error: the disk is full"), line


def test_trains_final_ingest_on_a_full_disk_leaves_no_broken_store_and_says_the_disk_is_full(tmp_path):
    """The run's folder fits, the store does not: before, `train` left a 0-byte or 4 KiB
    `agentrl.duckdb` that every later command called damaged. The chunks go to another disk
    (`--chunks-url`), so the store is the one thing that finds the disk full."""
    disk = tmp_path / "disk"
    with small_disk(disk, 1024) as real:
        if not real:
            pytest.skip("a full disk needs a tmpfs (root)")
        runs_dir = disk / "runs"
        runs_dir.mkdir()
        filler = fill_disk(disk)
        with open(filler, "r+b") as handle:  # room for run.json, status.json and the policy, not for a store
            handle.truncate(filler.stat().st_size - 24 * 1024)
        result = agentrl("train", "--preset", "refund-outcome", "--runs-dir", runs_dir, "--chunks-url", tmp_path / "chunks",
                         "--quiet")
        assert result.returncode == 0, result.stderr
        last = result.stdout.strip().splitlines()[-1]
        assert "succeeded; not ingested now: the disk is full: " in last and "damaged" not in last
        assert not (runs_dir / DB_FILENAME).exists()
        filler.unlink()
        assert "ingested" in ok(agentrl("ingest", "--runs-dir", runs_dir)).stdout
        assert "ok: " in ok(agentrl("check", "--runs-dir", runs_dir)).stdout
