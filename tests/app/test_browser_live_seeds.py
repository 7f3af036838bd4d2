"""Issue 29, the rest of Live and the runs table, in Chromium at 1440x900: a run with seed siblings
draws their mean in a band behind its own lines (a toggle in the URL hides it); Live's step charts
zoom and hover together, and a double-click resets them; the onset label keeps off the 100% line;
the runs table collapses a seed group into one row with the mean ± std of its final figures.

One dashboard for the module, on a runs directory holding the outcome preset with three seeds and
one guarded run (four tabular runs, trained in this process).
"""

from __future__ import annotations

import re
import time

import pytest
from browsing import running_dashboard, start_training, step_counter, wait_idle

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1440, 900
RATES, COMPONENTS = "Success and violation rate", "Reward components per step"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """(base_url, {'outcome': [three run ids, seeds 7, 8, 9], 'guarded': [one run id]}, runs_dir)."""
    from agentrl.config import load_preset
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.launch_configs import seed_configs
    from agentrl.launcher import create_run
    from agentrl.store.ingest import ingest_once

    tmp_path = tmp_path_factory.mktemp("live-seeds")
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    ids = {}
    for preset, seeds in (("refund-outcome", 3), ("refund-guarded", 1)):
        for config in seed_configs(load_preset(preset), seeds):
            run = create_run(runs_dir, config)
            run_tabular(config, run, log=lambda message: None)
            ids.setdefault(config.scorer, []).append(run.run_id)
    ingest_once(runs_dir)
    with running_dashboard(tmp_path, runs_dir) as base_url:
        yield base_url, ids, runs_dir


def _chart(tab, title: str):
    """The chart shown with this title (a replaced one is kept hidden under it a moment: ui.buffered)."""
    return tab.locator('[data-testid="stPlotlyChart"]:visible').filter(has=tab.locator(".gtitle", has_text=title)).last


def _open_live(browser, base_url: str, query: str):
    tab = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    tab.goto(f"{base_url}/Live?{query}")
    for title in (RATES, COMPONENTS):
        _chart(tab, title).locator(".scatterlayer .trace").first.wait_for(timeout=60_000)
    wait_idle(tab)
    return tab


