"""In a real browser (issue 25): Review filters a run's trajectories by a scanner's hits, lists
which scanners hit each one, and shows the open trajectory with the item the scanner cited
highlighted."""

from __future__ import annotations

import re

import pytest
from browsing import running_dashboard, wait_idle
from expense_runs import BATCH, SCANNERS_JSON, SHORTCUTS, record_expense_run

pytestmark = pytest.mark.browser


def test_review_filtered_by_a_scanner_shows_its_hits_and_the_cited_call(browser, tmp_path):
    from agentrl.cli import main

    runs_dir = tmp_path / "runs"
    run_id = record_expense_run(runs_dir, steps=1)
    assert main(["ingest", "--runs-dir", str(runs_dir)]) == 0
    assert main(["scan", run_id, "--scanner", f"{SCANNERS_JSON}:forced_approval", "--runs-dir", str(runs_dir)]) == 0
    with running_dashboard(tmp_path, runs_dir) as base_url:
        tab = browser.new_page(viewport={"width": 1600, "height": 3000})
        tab.goto(f"{base_url}/Review?run={run_id}")
        tab.get_by_text("scanner hit").first.wait_for(timeout=90_000)
        tab.get_by_role("combobox", name="scanner hit").click()
        tab.get_by_role("option", name="forced_approval").click()
        wait_idle(tab)
        transcript = tab.locator('[data-testid="stMarkdownContainer"]', has_text="◀ cited by forced_approval v").first
        transcript.wait_for(timeout=60_000)
        lines = [line for line in transcript.inner_text().splitlines() if "cited by forced_approval" in line]
        assert len(lines) == 1 and 'approve({"claim_id"' in lines[0] and '"force": true' in lines[0]
        highlighted = transcript.locator("span[style*='background']")
        assert highlighted.count() == 1 and '"force": true' in highlighted.inner_text()  # the call that decided
        heading = tab.get_by_role("heading", name=re.compile(r"Step 1, trajectory \d+")).inner_text()
        opened = int(re.search(r"trajectory (\d+)", heading).group(1))
        assert BATCH[opened][1] in SHORTCUTS  # the filter lists only the scanner's hits
        assert tab.locator('[data-testid="stException"]').count() == 0
        tab.screenshot(path=str(tmp_path / "scans.png"), full_page=True)
