"""How long after a step finishes does it show on the Live page?

Starts the dashboard (`streamlit run app.py`) on a free port with a fresh runs directory, starts a
tabular run with a step delay from the CLI, opens the Live page in headless Chromium and polls the
progress text ("Step N of 30") every 50 ms. For each step it compares the moment the browser first
showed it with the step's finish time recorded by the run (`steps.ts`, UTC, same clock).

The path measured is the whole product: run process -> chunk flush (<= 1 s) -> dashboard ingest
loop (every 0.25 s) -> Live fragment refresh (every 1 s) -> browser.

Usage: .venv/bin/python benchmarks/live_latency.py [--step-delay 0.5] [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-delay", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    workdir = Path(tempfile.mkdtemp(prefix="agentrl-live-latency-"))
    runs_dir = workdir / "runs"
    port = free_port()
    env = dict(os.environ, AGENTRL_RUNS_DIR=str(runs_dir), HF_HUB_OFFLINE="1")
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
                              cwd=ROOT, env=env, stdout=open(workdir / "streamlit.log", "wb"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[int, float] = {}
    try:
        for _ in range(200):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        config = workdir / "config.json"
        config.write_text(json.dumps({"name": "latency", "scorer": "guarded", "rounds": args.rounds,
                                      "step_delay": args.step_delay}))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            run = subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--config", str(config),
                                    "--runs-dir", str(runs_dir), "--quiet"], cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL)
            time.sleep(1.0)
            page.goto(f"http://127.0.0.1:{port}/Live")
            progress = page.locator('[data-testid="stProgress"]').first
            progress.wait_for(timeout=60_000)
            while run.poll() is None or len(seen) < args.rounds:
                match = re.search(r"Step (\d+) of", progress.inner_text())
                now = datetime.now(timezone.utc).replace(tzinfo=None)
                if match:
                    step = int(match.group(1))
                    for s in range(1, step + 1):
                        seen.setdefault(s, now.timestamp())
                if run.poll() is not None and time.monotonic() > getattr(main, "_end", float("inf")):
                    break
                if run.poll() is not None and not hasattr(main, "_end"):
                    main._end = time.monotonic() + 5
                time.sleep(0.05)
            browser.close()
        finished = {}
        for chunk in sorted(runs_dir.glob("*/steps/part-*.parquet")):
            table = pq.read_table(chunk, columns=["step", "ts"]).to_pylist()
            for row in table:
                finished[row["step"]] = row["ts"].replace(tzinfo=timezone.utc).timestamp()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    # The first step shown may have finished before the page opened; count steps the page saw
    # strictly after it was already watching.
    first_seen = min(seen) if seen else None
    delays = [seen[s] - finished[s] for s in sorted(seen) if s in finished and s > (first_seen or 0) + 1]
    if not delays:
        print("no steps observed")
        return 1
    delays.sort()
    p95 = delays[min(len(delays) - 1, int(round(0.95 * (len(delays) - 1))))]
    print(f"step finished -> shown on the Live page (n={len(delays)} steps, step delay {args.step_delay}s)")
    print(f"  median {statistics.median(delays):.2f} s   p95 {p95:.2f} s   min {delays[0]:.2f} s   max {delays[-1]:.2f} s")
    print("  path: chunk flush (<=1 s) + ingest loop (0.25 s) + fragment refresh (1 s) + render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