def _open_new_run(browser, base_url: str, runs_dir, before: set[str], deadline: float):
    """A tab on Live for the run folder that appeared in `runs_dir` since `before` (its name)."""
    while not (new := {p.name for p in runs_dir.iterdir() if p.is_dir()} - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert new, "no run folder appeared"
    tab = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    tab.goto(f"{base_url}/Live?run={new.pop()}")
    return tab


def _trace_names(chart) -> list[str]:
    return chart.locator(".js-plotly-plot").evaluate("gd => gd._fullData.map(t => t.name)")


def _x_range(chart) -> list[float]:
    return chart.locator(".js-plotly-plot").evaluate("gd => gd._fullLayout.xaxis.range.map(Number)")


def test_live_draws_the_runs_seed_group_behind_its_own_lines_and_the_toggle_hides_it(seeded, browser):
    base_url, ids, _ = seeded
    tab = _open_live(browser, base_url, f"run={ids['outcome'][1]}")
    rates = _chart(tab, RATES)
    names = _trace_names(rates)
    # The group's mean of each rate, drawn first (behind), in a band; the run's own lines on top.
    assert names.index("success, mean of 3 seeds") < names.index("success")
    assert names.index("violation, mean of 3 seeds") < names.index("violation")
    assert rates.locator(".scatterlayer path.js-fill").count() == 2
    toggle = tab.get_by_text("Seed group (3 runs)")
    assert toggle.is_visible()
    toggle.click()  # off: the run alone, and the URL says so
    tab.wait_for_url(re.compile(r".*group=false"), timeout=30_000)
    wait_idle(tab)
    tab.wait_for_timeout(2_000)  # the replaced chart hides 1.5 s after the new one is drawn
    assert not any("mean of" in name for name in _trace_names(_chart(tab, RATES)))
    # A run without seed siblings says so in the same place.
    lone = _open_live(browser, base_url, f"run={ids['guarded'][0]}")
    lone.get_by_text("Seed group: none").wait_for(timeout=30_000)
    assert lone.locator(".scatterlayer path.js-fill").count() == 0
    assert tab.locator('[data-testid="stException"]').count() == lone.locator('[data-testid="stException"]').count() == 0


def test_live_step_charts_zoom_and_hover_together_and_a_double_click_resets_both(seeded, browser):
    base_url, ids, _ = seeded
    tab = _open_live(browser, base_url, f"run={ids['outcome'][0]}&group=false&panels=Updates")
    rates, components, updates = _chart(tab, RATES), _chart(tab, COMPONENTS), _chart(tab, "Updates")
    updates.locator(".scatterlayer .trace").first.wait_for(timeout=30_000)  # a panel opened on demand zooms too
    full, full_rates = _x_range(components), _x_range(rates)
    _drag_zoom(tab, rates, 0.3, 0.6)
    plot = rates.locator(".nsewdrag").first.bounding_box()  # the plot area, where plotly takes a zoom box
    y = plot["y"] + plot["height"] * 0.5
    zoomed = _x_range(rates)
    assert zoomed[1] - zoomed[0] < 0.5 * (full[1] - full[0]), (zoomed, full)
    assert _x_range(components) == pytest.approx(zoomed), "the other chart did not follow the zoom"
    assert _x_range(updates) == pytest.approx(zoomed), "the updates chart did not follow the zoom"

    # Hovering one shows the same step on the other (plotly's unified hover box titles it).
    tab.mouse.move(plot["x"] + plot["width"] * 0.45, y)
    tab.wait_for_timeout(500)
    hovered = [chart.locator(".hoverlayer .legend text").first.text_content(timeout=5_000) for chart in (rates, components)]
    assert hovered[0] and re.fullmatch(r"\d+", hovered[0].strip()) and hovered[1] == hovered[0], hovered

    # A double-click resets both.
    tab.mouse.dblclick(plot["x"] + plot["width"] * 0.45, y)
    tab.wait_for_timeout(800)
    assert _x_range(rates) == pytest.approx(full_rates) and _x_range(components) == pytest.approx(full)
    assert _x_range(updates)[1] - _x_range(updates)[0] > zoomed[1] - zoomed[0]
    assert tab.locator('[data-testid="stException"]').count() == 0


def _drag_zoom(tab, chart, start: float, end: float) -> None:
    """A zoom box dragged across the plot area from `start` to `end` (fractions of its width)."""
    plot = chart.locator(".nsewdrag").first.bounding_box()
    y = plot["y"] + plot["height"] * 0.5
    tab.mouse.move(plot["x"] + plot["width"] * start, y)
    tab.mouse.down()
    tab.mouse.move(plot["x"] + plot["width"] * (start + end) / 2, y + 40, steps=8)
    tab.mouse.move(plot["x"] + plot["width"] * end, y + 60, steps=8)
    tab.mouse.up()
    tab.wait_for_timeout(800)


def _zoomed_range(tab, title: str, timeout_s: float = 15.0) -> list[float]:
    """The x range of the chart shown with `title` once a zoom has reached it: no longer plotly's
    autorange, and the same on two reads 0.3 s apart (a chart redrawn while the run trains may be
    read in the middle of its draw, before it takes the zoom)."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        auto, now = _chart(tab, title).locator(".js-plotly-plot").evaluate(
            "gd => [gd._fullLayout.xaxis.autorange, gd._fullLayout.xaxis.range.map(Number)]")
        if not auto and now == last:
            return now
        last = now if not auto else None
        time.sleep(0.3)
    raise AssertionError(f"the zoom did not settle on {title!r}: {last}")


def test_a_zoom_holds_while_the_run_trains_and_its_charts_are_redrawn(seeded, browser):
    from agentrl.config import load_preset

    base_url, _, runs_dir = seeded
    before = {p.name for p in runs_dir.iterdir()}
    trainer = start_training(runs_dir, load_preset("refund-outcome").model_copy(
        update={"name": "zoom-live", "rounds": 120, "step_delay": 0.3}), name="zoom-live.json")
    try:
        deadline = time.monotonic() + 60
        tab = _open_new_run(browser, base_url, runs_dir, before, deadline)
        tab.wait_for_function("[...document.querySelectorAll('.gtitle')].filter(t => t.textContent.includes('per step'))"
                              ".length > 0", timeout=90_000)
        while (step_counter(tab) or (0, 0))[0] < 12 and time.monotonic() < deadline + 60:
            time.sleep(0.3)
        _drag_zoom(tab, _chart(tab, RATES), 0.2, 0.5)
        zoomed, at = _zoomed_range(tab, RATES), step_counter(tab)[0]
        # Every frame from now on: the x range of the rates chart a person sees (the one on top at its centre).
        center = _chart(tab, RATES).bounding_box()
        tab.evaluate("""([x, y, range]) => {
          window.__unzoomed = 0; window.__seen = 0;
          const sample = () => {
            const gd = document.elementFromPoint(x, y)?.closest('.js-plotly-plot');
            if (gd && gd._fullLayout) {
              window.__seen++;
              const now = gd._fullLayout.xaxis.range.map(Number);
              if (Math.abs(now[0] - range[0]) > 1e-6 || Math.abs(now[1] - range[1]) > 1e-6) window.__unzoomed++;
            }
            requestAnimationFrame(sample);
          };
          requestAnimationFrame(sample);
        }""", [center["x"] + center["width"] / 2, center["y"] + center["height"] / 2, zoomed])
        while step_counter(tab)[0] < at + 15 and time.monotonic() < deadline + 120:  # charts redraw every 3 s or so
            time.sleep(0.3)
        tab.wait_for_timeout(2_000)
        assert step_counter(tab)[0] >= at + 15, "the run did not advance on the page"
        seen, unzoomed = tab.evaluate("[window.__seen, window.__unzoomed]")
        assert seen > 100 and unzoomed == 0, f"{unzoomed} of {seen} frames showed the rates chart unzoomed"
        for title in (RATES, COMPONENTS):  # the charts shown now were drawn after the zoom, and keep it
            assert _x_range(_chart(tab, title)) == pytest.approx(zoomed), title
        assert tab.locator('[data-testid="stException"]').count() == 0
    finally:
        trainer.kill()
        trainer.wait()


def test_a_seed_sibling_launched_after_live_opened_joins_the_band_without_a_reload(seeded, browser):
    from agentrl.config import load_preset

    base_url, _, runs_dir = seeded
    config = load_preset("refund-outcome").model_copy(update={"name": "late-sibling", "rounds": 600, "step_delay": 0.3})
    before = {p.name for p in runs_dir.iterdir()}
    first = start_training(runs_dir, config, name="late-sibling-1.json")
    sibling = None
    try:
        deadline = time.monotonic() + 60
        tab = _open_new_run(browser, base_url, runs_dir, before, deadline)
        tab.get_by_text("Seed group: none").wait_for(timeout=90_000)
        assert tab.get_by_text("Seed group (2 runs)").count() == 0
        sibling = start_training(runs_dir, config.model_copy(update={"seed": config.seed + 1}), name="late-sibling-2.json")
        # No reload: a run appearing redraws the page (its picker watches the statuses), and the
        # controls and the band take the sibling in.
        tab.get_by_text("Seed group (2 runs)").wait_for(timeout=45_000)  # the first run trains for 3 minutes
        tab.wait_for_function("[...document.querySelectorAll('.js-plotly-plot')].some(gd => (gd._fullData || [])"
                              ".some(t => t.name === 'success, mean of 2 seeds'))", timeout=60_000)
        assert tab.get_by_text("Seed group: none").count() == 0
        assert tab.locator('[data-testid="stException"]').count() == 0
    finally:
        for trainer in (first, sibling):
            if trainer is not None:
                trainer.kill()
                trainer.wait()


def test_lives_onset_label_sits_off_the_100_percent_line(seeded, browser):
    base_url, ids, _ = seeded
    tab = _open_live(browser, base_url, f"run={ids['outcome'][0]}&group=false")
    rates = _chart(tab, RATES)
    label = rates.locator(".annotation", has_text="hacking onset")
    label.wait_for(timeout=30_000)
    box = label.bounding_box()
    full_line = rates.locator(".js-plotly-plot").evaluate(
        "gd => gd.querySelector('.main-svg').getBoundingClientRect().top + gd._fullLayout._size.t + gd._fullLayout.yaxis.l2p(1)")
    assert not box["y"] - 2 <= full_line <= box["y"] + box["height"] + 2, (box, full_line)


def _grid_rows(tab) -> list[list[str]]:
    """The runs table's cells, row by row (the grid's accessible copy of them)."""
    return tab.evaluate("[...document.querySelectorAll('[data-testid=\"stDataFrame\"] table tbody tr')]"
                        ".map(row => [...row.querySelectorAll('td')].map(cell => cell.innerText.trim()))")


def test_the_runs_table_collapses_a_seed_group_into_one_row_with_mean_and_std(seeded, browser):
    base_url, ids, runs_dir = seeded
    folders = [p.name for p in runs_dir.iterdir() if p.is_dir()]
    runs = len(folders)  # the module's four, and any a test above trained
    # Three outcome seeds in one row; the late-sibling test's two seeds (when it ran) in another.
    late = sum("late-sibling" in name for name in folders)
    groups = runs - 2 - max(0, late - 1)
    rows_shown = "[...document.querySelectorAll('[data-testid=\"stDataFrame\"] table tbody tr')].length === {}"
    tab = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    tab.goto(base_url + "/")
    tab.wait_for_function(rows_shown.format(runs), timeout=60_000)
    wait_idle(tab)
    tab.get_by_text("Group seeds").click()
    tab.wait_for_function(rows_shown.format(groups), timeout=30_000)
    wait_idle(tab)
    assert "seeds=" in tab.url
    rows = {next(c for c in row if re.search(r"\((outcome|guarded)\)", c)): row for row in _grid_rows(tab)}
    outcome = rows["refund-outcome (outcome) · 3 seeds"]
    assert "3" in outcome and "7, 8, 9" in outcome
    assert any(re.fullmatch(r"\d+\.\d% ± \d+\.\d%", cell) for cell in outcome), outcome
    assert not any("±" in cell for cell in rows["refund-guarded (guarded)"])  # one run: no spread to show
    tab.get_by_text(f"{groups} seed groups of {runs} runs shown").wait_for(timeout=10_000)
    # The choice is in the URL: a link opens the table grouped.
    again = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    again.goto(tab.url)
    again.wait_for_function(rows_shown.format(groups), timeout=60_000)
    assert tab.locator('[data-testid="stException"]').count() == 0
