"""Issue 29 in Chromium at 1440x900, on one dashboard for the module: a run picker keeps two picks
in a row, Review's keys do what they say and a decision leaves the page where it was, the gate's
sample opens in the transcript view, a flagged trajectory offers Reject first, the runs table
keeps its sort after a save, and a picker's status follows the run from running to succeeded."""

from __future__ import annotations

import shutil
import time

import pytest
from browsing import CHROMIUM, CHROMIUM_ARGS, running_dashboard, start_training, wait_idle
from conftest import holding_key

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(_trained_pair_template, tmp_path_factory):
    """(base_url, runs_dir, ids, the outcome run's gate sample as 'STEP/IDX' keys)."""
    from agentrl.review import gate
    from agentrl.review.transcript import key
    from agentrl.store.ingest import connect

    template, ids = _trained_pair_template
    tmp_path = tmp_path_factory.mktemp("review")
    runs_dir = tmp_path / "runs"
    shutil.copytree(template, runs_dir)
    con = connect(runs_dir)
    sample = gate.evaluate_gate(con, runs_dir, ids["outcome"], gate.GateSettings()).sample
    con.close()
    with running_dashboard(tmp_path, runs_dir) as base_url:
        yield base_url, runs_dir, dict(ids), [key(r.step, r.traj_idx) for r in sample.itertuples()]


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def tab(chromium, tmp_path):
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = holding_key(context.new_page())
    yield page
    page.screenshot(path=str(tmp_path / "last.png"))
    context.close()


def _until(check, timeout_s: float = 60, every_s: float = 0.3):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every_s)


def _picked(tab) -> str:
    return tab.get_by_role("combobox", name="Run").input_value()


def _pick(tab, run_id: str) -> None:
    tab.get_by_role("combobox", name="Run").click()
    tab.get_by_role("option").filter(has_text=run_id).first.click()
    wait_idle(tab)


def _scrolled(tab) -> float:
    """How far the page's main area is scrolled (Streamlit scrolls it, not the window)."""
    return tab.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollTop")


def _opened(tab) -> str:
    return tab.get_by_role("combobox", name="Open trajectory").input_value()


def _rows(tab) -> list[str]:
    """The runs table's names, top to bottom as shown (the grid's accessible copy of its cells)."""
    return tab.evaluate("[...document.querySelectorAll('[data-testid=\"stDataFrame\"] table tbody tr')]"
                        ".map(row => [...row.querySelectorAll('td')].map(cell => cell.innerText)"
                        ".find(text => text.startsWith('refund-')))")


def test_the_runs_table_keeps_its_sort_after_a_save_and_two_picks_in_a_row_both_stick(served, tab):
    """Finding 1: a pick right after arriving from the sidebar, and the pick after it, both hold.
    Finding 10: a save (a note) leaves the runs table sorted as the user sorted it."""
    base_url, _, ids, _ = served
    tab.goto(base_url + "/")
    grid = tab.locator('[data-testid="stDataFrame"]').first
    grid.wait_for(timeout=60_000)
    wait_idle(tab)
    assert _rows(tab) == ["refund-guarded", "refund-outcome"]  # newest first
    box = grid.bounding_box()
    for _ in range(2):  # by name, descending
        tab.mouse.click(box["x"] + 100, box["y"] + 17)
    _until(lambda: _rows(tab) == ["refund-outcome", "refund-guarded"], 10)
    tab.mouse.click(box["x"] + 15, box["y"] + 35 + 17)
    tab.get_by_text("Tags and note of").click()
    tab.get_by_role("textbox", name="Note").fill("sorted by name")
    tab.get_by_role("button", name="Save").click()
    tab.get_by_text("Saved the tags and note").wait_for(timeout=30_000)
    wait_idle(tab)
    assert _rows(tab) == ["refund-outcome", "refund-guarded"]

    tab.locator('[data-testid="stSidebarNav"] a').filter(has_text="Review").click()
    tab.get_by_role("combobox", name="Run").wait_for(timeout=60_000)
    wait_idle(tab)
    for run_id in (ids["outcome"], ids["guarded"]):
        _pick(tab, run_id)
        time.sleep(0.5)
        assert run_id in _picked(tab)
        assert f"run={run_id}" in tab.url


