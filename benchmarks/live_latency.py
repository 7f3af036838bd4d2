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
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from local_dashboard import CHROMIUM, CHROMIUM_ARGS, run_env, running_dashboard  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-delay", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    workdir = Path(tempfile.mkdtemp(prefix="agentrl-live-latency-"))
    runs_dir = workdir / "runs"
    env = run_env(runs_dir)
    seen: dict[int, float] = {}
    with running_dashboard(runs_dir, workdir / "streamlit.log") as base_url:
        config = workdir / "config.json"
        config.write_text(json.dumps({"name": "latency", "scorer": "guarded", "rounds": args.rounds,
                                      "step_delay": args.step_delay}))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            run = subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--config", str(config),
                                    "--runs-dir", str(runs_dir), "--quiet"], cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL)
            time.sleep(1.0)
            page.goto(f"{base_url}/Live")
            progress = page.locator('[data-testid="stProgress"]').first
            progress.wait_for(timeout=60_000)
            end_at = None  # once the run has exited, keep watching 5 s for the last steps
            while run.poll() is None or len(seen) < args.rounds:
                match = re.search(r"Step (\d+) of", progress.inner_text())
                now = datetime.now(timezone.utc).replace(tzinfo=None)
                if match:
                    step = int(match.group(1))
                    for s in range(1, step + 1):
                        seen.setdefault(s, now.timestamp())
                if run.poll() is not None:
                    end_at = end_at or time.monotonic() + 5
                    if time.monotonic() > end_at:
                        break
                time.sleep(0.05)
            browser.close()
        finished = {}
        for chunk in sorted(runs_dir.glob("*/steps/part-*.parquet")):
            table = pq.read_table(chunk, columns=["step", "ts"]).to_pylist()
            for row in table:
                finished[row["step"]] = row["ts"].replace(tzinfo=timezone.utc).timestamp()
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
