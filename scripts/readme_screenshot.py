"""Regenerate docs/live.png, the README's screenshot of the Live page during a guarded run.

Usage: .venv/bin/python scripts/readme_screenshot.py
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> int:
    from playwright.sync_api import sync_playwright

    workdir = Path(tempfile.mkdtemp(prefix="agentrl-shot-"))
    runs_dir = workdir / "runs"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, AGENTRL_RUNS_DIR=str(runs_dir), HF_HUB_OFFLINE="1")
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        for _ in range(200):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        config = workdir / "guarded.json"
        config.write_text(json.dumps({"name": "refund-guarded", "scorer": "guarded", "step_delay": 0.6}))
        run = subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--config", str(config),
                                "--runs-dir", str(runs_dir), "--quiet"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1560})
            time.sleep(1.5)
            page.goto(f"http://127.0.0.1:{port}/Live")
            progress = page.locator('[data-testid="stProgress"]').first
            progress.wait_for(timeout=60_000)
            while True:
                match = re.search(r"Step (\d+) of", progress.inner_text())
                if match and int(match.group(1)) >= 20:
                    break
                time.sleep(0.2)
            page.locator(".js-plotly-plot .scatterlayer path.js-line").first.wait_for()
            time.sleep(0.3)
            page.screenshot(path=str(ROOT / "docs" / "live.png"))
            browser.close()
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    print(f"wrote {ROOT / 'docs' / 'live.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