def test_a_flagged_trajectory_offers_reject_first_and_a_gate_sample_row_opens_it(served, tab):
    base_url, _, ids, sample = served
    run_id = ids["outcome"]
    tab.goto(f"{base_url}/Review?run={run_id}")  # its top rewards are violating refunds
    tab.get_by_role("button", name="Reject").wait_for(timeout=60_000)
    wait_idle(tab)
    assert tab.locator('[data-testid="stBaseButton-primary"]').all_inner_texts()[-1].endswith("Reject")
    tab.get_by_text("violation: the task's verifier flagged a broken rule").first.wait_for(timeout=10_000)

    step, idx = sample[0].split("/")
    tab.get_by_role("button", name="Next").click()  # another trajectory open than the sample's
    wait_idle(tab)
    assert _until(lambda: not _opened(tab).startswith(f"step {step} · #{idx} "), 10)
    tab.get_by_role("tab", name="Promotion gate").click()
    grid = tab.locator(f'.st-key-sample-{run_id} [data-testid="stDataFrame"]')
    grid.wait_for(timeout=60_000)
    wait_idle(tab)
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    tab.mouse.click(box["x"] + 15, box["y"] + 35 + 17)  # the first row's selection box
    tab.get_by_role("combobox", name="Open trajectory").wait_for(timeout=30_000)
    assert _until(lambda: _opened(tab).startswith(f"step {step} · #{idx} "), 10)
    tab.get_by_text(f"Step {step}, trajectory {idx}").wait_for(timeout=10_000)


def test_review_keys_move_and_decide_and_the_page_stays_put(served, tab):
    """j/k next and previous, a approve, r reject and f exploit fixture with the note box focused
    (typing there presses nothing); each decision opens the next one listed and none moves the page."""
    base_url, _, ids, _ = served
    tab.goto(f"{base_url}/Review?run={ids['guarded']}")
    tab.get_by_role("button", name="Approve").wait_for(timeout=60_000)
    wait_idle(tab)
    assert tab.locator('[data-testid="stBaseButton-primary"]').all_inner_texts()[-1].endswith("Approve")  # unflagged
    tab.get_by_role("combobox", name="verdict").click()  # working through the unreviewed ones
    tab.get_by_role("option", name="unreviewed").click()
    wait_idle(tab)
    tab.get_by_role("button", name="Approve").scroll_into_view_if_needed()
    tab.mouse.wheel(0, 300)
    time.sleep(0.5)
    at, first = _scrolled(tab), _opened(tab)

    def press(key: str) -> None:
        tab.evaluate("document.activeElement && document.activeElement.blur()")
        tab.keyboard.press(key)
        wait_idle(tab)

    press("j")
    second = _until(lambda: _opened(tab) != first and _opened(tab), 30)
    assert second and second != first
    press("k")
    assert _until(lambda: _opened(tab) == first, 30)

    def said(prefix: str, opened: str) -> None:
        step, idx = opened.split(" · ")[:2]
        tab.get_by_text(f"{prefix} {step} {idx}").wait_for(timeout=30_000)

    press("a")  # approved, and the next one listed opens
    said("Approved", first)
    assert _until(lambda: _opened(tab) == second, 10)
    time.sleep(2.5)  # the decisions watch has had its look: nothing redraws the page
    assert abs(_scrolled(tab) - at) < 2 and _opened(tab) == second
    press("r")
    assert tab.evaluate("document.activeElement.tagName") == "TEXTAREA"
    tab.keyboard.type("just asked, and jumped the approval")  # j, k and a in a text box press nothing
    assert _opened(tab) == second
    tab.keyboard.press("Control+Enter")
    said("Rejected", second)
    third = _until(lambda: _opened(tab) not in (first, second) and _opened(tab), 10)
    assert third and abs(_scrolled(tab) - at) < 2
    press("f")
    assert tab.evaluate("document.activeElement.tagName") == "TEXTAREA"
    tab.keyboard.type("refunds without asking")
    tab.keyboard.press("Control+Enter")
    tab.get_by_text("Stored exploit fixture").wait_for(timeout=30_000)
    assert abs(_scrolled(tab) - at) < 2
    assert tab.locator('[data-testid="stException"]').count() == 0


def test_a_pickers_status_follows_the_run_from_running_to_succeeded(served, tab):
    """Finding 5: the label says what the run is doing now, without a reload."""
    from agentrl.config import load_preset

    base_url, runs_dir, _, _ = served
    before = {p.name for p in runs_dir.iterdir()}
    config = load_preset("refund-guarded").model_copy(update={"name": "chips", "rounds": 6, "step_delay": 1.0})
    training = start_training(runs_dir, config)
    try:
        run_id = _until(lambda: next((p.name for p in runs_dir.iterdir() if p.is_dir() and p.name not in before
                                      and "chips" in p.name), None), 60)
        assert run_id

        def shown() -> bool:
            tab.goto(f"{base_url}/Review?run={run_id}")
            tab.get_by_role("combobox", name="Run").wait_for(timeout=60_000)
            return run_id in _picked(tab)

        assert _until(shown, 60, 1)
        assert _until(lambda: _picked(tab).endswith("· running"), 30), _picked(tab)
        assert _until(lambda: _picked(tab).endswith("· succeeded"), 90), _picked(tab)
    finally:
        training.wait(timeout=120)
