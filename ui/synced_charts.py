"""Charts of one page that zoom and hover together, as W&B's panels do: a zoom box dragged on one of
them zooms the others to the same x range, a double-click resets them all, and hovering one shows
the same step on the others. Live's step charts use it.

pages/2_Live.py -> **ui.synced_charts**. Streamlit sends a plotly chart's zoom nowhere (its events
are selections only), and a zoom made in the browser would be lost each time a refreshing chart is
replaced (ui.buffered draws a new element per figure). So a small script in the page's own document
does it: it listens to plotly's `plotly_relayout` and `plotly_hover` on the charts of the named
panels and applies the same x range (`Plotly.relayout`) or hover (`Plotly.Fx.hover`) to the others,
and keeps the range for the charts drawn later while the run trains, per run and x axis (a chart
against time is not zoomed to a range of steps). It acts only while this page's marker is drawn.
"""

from __future__ import annotations

import json

import streamlit as st

MARKER = "synced-charts"  # the container whose presence says the page shown syncs its charts

# No user text goes into this script: it is a constant and a list of panel keys.
_SCRIPT = """
<script>
(() => {
  const doc = document;
  doc.__agentrlSyncedPanels = %(panels)s;  // this page's panels (the last page drawn names them)
  if (doc.__agentrlSyncedCharts) return;  // once per tab: the page's reruns draw this again
  doc.__agentrlSyncedCharts = true;
  const ranges = {};  // run and x-axis title -> the shared x range; absent: plotly's own (autorange)
  let applying = 0;   // relayouts this script started: their events are not a person's zoom
  const plots = () => {
    if (!doc.querySelector('[class*="st-key-%(marker)s"]') || !window.Plotly) return [];
    const selector = doc.__agentrlSyncedPanels.map((key) => `.st-key-buffered-${key} .js-plotly-plot`).join(",");
    return [...doc.querySelectorAll(selector)].filter((gd) => gd._fullLayout && gd.on);
  };
  const xAxes = (gd) => Object.keys(gd._fullLayout).filter((key) => /^xaxis\d*$/.test(key));  // small multiples have several
  const xTitle = (gd) => xAxes(gd).map((key) => (gd._fullLayout[key].title || {}).text).find((text) => text) || "";
  const scope = (gd) => new URLSearchParams(location.search).get("run") + "|" + xTitle(gd);
  const sameScope = (gd, key) => scope(gd) === key;
  const xRange = (update) => {  // the x range a relayout set: [a, b], "auto", or null (no x change)
    for (const [key, value] of Object.entries(update)) {
      if (/^xaxis\\d*\\.autorange$/.test(key) && value) return "auto";
      if (/^xaxis\\d*\\.range$/.test(key) && Array.isArray(value)) return [value[0], value[1]];
      const first = key.match(/^(xaxis\\d*)\\.range\\[0\\]$/);
      if (first && (first[1] + ".range[1]") in update) return [value, update[first[1] + ".range[1]"]];
    }
    return null;
  };
  const apply = (gd, range) => {
    const now = gd._fullLayout.xaxis;
    if (range === "auto" ? now.autorange === true : (!now.autorange && now.range[0] === range[0] && now.range[1] === range[1])) return;
    applying++;
    const update = {};
    for (const key of xAxes(gd)) {
      if (range === "auto") update[key + ".autorange"] = true; else update[key + ".range"] = range.slice();
    }
    Promise.resolve(window.Plotly.relayout(gd, update)).finally(() => applying--);
  };
  // A draw of a chart right after a click or a drag on it is a person's zoom or reset: its
  // relayout event, which plotly sends after the draw, sets the shared range; the old one is not
  // put back on that chart meanwhile. Any other chart drawn then (a refresh while the run trains)
  // takes the shared range at once: waiting for the next check left it at the full range for up
  // to a second, and on a busy machine longer.
  // The chart is the one the button went down on (plotly ends a drag on a cover over the page).
  let lastPointerUp = -Infinity, lastPointerPlot = null;
  doc.addEventListener("mousedown", (event) => {
    lastPointerPlot = event.target instanceof Element ? event.target.closest(".js-plotly-plot") : null;
  }, true);
  doc.addEventListener("mouseup", () => { lastPointerUp = performance.now(); }, true);
  const keep = (gd) => {
    if (!gd._fullLayout.xaxis || !gd._fullLayout.xaxis.range) return;  // not drawn yet
    const range = ranges[scope(gd)];
    if (range && !(gd === lastPointerPlot && performance.now() - lastPointerUp <= 500)) apply(gd, range);
  };
  const attach = (gd) => {
    gd.__agentrlSynced = true;
    // A chart drawn anew while the run trains takes the shared zoom at the end of its draw, before
    // the browser paints it (a frame of the full range would flash).
    gd.on("plotly_afterplot", () => keep(gd));
    gd.on("plotly_relayout", (update) => {
      if (applying) return;
      const range = xRange(update);
      if (!range) return;
      const key = scope(gd);
      if (range === "auto") delete ranges[key]; else ranges[key] = range;
      for (const other of plots()) if (other !== gd && sameScope(other, key)) apply(other, range);
    });
    gd.on("plotly_hover", (event) => {
      const x = event.points && event.points.length ? event.points[0].x : null;
      if (x === null) return;
      for (const other of plots()) if (other !== gd && sameScope(other, scope(gd))) window.Plotly.Fx.hover(other, {xval: x});
    });
    gd.on("plotly_unhover", () => {
      for (const other of plots()) if (other !== gd) window.Plotly.Fx.unhover(other);
    });
  };
  const check = () => {
    for (const gd of plots()) {
      if (!gd.__agentrlSynced) attach(gd);
      keep(gd);  // Streamlit redraws a chart with its figure's own range now and then (a resize)
    }
  };
  // At once, not at the next frame: a new chart is found while plotly still draws it.
  new MutationObserver(check).observe(doc.body, {childList: true, subtree: true});
})();
</script>
"""


def install(panels: list[str]) -> None:
    """Sync the x range and hover of the charts in these `ui.buffered` panels (once per page run,
    outside any refreshing fragment)."""
    with st.container(key=MARKER):
        st.html(_SCRIPT % {"panels": json.dumps(panels), "marker": MARKER}, unsafe_allow_javascript=True)
