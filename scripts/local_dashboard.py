"""Start the dashboard on a free loopback port for a script (benchmarks, the README screenshot).

    with running_dashboard(runs_dir) as base_url:
        ...
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_env(runs_dir: Path) -> dict:
    return dict(os.environ, AGENTRL_RUNS_DIR=str(runs_dir), HF_HUB_OFFLINE="1")


@contextlib.contextmanager
def running_dashboard(runs_dir: Path, log_path: Path | None = None, wait_s: float = 60):
    """`streamlit run app.py` on its own runs directory; yields the base URL once healthy."""
    port = free_port()
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
                              cwd=ROOT, env=run_env(runs_dir), stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the dashboard did not become healthy") from None
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
        if log_path:
            log.close()
