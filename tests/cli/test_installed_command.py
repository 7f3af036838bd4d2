"""Tests of the installed `agentrl` command (pyproject's console script, `make install`) from a
folder outside the checkout: a user's script records a run there, the command lists, ingests,
cancels and trains it, and a failed foreground command keeps its last line of output.

Every command and script runs with the virtualenv's own interpreter and `agentrl` script (beside
`sys.executable`), in `tmp_path`: nothing here finds agentrl through the checkout's folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import REPO_ROOT, wait_for

AGENTRL = Path(sys.executable).parent / "agentrl"

pytestmark = pytest.mark.skipif(not AGENTRL.is_file(), reason=f"no installed agentrl command beside {sys.executable}: "
                                "run `make install` (pip install -e .)")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AGENTRL_RUNS_DIR", "AGENTRL_RUN_DIR")}
    return {**env, "HF_HUB_OFFLINE": "1"}


def command(*args, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(AGENTRL), *map(str, args)], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def script(folder: Path, code: str, name: str = "train.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(code))
    return path


def test_the_command_and_the_library_work_from_a_folder_outside_the_checkout(tmp_path):
    assert not str(tmp_path).startswith(str(REPO_ROOT))
    script(tmp_path, """
        import agentrl
        agentrl.init(project="refunds", name="from-elsewhere", config={"lr": 0.01})
        for step in range(1, 4):
            agentrl.log({"loss": 1.0 / step, "reward": step / 4})
        agentrl.finish()
    """)
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs").is_dir()  # runs/ of the folder the script ran in, as wandb's ./wandb

    listed = command("runs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "from-elsewhere" in listed.stdout and "succeeded" in listed.stdout
    ingested = command("ingest", cwd=tmp_path)
    assert ingested.returncode == 0 and "ingested" in ingested.stdout, ingested.stderr
    assert command("--help", cwd=tmp_path).stdout.startswith("usage: agentrl ")


def test_cancel_stops_a_script_that_never_checks_for_a_stop_and_records_it_cancelled(tmp_path):
    script(tmp_path, """
        import time, agentrl
        run = agentrl.init(name="endless")
        print(run.id, flush=True)
        step = 0
        while True:
            step += 1
            agentrl.log({"loss": 1.0 / step})
            time.sleep(0.05)
    """)
    process = subprocess.Popen([sys.executable, "train.py"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        run_id = process.stdout.readline().strip()
        assert wait_for(lambda: (tmp_path / "runs" / run_id / "chunks").is_dir(), timeout=30)
        cancelled = command("cancel", run_id, cwd=tmp_path, timeout=60)
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"run {run_id} cancelled" in cancelled.stdout
        process.wait(timeout=30)
    finally:
        process.kill()
    status = json.loads((tmp_path / "runs" / run_id / "status.json").read_text())
    assert status["status"] == "cancelled" and "stop was asked for" in status["error"]
    assert status["step"] > 0  # its steps were flushed on the way out
    assert "no run 'nope'" in command("cancel", "nope", cwd=tmp_path).stderr


def test_ingest_marks_a_run_whose_process_was_killed_failed(tmp_path):
    script(tmp_path, """
        import time, agentrl
        run = agentrl.init(name="doomed")
        print(run.id, flush=True)
        for step in range(1, 10_000):
            run.log({"loss": 1.0 / step})
            time.sleep(0.02)
    """)
    process = subprocess.Popen([sys.executable, "train.py"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, text=True)
    run_id = process.stdout.readline().strip()
    assert wait_for(lambda: (tmp_path / "runs" / run_id / "chunks").is_dir(), timeout=30)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert json.loads((tmp_path / "runs" / run_id / "status.json").read_text())["status"] == "running"

    assert command("ingest", cwd=tmp_path).returncode == 0
    status = json.loads((tmp_path / "runs" / run_id / "status.json").read_text())
    assert status["status"] == "failed" and "without a final status" in status["error"]


def test_a_failed_foreground_command_keeps_its_last_line_of_output(tmp_path):
    script(tmp_path, """
        import sys, agentrl
        with agentrl.init(name="shard-loader") as run:
            run.log({"loss": 1.0})
            print("loading shard 3: checksum mismatch", flush=True)
            sys.exit(3)
    """, name="fails.py")
    config = tmp_path / "script.json"
    config.write_text(json.dumps({"kind": "script", "name": "fails", "command": [sys.executable, "fails.py"],
                                  "cwd": str(tmp_path)}))
    result = command("train", "--config", config, cwd=tmp_path, timeout=120)
    assert result.returncode == 3
    assert "loading shard 3: checksum mismatch" in result.stdout  # shown as it ran ...
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    status = json.loads((run_dir / "status.json").read_text())
    # ... and kept: the command's own report and why it stopped
    assert status["status"] == "failed"
    assert "SystemExit: 3" in status["error"] and "last output: loading shard 3: checksum mismatch" in status["error"]


def test_library_messages_go_through_logging_and_the_command_still_shows_them(tmp_path):
    runs = tmp_path / "runs"
    script(tmp_path, """
        import agentrl
        with agentrl.init(name="ok") as run:
            run.log({"loss": 1.0})
    """)
    assert subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=_env(), timeout=60).returncode == 0
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    (marker,) = (run_dir / "chunks").glob("*.commit")
    (run_dir / "chunks" / marker.name.replace(".commit", ".steps.parquet")).write_bytes(b"not parquet")

    shown = command("ingest", cwd=tmp_path)
    assert shown.returncode == 0 and "ingest: skipped" in shown.stderr  # the CLI shows the library's warning

    # A program routes them as it routes TRL's: here, silenced.
    script(tmp_path, f"""
        import logging, sys
        logging.getLogger("agentrl").setLevel(logging.ERROR)
        from agentrl.store.db import connect
        from agentrl.store.ingest import Ingestor
        Ingestor(connect({str(tmp_path / "again")!r}), {str(runs)!r}).ingest()
    """, name="quiet.py")
    (tmp_path / "again").mkdir()
    quiet = subprocess.run([sys.executable, "quiet.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    assert "skipped" not in quiet.stderr


@pytest.mark.slow
def test_the_dashboard_starts_from_any_folder_on_that_folders_runs(tmp_path):
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([str(AGENTRL), "dashboard", "--port", str(port)], cwd=tmp_path, env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                return response.read() == b"ok"
        except OSError:
            return False

    try:
        assert wait_for(healthy, timeout=90, interval=0.5)
        assert (tmp_path / "runs").is_dir()  # this folder's runs, not the checkout's
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    assert f"runs in {tmp_path / 'runs'}" in process.stdout.read()
