"""The real thing: `streamlit run app.py` on a free local port, driven by headless Chromium.

Launch a run from the Launch page, open Live, and watch the charts draw and the step counter
advance. A screenshot of the Live page is saved under the test's temporary directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(port: int, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                if response.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("the dashboard did not become healthy")


@contextlib.contextmanager
def _running_dashboard(tmp_path: Path, runs_dir: Path):
    """`streamlit run app.py` on `runs_dir` and a free port; stops it and every run it launched."""
    port = _free_port()
    env = dict(os.environ, AGENTRL_RUNS_DIR=str(runs_dir), HF_HUB_OFFLINE="1")
    log = open(tmp_path / "streamlit.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_healthy(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        # The dashboard and every run it launched share nothing but the runs dir: stop them all.
        # A launched run leads its own session (launch.json's pid); its worker is in that group.
        for launch in runs_dir.glob("*/launch.json"):
            pid = json.loads(launch.read_text()).get("pid")
            if pid:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.fixture
def dashboard(tmp_path):
    """The dashboard as `make run` starts it, on its own (empty) runs directory and port."""
    runs_dir = tmp_path / "runs"
    with _running_dashboard(tmp_path, runs_dir) as base_url:
        yield base_url, runs_dir


@pytest.fixture
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure-chromium.sh (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def _step_counter(page) -> tuple[int, int] | None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        text = page.locator('[data-testid="stProgress"]').first.inner_text(timeout=1000)
    except PlaywrightTimeout:
        return None  # the page is still waiting for the run to reach the store
    match = re.search(r"Step (\d+) of (\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _first_step(page, timeout_s: float) -> tuple[int, int] | None:
    """The step counter once it shows a step past 0, or None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counter = _step_counter(page)
        if counter is not None and counter[0] > 0:
            return counter
        time.sleep(0.3)
    return None


@pytest.fixture
def page(browser, tmp_path):
    """A browser tab that leaves a screenshot behind when its test fails."""
    tab = browser.new_page(viewport={"width": 1400, "height": 1800})
    tab.external_requests = []
    tab.on("request", lambda request: None if request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:"))
           else tab.external_requests.append(request.url))
    yield tab
    tab.screenshot(path=str(tmp_path / "last.png"), full_page=True)


def test_launch_a_run_and_watch_it_live(dashboard, page, tmp_path):
    base_url, runs_dir = dashboard

    page.goto(f"{base_url}/Launch")
    page.get_by_role("button", name="Start run").wait_for(timeout=60_000)
    step_delay = page.get_by_role("spinbutton", name="Step delay (s)")
    step_delay.fill("1")  # 30 rounds x 1 s: the counter moves for 30 s, however loaded the machine
    step_delay.press("Tab")
    page.get_by_role("button", name="Start run").click()
    page.get_by_text("Started").wait_for(timeout=60_000)
    assert len([p for p in runs_dir.iterdir() if p.is_dir()]) == 1

    page.get_by_role("link", name="Watch it live").click()
    page.wait_for_url(re.compile(r".*/Live\?run="), timeout=60_000)
    # Plotly draws SVG: wait for a line path inside the success chart. "attached", not "visible":
    # the page redraws its charts every second, and under load a path between two draws can be
    # momentarily not laid out yet, which is no failure.
    page.locator(".js-plotly-plot .scatterlayer path.js-line").first.wait_for(state="attached", timeout=120_000)

    # A marker in the page's JS state: a full reload would wipe it, a fragment refresh keeps it.
    page.evaluate("window.__agentrl_marker = 42")
    first = _first_step(page, timeout_s=30)
    assert first is not None, "the step counter never showed a step"
    advanced = first
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and advanced[0] <= first[0]:
        time.sleep(0.5)
        advanced = _step_counter(page) or advanced
    assert advanced[0] > first[0], f"the step counter stayed at {first}"
    assert advanced[1] == 30
    assert page.evaluate("window.__agentrl_marker") == 42, "the Live page reloaded instead of refreshing itself"
    # Counted until they hold (a count taken mid-redraw may catch a chart being replaced).
    charts = page.locator(".js-plotly-plot")
    assert wait_for(lambda: charts.count() >= 6, timeout=60, interval=0.5), charts.count()
    drawn = page.locator(".js-plotly-plot .scatterlayer path.js-line, .js-plotly-plot .barlayer path")
    assert wait_for(lambda: drawn.count() > 0, timeout=60, interval=0.5)
    assert page.locator('[data-testid="stException"]').count() == 0
    # Local-first: the dashboard asks nothing of any other host (no fonts, icons or telemetry).
    assert page.external_requests == []
    page.locator(".js-plotly-plot .scatterlayer path.js-line").first.wait_for(state="attached", timeout=120_000)
    page.screenshot(path=str(tmp_path / "live.png"), full_page=True)
    assert (tmp_path / "live.png").stat().st_size > 10_000


def _wait_idle(page, timeout_s: float = 60) -> None:
    """Until the script run that an interaction started has finished."""
    time.sleep(0.5)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and page.locator('[data-testid="stStatusWidget"]').count():
        time.sleep(0.2)
    time.sleep(0.3)


def _review_tab(browser, url: str, reviewer: str):
    tab = browser.new_page(viewport={"width": 1400, "height": 2400})
    tab.goto(url)
    tab.get_by_role("button", name="Approve").wait_for(timeout=60_000)
    name = tab.get_by_role("textbox", name="Reviewer")
    name.fill(reviewer)
    name.press("Enter")
    _wait_idle(tab)
    return tab


