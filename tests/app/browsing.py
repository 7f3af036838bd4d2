"""Helpers of the browser tests: the dashboard as `make run` starts it, on its own runs directory
and port, and what a test reads off a Chromium tab (the step counter, idle state, chart nodes,
websocket traffic). The fixtures built on them are in conftest.py.

Each test dashboard's key (ui.guard) is `TEST_KEY`, written to its runs directory before it
starts; the `browser` fixture's tabs hold it, as a person's browser does once they opened the
link `make run` printed. A test of what a browser *without* the key can do opens its own
`browser.new_context()`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
TEST_KEY = "test-key-of-the-browser-tests-0123456789abcdef"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(port: int, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                if response.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("the dashboard did not become healthy")


@contextlib.contextmanager
def running_dashboard(tmp_path: Path, runs_dir: Path, allow_script_engine: bool = False, env: dict | None = None,
                      plain_streamlit: bool = False):
    """The dashboard as `make run` starts it (`python -m ui.serve`, or `streamlit run app.py`
    itself with `plain_streamlit`) on `runs_dir` and a free port, its key `TEST_KEY`; stops it and
    every run it launched."""
    port = free_port()
    runs_dir.mkdir(parents=True, exist_ok=True)
    key = runs_dir / ".dashboard-key"
    if not key.exists():
        key.write_text(TEST_KEY + "\n")
        key.chmod(0o600)
    env = dict(os.environ, AGENTRL_RUNS_DIR=str(runs_dir), HF_HUB_OFFLINE="1", **(env or {}))
    env.pop("AGENTRL_ALLOW_SCRIPT_ENGINE", None)
    if allow_script_engine:
        env["AGENTRL_ALLOW_SCRIPT_ENGINE"] = "1"
    log = open(tmp_path / "streamlit.log", "wb")
    entry = ["-m", "streamlit", "run", "app.py"] if plain_streamlit else ["-m", "ui.serve"]
    process = subprocess.Popen(
        [sys.executable, *entry, "--server.port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_healthy(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        # The dashboard and every run it launched share nothing but the runs dir: stop them all.
        # A launched run leads its own session (launch.json's pid: `train`, which supervises a
        # worker). Only a process the dashboard started is stopped: its pid and start time must
        # match launch.json, and it must not be this test process or one of its ancestors (a
        # fixture run recorded in-process writes this process's pid into status.json).
        for pid in launched_processes(runs_dir):
            for victim in [*_descendants(pid), pid]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(victim, signal.SIGKILL)
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def launched_processes(runs_dir: Path) -> list[int]:
    """Pids of the `train` processes the dashboard launched that are still the same processes."""
    import psutil

    protected = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    found = []
    for record in runs_dir.glob("*/launch.json"):
        try:
            launch = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        pid, create_time = launch.get("pid"), launch.get("create_time")
        if not isinstance(pid, int) or pid <= 1 or pid in protected:
            continue
        try:
            if create_time is not None and abs(psutil.Process(pid).create_time() - create_time) > 1:
                continue  # the pid was reused by another process
        except psutil.Error:
            continue
        found.append(pid)
    return found


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def step_counter(page) -> tuple[int, int] | None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        text = page.locator('[data-testid="stProgress"]').first.inner_text(timeout=1000)
    except PlaywrightTimeout:
        return None  # the page is still waiting for the run to reach the store
    match = re.search(r"[Ss]tep (\d+) of (\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def first_step(page, timeout_s: float) -> tuple[int, int] | None:
    """The step counter once it shows a step past 0, or None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counter = step_counter(page)
        if counter is not None and counter[0] > 0:
            return counter
        time.sleep(0.3)
    return None


def wait_idle(page, timeout_s: float = 60) -> None:
    """Until the script run that an interaction started has finished."""
    time.sleep(0.5)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and page.locator('[data-testid="stStatusWidget"]').count():
        time.sleep(0.2)
    time.sleep(0.3)


def start_training(runs_dir: Path, config, name: str = "training.json") -> subprocess.Popen:
    """A run in its own process, as the launcher starts one (`python -m agentrl train`)."""
    path = runs_dir.parent / name
    path.write_text(config.to_json())
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("AGENTRL_RUNS_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--config", str(path), "--runs-dir", str(runs_dir),
                             "--quiet"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


# Installed in a tab before a page loads, sampled every animation frame: the lowest opacity any
# chart (or a container of one) showed, the fewest charts visible at once, and how many chart
# nodes were shown (a chart replaced by a new node counts once more; Streamlit also keeps a
# hidden copy of a replaced chart for a moment, which is not counted).
STEADINESS_JS = """
window.__minOpacity = 1; window.__mounted = 0; window.__minVisible = Infinity;
const seen = new WeakSet();
const sample = () => {
  const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
  let visible = 0;
  for (const chart of charts) {
    const shown = chart.checkVisibility({visibilityProperty: true}) && chart.getBoundingClientRect().height > 0;
    if (shown && !seen.has(chart)) { seen.add(chart); window.__mounted++; }
    if (shown) visible++;
    for (let e = chart; e; e = e.parentElement) {
      const o = parseFloat(getComputedStyle(e).opacity);
      if (o < window.__minOpacity) window.__minOpacity = o;
    }
  }
  if (visible < window.__minVisible) window.__minVisible = visible;
  requestAnimationFrame(sample);
};
requestAnimationFrame(sample);
"""


def count_frames(page, seconds: float) -> int:
    """Websocket frames the server sent this tab in the next `seconds` (the tab must have been
    opened with `frames` recording: see `record_frames`)."""
    before = len(page.received_frames)
    time.sleep(seconds)
    return len(page.received_frames) - before


def record_frames(page) -> None:
    page.received_frames = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: page.received_frames.append(len(payload))))


def read_raw_transcript(page, text: str, timeout_ms: int = 30_000) -> None:
    """Open Review's "Raw prompt and completion" and wait until its code block shows `text`. The
    transcript and conversation tables are canvases (glide data grids): their text sits in hidden
    cells, so a bare get_by_text would match those and never become visible."""
    expander = page.locator('[data-testid="stExpander"]').filter(has_text="Raw prompt and completion").first
    expander.get_by_text("Raw prompt and completion").first.click()
    expander.locator('[data-testid="stCode"]').filter(has_text=text).first.wait_for(timeout=timeout_ms)
