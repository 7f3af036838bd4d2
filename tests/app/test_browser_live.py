"""Issue 29, items 2, 9 and 10 on the Live page in Chromium at 1440x900: while a run trains, its
charts never show a blank frame, nothing above them moves (the onset banner's place is kept from
the start), the counters describe the step the charts end at; the chart view is in the URL; the
home page is "Runs" in the sidebar; the theme follows the browser's dark preference."""

from __future__ import annotations

import time

import pytest
from browsing import first_step, running_dashboard, start_training

from agentrl.config import load_preset

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Sampled every animation frame: how many chart panels show a drawn chart (panels told apart by
# their place on the page: a panel whose chart is being replaced and shows nothing is missing); the
# highest and lowest page position of the charts' top edge (a layout shift above them); and for how
# long at a stretch the counters named another step than the newest success curve ends at (the
# counters' text shows a moment before a chart of the same message has drawn).
SAMPLER_JS = """
window.__fewestDrawn = Infinity; window.__top = [Infinity, -Infinity]; window.__frames = 0;
window.__steps = []; window.__apart = 0; window.__apartSince = null;
const newestCurveStep = () => {
  let last = null;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const success = (plot._fullData || []).find(trace => trace.name === 'success');  // x decoded
    if (success && success.x && success.x.length) last = Math.max(last ?? -Infinity, ...Array.from(success.x));
  }
  return last;
};
const sample = () => {
  const places = new Set(); let top = Infinity;
  for (const chart of document.querySelectorAll('[data-testid="stPlotlyChart"]')) {
    const box = chart.getBoundingClientRect();
    if (box.height < 100 || !chart.checkVisibility({visibilityProperty: true, opacityProperty: true})) continue;
    if (!chart.querySelector('.main-svg .trace')) continue;  // mounted, not drawn: blank
    places.add(Math.round(box.left / 20) + ':' + Math.round((box.top + scrollY) / 20));
    top = Math.min(top, box.top + scrollY);
  }
  if (window.__armed) {
    window.__frames++;
    window.__fewestDrawn = Math.min(window.__fewestDrawn, places.size);
    if (places.size < 2 && !window.__why) window.__why = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].map(c => {
      const b = c.getBoundingClientRect(); const slot = c.closest('[class*="st-key-"]');
      return [Math.round(b.left), Math.round(b.top), Math.round(b.height), c.checkVisibility({visibilityProperty: true, opacityProperty: true}),
              !!c.querySelector('.main-svg'), !!c.querySelector('.main-svg .trace'), slot && slot.className.match(/st-key-\\S+/)[0]];
    });
    if (top < Infinity) window.__top = [Math.min(window.__top[0], top), Math.max(window.__top[1], top)];
    const caption = [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
      .map(e => e.innerText).find(t => t.startsWith('Counters and charts at step'));
    const counted = caption ? parseInt(caption.match(/step (\\d+)/)[1]) : null;
    const now = performance.now();
    if (counted !== null && window.__steps[window.__steps.length - 1] !== counted) window.__steps.push(counted);
    if (counted === null || counted !== newestCurveStep()) {
      window.__apartSince = window.__apartSince ?? now;
      window.__apart = Math.max(window.__apart, now - window.__apartSince);
    } else window.__apartSince = null;
  }
  requestAnimationFrame(sample);
};
requestAnimationFrame(sample);
"""


def test_live_charts_never_blank_nothing_above_them_moves_and_counters_match_the_charts(trained_pair, browser, tmp_path):
    runs_dir, _ = trained_pair
    with running_dashboard(tmp_path, runs_dir) as base_url:
        # The outcome-only run: its onset banner appears mid-run (about step 10 of the preset).
        config = load_preset("refund-outcome").model_copy(update={"name": "steady-live", "rounds": 200, "step_delay": 0.3})
        before = {p.name for p in runs_dir.iterdir()}
        trainer = start_training(runs_dir, config)
        try:
            deadline = time.monotonic() + 60
            while not (new := {p.name for p in runs_dir.iterdir() if p.is_dir()} - before) and time.monotonic() < deadline:
                time.sleep(0.2)
            tab = browser.new_page(viewport={"width": 1440, "height": 900})
            tab.add_init_script(SAMPLER_JS)
            tab.goto(f"{base_url}/Live?run={new.pop()}")
            assert first_step(tab, timeout_s=90) is not None
            tab.wait_for_function("document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .main-svg .trace').length >= 2",
                                  timeout=60_000)
            time.sleep(1.0)
            tab.evaluate("window.__armed = true")
            time.sleep(20)
            tab.evaluate("window.__armed = false")
            frames, fewest, (top_min, top_max), apart, steps = tab.evaluate(
                "[window.__frames, window.__fewestDrawn, window.__top, window.__apart, window.__steps]")
            assert frames > 20, "the tab sampled too few frames to tell"
            assert fewest == 2, f"a chart panel was blank in at least one of {frames} frames: {tab.evaluate('window.__why')}"
            assert top_max - top_min < 2, f"the charts moved by {top_max - top_min:.0f} px while the run trained"
            assert len(steps) >= 3, f"the run did not advance on the page: {steps}"
            # Drawn from one read, the counters lead a chart only while it draws (the old page: by seconds).
            assert apart < 1500, f"the counters and the charts showed other steps for {apart:.0f} ms at a stretch"
            assert tab.locator('[data-testid="stException"]').count() == 0

            # The view is in the URL: time on the x axis and smoothing survive a reload; home is "Runs".
            tab.goto(f"{base_url}/Live?x=Time&smoothing=0.5")
            tab.wait_for_function("[...document.querySelectorAll('.xtitle')].some(t => t.textContent.startsWith("
                                  "'time since the run started'))", timeout=60_000)
            assert "smoothing=0.5" in tab.url and "x=Time" in tab.url
            home = tab.locator("[data-testid='stSidebarNav'] li").first
            home.wait_for(timeout=30_000)
            assert home.evaluate("e => getComputedStyle(e.querySelector('p'), '::after').content") == '"Runs"'
            # The theme follows the browser's dark preference.
            dark = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme="dark").new_page()
            dark.goto(f"{base_url}/Hardware")
            dark.get_by_role("heading", name="Hardware").first.wait_for(timeout=60_000)
            background = dark.evaluate("getComputedStyle(document.querySelector('[data-testid=\"stApp\"]')).backgroundColor")
            assert sum(int(v) for v in background[4:-1].split(",")[:3]) < 3 * 80, background
        finally:
            trainer.kill()
            trainer.wait()