def test_two_sessions_approve_then_the_guarded_run_is_promoted(trained_pair, browser, tmp_path):
    from agentrl.store import queries
    from agentrl.store.ingest import connect

    runs_dir, ids = trained_pair
    run_id = ids["guarded"]
    with _running_dashboard(tmp_path, runs_dir) as base_url:
        url = f"{base_url}/Review?run={run_id}"
        alice = _review_tab(browser, url, "alice")
        bob = _review_tab(browser, url, "bob")
        # Both sessions have the same top trajectory open; both approvals are recorded, in order.
        alice.get_by_role("button", name="Approve").click()
        alice.get_by_text("Approved step").wait_for(timeout=60_000)
        bob.get_by_role("button", name="Approve").click()
        bob.get_by_text("Approved step").wait_for(timeout=60_000)
        first_approved = bob.get_by_text("Approved step").inner_text()

        # Alice works through the gate's sample: show only unreviewed trajectories and approve
        # the top one until the top 5 of the last 3 steps are all approved.
        alice.reload()
        alice.get_by_role("button", name="Approve").wait_for(timeout=60_000)
        alice.get_by_role("textbox", name="Reviewer").fill("alice")
        alice.get_by_role("textbox", name="Reviewer").press("Enter")
        _wait_idle(alice)
        alice.get_by_role("combobox", name="verdict").click()
        alice.get_by_role("option", name="unreviewed").click()
        _wait_idle(alice)
        for _ in range(4):
            alice.get_by_role("button", name="Approve").click()
            _wait_idle(alice)
            alice.get_by_text("Approved step").wait_for(timeout=60_000)

        alice.get_by_role("tab", name="Promotion gate").click()
        alice.get_by_text("The gate passes").wait_for(timeout=60_000)
        alice.get_by_role("button", name="Promote").click()
        alice.get_by_text("Promoted (record").wait_for(timeout=60_000)
        assert alice.locator('[data-testid="stException"]').count() == 0
        alice.screenshot(path=str(tmp_path / "review.png"), full_page=True)

    con = connect(runs_dir)
    reviews = queries.reviews_for_run(con, run_id)
    first = reviews[(reviews["step"] == reviews.iloc[0]["step"]) & (reviews["traj_idx"] == reviews.iloc[0]["traj_idx"])]
    assert first["reviewer"].tolist()[:2] == ["alice", "bob"], first_approved
    assert first["review_id"].is_monotonic_increasing
    assert len(reviews) == 6
    promotions = queries.promotions(con, run_id)
    assert promotions["decision"].tolist() == ["promote"] and promotions["gate_passed"].tolist() == [True]
    assert promotions["decided_by"].tolist() == ["alice"]
    assert (runs_dir / run_id / "bundle" / "manifest.json").is_file()
    con.close()


@pytest.mark.slow
@pytest.mark.lm
def test_the_lm_pair_launched_from_the_dashboard_runs_live_to_completion(dashboard, page, tmp_path):
    """Issue 4's acceptance: the lm-refund preset pair, started from Launch, trains live (the
    counter advances on the Live page) and both runs succeed, the guarded one with vetoes and a
    zero audit counter."""
    from agentrl.store import queries
    from agentrl.store.ingest import connect

    base_url, runs_dir = dashboard
    page.goto(f"{base_url}/Launch")
    page.get_by_role("combobox", name="Preset").wait_for(timeout=60_000)
    page.get_by_role("combobox", name="Preset").click()
    page.get_by_role("option", name="lm-refund-outcome").click()
    page.get_by_text("Memory budget").wait_for(timeout=60_000)
    started = time.monotonic()
    page.get_by_role("button", name="Start outcome-vs-guarded pair").click()
    page.get_by_text("Started").wait_for(timeout=60_000)
    page.get_by_role("link", name="Watch it live").click()
    page.wait_for_url(re.compile(r".*/Live\?run="), timeout=60_000)

    first = _first_step(page, timeout_s=120)
    assert first is not None and first[1] == 60, f"the LM run never showed a step ({first})"
    statuses = []
    deadline = time.monotonic() + 280
    while time.monotonic() < deadline:
        statuses = [json.loads(p.read_text()).get("status") for p in sorted(runs_dir.glob("*/status.json"))]
        if len(statuses) == 2 and all(s in ("succeeded", "failed", "cancelled") for s in statuses):
            break
        time.sleep(1)
    wall = time.monotonic() - started
    assert statuses == ["succeeded", "succeeded"], statuses
    # Read until the counter answers: one read may miss its second under load while the page redraws.
    last = wait_for(lambda: _step_counter(page), timeout=60, interval=0.5)
    assert last is not None and last[0] > first[0], "the Live page did not follow the run"
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(tmp_path / "lm-live.png"), full_page=True)
    print(f"LM pair from the dashboard: both succeeded in {wall:.0f}s")
    # The dashboard holds the store; read the run folders' facts through a copy of the store file.
    import shutil

    copy = tmp_path / "store-copy"
    copy.mkdir()
    for _ in range(20):  # the dashboard ingests the last chunks within a tick of the end
        time.sleep(0.5)
    shutil.copy(runs_dir / "agentrl.duckdb", copy / "agentrl.duckdb")
    wal = runs_dir / "agentrl.duckdb.wal"
    if wal.exists():
        shutil.copy(wal, copy / "agentrl.duckdb.wal")
    con = connect(copy)
    runs = queries.list_runs(con).set_index("scorer")
    guarded = queries.run_totals(con, runs.loc["guarded", "run_id"])
    assert guarded["steps"] == 60 and guarded["vetoed_rollouts"] > 0 and guarded["vetoed_updates"] == 0
    con.close()
