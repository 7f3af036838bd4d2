"""Regenerate docs/live.png, the README's screenshot of the Live page during a guarded run.

Usage: .venv/bin/python scripts/readme_screenshot.py
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from local_dashboard import CHROMIUM, CHROMIUM_ARGS, ROOT, run_env, running_dashboard


def main() -> int:
    from playwright.sync_api import sync_playwright

    workdir = Path(tempfile.mkdtemp(prefix="agentrl-shot-"))
    runs_dir = workdir / "runs"
    env = run_env(runs_dir)
    with running_dashboard(runs_dir) as base_url:
        config = workdir / "guarded.json"
        config.write_text(json.dumps({"name": "refund-guarded", "scorer": "guarded", "step_delay": 0.6}))
        run = subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--config", str(config),
                                "--runs-dir", str(runs_dir), "--quiet"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1560})
            time.sleep(1.5)
            page.goto(f"{base_url}/Live")
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
    print(f"wrote {ROOT / 'docs' / 'live.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
