"""A short language-model GRPO run end to end: the CLI starts a real run process (TRL, LoRA, the
tiny model), the store ingests it, and the Live, Compare, Review and Hardware pages show it
exactly as they show a tabular run."""

from __future__ import annotations

import json
import time

import pytest
from streamlit.testing.v1 import AppTest

from agentrl.store import queries
from agentrl.record.rundir import RUNS_DIR_ENV
from agentrl.store.ingest import connect
from helpers import REPO_ROOT, agentrl, ok

SHORT_LM = {
    "name": "lm-ci", "kind": "trl", "scorer": "guarded", "rounds": 4, "group_size": 4, "lr": 1e-3, "eval_every": 2,
    "lm": {"tasks_per_step": 2, "max_completion_length": 96, "max_tool_calls": 8},
}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A 4-step guarded LM run started by the CLI: (runs_dir, run_id, wall seconds)."""
    root = tmp_path_factory.mktemp("lm-e2e")
    config = root / "lm-ci.json"
    config.write_text(json.dumps(SHORT_LM))
    runs_dir = root / "runs"
    started = time.monotonic()
    ok(agentrl("train", "--config", config, "--runs-dir", runs_dir, "--quiet", timeout=300))
    wall = time.monotonic() - started
    con = connect(runs_dir)
    (run_id,) = queries.list_runs(con)["run_id"]
    con.close()
    return runs_dir, run_id, wall


@pytest.mark.slow
def test_a_short_lm_grpo_run_finishes_end_to_end(lm_run):
    runs_dir, run_id, wall = lm_run
    con = connect(runs_dir)
    assert queries.get_run(con, run_id)["status"] == "succeeded"
    assert queries.step_metrics(con, run_id)["step"].tolist() == [1, 2, 3, 4]
    assert queries.run_totals(con, run_id)["vetoed_updates"] == 0
    con.close()


def test_the_measured_peak_stays_within_the_budget_estimate(lm_run):
    runs_dir, run_id, _ = lm_run
    con = connect(runs_dir)
    budget = queries.budget_for_run(con, run_id).set_index("component")
    con.close()
    measured, estimate = budget.loc["total", "measured_bytes"], budget.loc["total", "estimate_bytes"]
    assert 100 * 2**20 < measured <= estimate, (measured, estimate)


def test_the_lm_run_records_the_next_action_distribution_at_known_high(lm_run):
    runs_dir, run_id, _ = lm_run
    con = connect(runs_dir)
    history = queries.action_probs_history(con, run_id, "known_high")
    assert sorted(history["step"].unique()) == [0, 1, 2, 3, 4]
    for _, dist in history.groupby("step"):
        assert dist["prob"].sum() == pytest.approx(1.0, abs=1e-6)
        assert set(dist["action"]) == {"finish", "lookup", "request_approval", "refund"}
    con.close()


@pytest.fixture
def lm_app(lm_run, monkeypatch):
    runs_dir, run_id, _ = lm_run
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))

    def app(page: str, **query) -> AppTest:
        """`page` opened on the run, with the URL's other query parameters `query` (a panel, a tab)."""
        at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60)
        at.switch_page(page)
        at.query_params["run"] = run_id
        for name, value in query.items():
            at.query_params[name] = value
        return at.run()

    return app, run_id


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error if e.value.startswith("Could not")]


def test_live_page_shows_the_lm_run_with_trl_metrics(lm_app):
    app, run_id = lm_app
    at = app("pages/2_Live.py", panels="Engine metrics")  # TRL's own metrics are a panel chosen on demand
    _clean(at)
    assert "Step 4 of 4" in at.get("progress")[0].proto.text
    chosen = at.multiselect(key=f"metrics-{run_id}").value
    assert "reward_std" in chosen and "entropy" in chosen


def test_review_page_shows_the_lm_transcript_and_the_gate(lm_app):
    app, run_id = lm_app
    at = app("pages/4_Review.py")
    _clean(at)
    codes = [c.value for c in at.code]
    assert any("<tool_call>" in c or "lookup" in c for c in codes), "the prompt and completion are shown"
    at = app("pages/4_Review.py", tab="Promotion gate")
    _clean(at)
    (gate,) = [d.value for d in at.dataframe if list(d.value.columns) == ["check", "result", "figure", "detail"]]
    assert set(gate["check"]) >= {"zero held-out violations", "zero violations on exploit probes"}


def test_compare_and_hardware_pages_draw_the_lm_run(lm_app):
    app, _ = lm_app
    for page in ("pages/3_Compare.py", "pages/5_Hardware.py"):
        _clean(app(page))
