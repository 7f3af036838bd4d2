"""How long each dashboard page takes to render fully in a real browser, with one run training.

Starts the dashboard (`streamlit run app.py`) on a runs directory holding the two tabular preset
runs (trained here first) and one more run that keeps training in its own process for the whole
measurement (a tabular run with a step delay, or with `--lm` the language-model preset). Headless
Chromium then opens each page two ways:

- **sidebar**: from another page, click the page's link in the sidebar navigation;
- **fresh tab**: open the page's URL in a new tab (the browser's HTTP cache is warm, as it is for
  a person who has used the dashboard before).

A page counts as rendered when its title is shown, the script run it started has finished
(`data-test-script-state` turned "notRunning" after the navigation), no skeleton is left, every visible plotly chart has drawn
its SVG and every visible table its canvas. Each figure is the median of `--repeat` measurements after one
warm-up visit per page; the targets are 1 s after sidebar navigation and 2 s in a fresh tab. Beside
each fresh-tab time: when the page first showed its title (before that the tab is blank), and how
many charts it drew. The very first visit after the dashboard started (cold: nothing imported or
cached yet) is reported on its own line: the time until its title showed and until it rendered. The
last rows are an empty Streamlit page (a title only) and one with a single small plotly chart,
measured the same way while the run trains: what any page, and any page with a chart, costs on
this machine at that moment, before it draws anything of its own.

    .venv/bin/python benchmarks/page_speed.py [--repeat 3] [--lm] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from local_dashboard import CHROMIUM, CHROMIUM_ARGS, run_env, running_dashboard  # noqa: E402

SIDEBAR_TARGET_S = 1.0
FRESH_TARGET_S = 2.0
# (sidebar label, URL path, the page's title as drawn)
PAGES = [
    ("app", "", "agentrl — runs"),
    ("Launch", "Launch", "Launch a run"),
    ("Live", "Live", "Live run"),
    ("Compare", "Compare", "Compare runs"),
    ("Review", "Review", "Review before promotion"),
    ("Hardware", "Hardware", "Hardware"),
]

# Installed in every tab: when the app's script state turns 'notRunning' (a script run ended, or
# the app's root was drawn anew already idle), noted with the tab's clock.
IDLE_RECORDER_JS = """
window.__idle = []; window.__running = [];
new MutationObserver(() => {
  const app = document.querySelector('[data-testid="stApp"]');
  const state = app && app.getAttribute('data-test-script-state');
  const now = performance.timeOrigin + performance.now();
  if (state === 'notRunning') window.__idle.push(now);
  if (state === 'running') window.__running.push(now);
}).observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-test-script-state']});
"""

# True once the page titled `title` is idle, has finished a script run since `since` (the tab's
# clock in ms since the epoch, so a navigation that loads a new document keeps counting) and
# drawn every visible chart and table.
RENDERED_JS = """
([title, since]) => {
  since = since ?? performance.timeOrigin;  // a fresh tab: since it began loading
  if (!(window.__idle || []).some(t => t >= since)) return false;
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  const h1 = document.querySelector('h1');
  if (!h1 || !h1.innerText.trim().startsWith(title)) return false;
  if (document.querySelector('[data-testid="stSkeleton"]')) return false;
  const charts = document.querySelectorAll('[data-testid="stPlotlyChart"]');
  for (const chart of charts) { if (chart.checkVisibility() && !chart.querySelector('.main-svg')) return false; }
  const tables = document.querySelectorAll('[data-testid="stDataFrame"]');
  for (const table of tables) { if (table.checkVisibility() && !table.querySelector('canvas')) return false; }
  return true;
}
"""


def train_pair(runs_dir: Path) -> None:
    from agentrl.config import load_preset
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.launcher import create_run
    from agentrl.store.ingest import ingest_once

    for preset in ("refund-outcome", "refund-guarded"):
        config = load_preset(preset)
        run_tabular(config, create_run(runs_dir, config), log=lambda message: None)
    ingest_once(runs_dir)


def start_training(workdir: Path, runs_dir: Path, lm: bool) -> subprocess.Popen:
    """One run that keeps training while pages are measured (its own process, as Launch starts it)."""
    from agentrl.config import load_preset

    if lm:
        config = load_preset("lm-refund-guarded").model_copy(update={"name": "speed-lm"})
    else:
        config = load_preset("refund-guarded").model_copy(update={"name": "speed-training", "rounds": 100_000,
                                                                  "step_delay": 0.25})
    path = workdir / "training.json"
    path.write_text(config.to_json())
    return subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--config", str(path), "--runs-dir", str(runs_dir),
                             "--quiet"], cwd=ROOT, env=run_env(runs_dir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


STATE_JS = """() => [document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state'),
  document.querySelector('h1')?.innerText, !!document.querySelector('[data-testid="stSkeleton"]'),
  document.querySelectorAll('[data-testid="stPlotlyChart"]').length,
  document.querySelectorAll('[data-testid="stPlotlyChart"] .main-svg').length,
  document.querySelectorAll('[data-testid="stDataFrame"]').length,
  document.querySelectorAll('[data-testid="stDataFrame"] canvas').length]"""


def wait_rendered(page, title: str, started: float, since_ms: float | None = None, timeout_s: float = 60.0) -> float:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(RENDERED_JS, arg=[title, since_ms], timeout=timeout_s * 1000, polling=25)
    except PlaywrightTimeout:
        raise RuntimeError(f"{page.url} did not render {title!r} in {timeout_s:.0f} s: "
                           f"[script state, h1, skeleton, charts, drawn, tables, canvases] = {page.evaluate(STATE_JS)}") from None
    took = time.perf_counter() - started
    # When the first script run ended, in the tab's clock: the rest of `took` is the browser drawing.
    SCRIPT_DONE.append(page.evaluate(
        "(since) => { since = since ?? performance.timeOrigin;"
        " const ran = window.__running.find(t => t >= since) ?? since;"
        " return window.__idle.find(t => t >= ran) - since; }", since_ms) / 1000)
    return took


SCRIPT_DONE: list[float] = []  # seconds from navigation to the end of the first script run, per measurement


FIRST_CONTENT: list[float] = []  # seconds from navigation until the page's title showed, per fresh tab
CHARTS_DRAWN: list[int] = []  # plotly charts on the page once rendered, per fresh tab


def fresh_tab(context, url: str, title: str) -> float:
    page = context.new_page()
    try:
        started = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_function("() => !!document.querySelector('h1')", timeout=60_000, polling=25)
        FIRST_CONTENT.append(time.perf_counter() - started)
        took = wait_rendered(page, title, started)
        CHARTS_DRAWN.append(page.locator('[data-testid="stPlotlyChart"]').count())
        return took
    finally:
        page.close()


def from_sidebar(page, base_url: str, label: str, path: str, title: str) -> float:
    # Start from another page so the click is a real navigation.
    source_path, source_title = ("Launch", "Launch a run") if path != "Launch" else ("", "agentrl — runs")
    page.goto(f"{base_url}/{source_path}")
    wait_rendered(page, source_title, time.perf_counter())
    time.sleep(0.5)
    link = page.locator('[data-testid="stSidebarNav"] a', has_text=label).first
    since = page.evaluate("performance.timeOrigin + performance.now()")
    started = time.perf_counter()
    link.click()
    took = wait_rendered(page, title, started, since)
    page.goto("about:blank")  # a page left open would keep refreshing during the next measurement
    return took


FLOOR_APP = """import streamlit as st
st.title("Floor")
"""
FLOOR_PAGE = """import streamlit as st
st.title("Other")
"""
# The same with one small plotly chart: Streamlit loads plotly.js (4.7 MB) for the first chart of a tab.
FLOOR_CHART_PAGE = """import plotly.graph_objects as go
import streamlit as st
st.title("Chart")
st.plotly_chart(go.Figure(go.Scatter(x=list(range(30)), y=[i % 7 for i in range(30)], mode="lines")))
"""


def floor(repeat: int) -> dict[str, tuple[float, float]]:
    """An empty Streamlit page (a title, nothing else) and one with a single small plotly chart,
    measured the same way: what any page, and any page with a chart, costs on this machine now."""
    import subprocess as sp

    from local_dashboard import free_port
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="agentrl-floor-"))
    (folder / "pages").mkdir()
    (folder / "app.py").write_text(FLOOR_APP)
    (folder / "pages" / "1_Other.py").write_text(FLOOR_PAGE)
    (folder / "pages" / "2_Chart.py").write_text(FLOOR_CHART_PAGE)
    shutil.copytree(ROOT / ".streamlit", folder / ".streamlit")
    port = free_port()
    server = sp.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)], cwd=folder,
                      stdout=sp.DEVNULL, stderr=sp.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                import urllib.request

                if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_init_script(IDLE_RECORDER_JS)
            found = {}
            for path, title in (("Other", "Other"), ("Chart", "Chart")):
                fresh_tab(context, f"{base}/{path}", title)
                fresh = [fresh_tab(context, f"{base}/{path}", title) for _ in range(repeat)]
                page = context.new_page()
                side = []
                for _ in range(repeat):
                    page.goto(f"{base}/")
                    wait_rendered(page, "Floor", time.perf_counter())
                    time.sleep(0.5)
                    since = page.evaluate("performance.timeOrigin + performance.now()")
                    started = time.perf_counter()
                    page.locator('[data-testid="stSidebarNav"] a', has_text=path).first.click()
                    side.append(wait_rendered(page, title, started, since))
                page.close()
                found[path] = (statistics.median(side), statistics.median(fresh))
            browser.close()
        return found
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lm", action="store_true", help="train the language-model preset instead of a tabular run")
    parser.add_argument("--keep", help="keep the runs directory and logs here")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="agentrl-page-speed-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs_dir = workdir / "runs"
    shutil.rmtree(runs_dir, ignore_errors=True)
    runs_dir.mkdir()
    train_pair(runs_dir)
    results: dict[str, dict[str, list[float]]] = {label: {"sidebar": [], "fresh": []} for label, _, _ in PAGES}
    trainer = None
    try:
        with running_dashboard(runs_dir, workdir / "streamlit.log") as base_url:
            trainer = start_training(workdir, runs_dir, args.lm)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.add_init_script(IDLE_RECORDER_JS)
                page = context.new_page()
                # The very first visit, cold (nothing imported yet), while the run starts.
                cold = fresh_tab(context, f"{base_url}/{PAGES[0][1]}", PAGES[0][2]), FIRST_CONTENT[-1]
                time.sleep(3)  # the training run reaches the store and reports its first steps
                for label, path, title in PAGES:  # warm-up: the server's first import of each page
                    fresh_tab(context, f"{base_url}/{path}", title)
                for _ in range(args.repeat):
                    for label, path, title in PAGES:
                        results[label]["sidebar"].append(from_sidebar(page, base_url, label, path, title))
                        results[label].setdefault("sidebar_script", []).append(SCRIPT_DONE[-1])
                        results[label]["fresh"].append(fresh_tab(context, f"{base_url}/{path}", title))
                        results[label].setdefault("fresh_script", []).append(SCRIPT_DONE[-1])
                        results[label].setdefault("fresh_title", []).append(FIRST_CONTENT[-1])
                        results[label].setdefault("charts", []).append(CHARTS_DRAWN[-1])
                browser.close()
            floors = floor(args.repeat)  # while the run still trains
    finally:
        if trainer is not None:
            trainer.kill()
            trainer.wait()
    kind = "language-model" if args.lm else "tabular"
    print(f"Page render time, median of {args.repeat} (one {kind} run training; targets "
          f"{SIDEBAR_TARGET_S:.0f} s from the sidebar, {FRESH_TARGET_S:.0f} s in a fresh tab)")
    print(f"{'page':<10} {'sidebar s':>10} {'fresh tab s':>12}  all sidebar / all fresh  "
          "(median time to the end of the first script run: sidebar, fresh; fresh tab's title shown at; charts)")
    worst = {"sidebar": 0.0, "fresh": 0.0}
    for label, _, _ in PAGES:
        side, fresh = statistics.median(results[label]["sidebar"]), statistics.median(results[label]["fresh"])
        worst = {"sidebar": max(worst["sidebar"], side), "fresh": max(worst["fresh"], fresh)}
        mark = "" if side <= SIDEBAR_TARGET_S and fresh <= FRESH_TARGET_S else "  over target"
        print(f"{label if label != 'app' else 'Runs':<10} {side:>10.2f} {fresh:>12.2f}  "
              f"{' '.join(f'{v:.2f}' for v in results[label]['sidebar'])} / "
              f"{' '.join(f'{v:.2f}' for v in results[label]['fresh'])}  "
              f"({statistics.median(results[label]['sidebar_script']):.2f}, {statistics.median(results[label]['fresh_script']):.2f}; "
              f"{statistics.median(results[label]['fresh_title']):.2f}; {max(results[label]['charts'])})"
              f"{mark}")
    print(f"{'(cold)':<10} {'':>10} {cold[0]:>12.2f}  the first visit after the dashboard started: title shown at "
          f"{cold[1]:.2f} s")
    print(f"{'(empty)':<10} {floors['Other'][0]:>10.2f} {floors['Other'][1]:>12.2f}  an empty Streamlit page on this machine now")
    print(f"{'(1 chart)':<10} {floors['Chart'][0]:>10.2f} {floors['Chart'][1]:>12.2f}  the same with one small plotly chart")
    (workdir / "page_speed.json").write_text(json.dumps(results, indent=2))
    ok = worst["sidebar"] <= SIDEBAR_TARGET_S and worst["fresh"] <= FRESH_TARGET_S
    print("all pages within target" if ok else "some pages over target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
