"""Regenerate the README's page screenshots (docs/compare.png, docs/review.png, docs/live.png).

A runs directory with the outcome/guarded pair launched together, three seeds a side (tabular,
trained here in about a minute), the dashboard as `make run` starts it, Chromium at 1440x900
holding the dashboard's key:

    .venv/bin/python scripts/docs_screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "app")]

from browsing import CHROMIUM, CHROMIUM_ARGS, TEST_KEY, running_dashboard, wait_idle  # noqa: E402

WIDTH, HEIGHT = 1440, 900


def seeded_runs(runs_dir: Path, seeds: int) -> dict[str, list[str]]:
    from agentrl.config import load_preset
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.launcher import create_run, new_launch_group, seed_configs
    from agentrl.store.ingest import ingest_once

    group, ids = new_launch_group(), {}
    for preset in ("refund-outcome", "refund-guarded"):
        for config in seed_configs(load_preset(preset), seeds):
            run = create_run(runs_dir, config, group)
            run_tabular(config, run, log=lambda message: None)
            ids.setdefault(config.scorer, []).append(run.run_id)
    ingest_once(runs_dir)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs"), help="folder the PNGs are written to")
    parser.add_argument("--seeds", type=int, default=3, help="seeds a side")
    args = parser.parse_args()
    out = Path(args.out)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="agentrl-shots-") as tmp:
        runs_dir = Path(tmp) / "runs"
        runs_dir.mkdir()
        ids = seeded_runs(runs_dir, args.seeds)
        with running_dashboard(Path(tmp), runs_dir) as base_url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
            context.add_cookies([{"name": "agentrl_key", "value": TEST_KEY, "domain": "127.0.0.1", "path": "/",
                                  "httpOnly": True, "sameSite": "Strict"}])
            tab = context.new_page()
            shots = {"compare": f"{base_url}/Compare",  # the default: the newest pair launched together, every seed
                     "live": f"{base_url}/Live?run={ids['outcome'][0]}",
                     "review": f"{base_url}/Review?run={ids['outcome'][0]}"}
            for name, url in shots.items():
                tab.goto(url)
                if name != "review":
                    tab.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for(timeout=60_000)
                wait_idle(tab)
                tab.wait_for_timeout(2000)  # the charts' last redraw settles
                tab.screenshot(path=str(out / f"{name}.png"))
                print(f"{name}: {out / f'{name}.png'}")
            browser.close()


if __name__ == "__main__":
    main()
