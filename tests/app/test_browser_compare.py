"""Compare and Launch in Chromium at 1440x900 (issue 29): both rate charts and the legend above the
fold, the legend still on screen down at the action charts, a seed group drawn as one line in a
band, a pair one click from Launch to Compare, and N seeds started by one click.

One dashboard for the module, on a runs directory holding a pair launched together with two
seeds a side (four tabular runs, trained in this process); the Launch tests add their runs last.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browsing import running_dashboard, wait_idle

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1440, 900


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """(base_url, runs_dir, {'outcome': [two run ids], 'guarded': [two run ids]})."""
    from agentrl.config import load_preset
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.launcher import create_run, new_launch_group, seed_configs
    from agentrl.store.ingest import ingest_once

    tmp_path = tmp_path_factory.mktemp("compare")
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    group, ids = new_launch_group(), {}
    for preset in ("refund-outcome", "refund-guarded"):
        for config in seed_configs(load_preset(preset), 2):
            run = create_run(runs_dir, config, group)
            run_tabular(config, run, log=lambda message: None)
            ids.setdefault(config.scorer, []).append(run.run_id)
    ingest_once(runs_dir)
    with running_dashboard(tmp_path, runs_dir) as base_url:
        yield base_url, runs_dir, ids


def _tab(browser):
    return browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})


def _chart(tab, title: str):
    return tab.locator('[data-testid="stPlotlyChart"]').filter(has=tab.locator(".gtitle", has_text=title)).first


def _on_screen(box) -> bool:
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT


def test_compare_shows_both_rate_charts_the_legend_and_a_seed_group_band_above_the_fold(seeded, browser):
    base_url, _, ids = seeded
    tab = _tab(browser)
    tab.goto(f"{base_url}/Compare")  # the default: the newest pair launched together, every seed of it
    success, violation = _chart(tab, "Success rate"), _chart(tab, "Violation rate")
    violation.locator(".scatterlayer path.js-line").first.wait_for(timeout=60_000)
    wait_idle(tab)
    legend = tab.locator('[class*="st-key-compare-legend"]')
    for element in (success, violation, legend):
        assert _on_screen(element.bounding_box()), element.bounding_box()
    # Each side's two seeds are one group: one mean line in a band, named once in the legend.
    assert legend.inner_text().count("· 2 seeds") == 2 and "seed7" not in legend.inner_text()
    assert violation.locator(".scatterlayer .trace").count() == 6  # per group: the band's top and bottom, the mean
    assert violation.locator(".scatterlayer path.js-fill").count() == 2  # the bands
    # Down at the action charts, the legend is still on screen.
    tab.goto(f"{base_url}/Compare?run={ids['outcome'][0]}&run={ids['guarded'][0]}&view=Action+distribution")
    _chart(tab, "Difference at known_high").locator(".barlayer path").first.wait_for(timeout=60_000)
    wait_idle(tab)
    tab.locator('[data-testid="stPlotlyChart"]').last.scroll_into_view_if_needed()
    assert tab.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollTop") > 300
    assert _on_screen(tab.locator('[class*="st-key-compare-legend"]').bounding_box())
    assert tab.locator('[data-testid="stException"]').count() == 0


def _launch(tab, base_url: str) -> None:
    tab.goto(f"{base_url}/Launch")
    delay = tab.get_by_role("spinbutton", name="Step delay (s)")
    delay.wait_for(timeout=60_000)
    delay.fill("0")
    delay.press("Tab")
    wait_idle(tab)


def _new_runs(runs_dir: Path, before: set[str]) -> list[dict]:
    return [json.loads((p / "run.json").read_text()) for p in sorted(runs_dir.iterdir())
            if p.is_dir() and p.name not in before and (p / "run.json").is_file()]


def test_one_click_starts_n_seeds_of_the_pair_and_opens_them_on_compare(seeded, browser):
    base_url, runs_dir, _ = seeded
    before = {p.name for p in runs_dir.iterdir()}
    tab = _tab(browser)
    _launch(tab, base_url)
    seeds = tab.get_by_role("spinbutton", name="Seeds")
    assert seeds.bounding_box()["y"] < tab.get_by_role("spinbutton", name="Step delay (s)").bounding_box()["y"]  # above the form
    seeds.fill("2")
    seeds.press("Tab")
    wait_idle(tab)
    tab.get_by_role("button", name="Start the pair × 2 seeds").click()
    tab.wait_for_url(re.compile(r".*/Compare\?run=.*&run=.*&run=.*&run="), timeout=60_000)
    new = _new_runs(runs_dir, before)
    assert sorted((r["scorer"], r["config"]["seed"]) for r in new) == [("guarded", 7), ("guarded", 8),
                                                                       ("outcome", 7), ("outcome", 8)]
    assert len({r["launch_group"] for r in new}) == 1  # launched together: Compare's default pair from now on
    assert sorted(re.findall(r"run=([^&]+)", tab.url)) == sorted(r["run_id"] for r in new)
    tab.locator('[class*="st-key-compare-legend"]').get_by_text("refund-guarded (guarded) · 2 seeds").wait_for(timeout=60_000)
    assert tab.locator('[data-testid="stException"]').count() == 0
