"""Fixtures of the page tests: runs directories the dashboard reads from its environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browsing import CHROMIUM, CHROMIUM_ARGS, TEST_KEY, running_dashboard

from agentrl.config import load_preset
from agentrl.engines.tabular.engine import run_tabular
from agentrl.launcher import create_run
from agentrl.record.rundir import RUNS_DIR_ENV
from agentrl.store.ingest import ingest_once


def _train(runs_dir: Path, preset: str) -> str:
    run = create_run(runs_dir, load_preset(preset))
    run_tabular(load_preset(preset), run, log=lambda message: None)
    return run.run_id


@pytest.fixture
def trained_runs_dir(tmp_path, monkeypatch) -> Path:
    """A runs directory holding the two preset runs, ingested; the app reads it from the env."""
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    _train(runs_dir, "refund-outcome")
    _train(runs_dir, "refund-guarded")
    ingest_once(runs_dir)
    # The dashboard is configured by environment, exactly as `make run` configures it.
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    return runs_dir


@pytest.fixture
def pair_app_env(trained_pair, monkeypatch):
    """The session's trained preset pair (a private copy) as the app's runs directory: (runs_dir, ids)."""
    runs_dir, ids = trained_pair
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    return runs_dir, ids


LM_PROMPT = ('<|im_start|>system\nYou are a refund agent. Call one tool per turn.\n\n# Tools\n\nYou are provided with '
             'function signatures within <tools></tools> XML tags:\n<tools>\n'
             + "".join('{"type": "function", "function": {"name": "%s", "description": "A tool.", "parameters": '
                       '{"type": "object", "properties": {}}}}\n' % name
                       for name in ("finish", "lookup", "refund", "request_approval"))
             + '</tools><|im_end|>\n<|im_start|>user\nHandle this refund request.\nstate: start<|im_end|>\n'
             '<|im_start|>assistant\n')
LM_COMPLETION = ('<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n'
                 '<tool_response>\nstate: known_high\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
                 '<tool_call>\n{"name": "refund", "arguments": {}}\n</tool_call><|im_end|>')


def add_run(runs_dir: Path, run_id: str, kind: str, scorer: str = "guarded", steps: int = 3, status: str = "succeeded",
            states: bool = True) -> None:
    """A finished run of another engine written straight into the store, shaped as that engine
    writes it (an LM run: prompt and completion, no behaviour log-probs, no imitation ladder, no
    clipping; a coding run: no sensitive states, no updates)."""
    from agentrl.store.db import connect

    con = connect(runs_dir)
    try:
        config = load_preset({"trl": "lm-refund-guarded", "coding": "coding-tests", "tabular": "refund-guarded"}[kind])
        config = config.model_copy(update={"name": run_id, "scorer": scorer, "rounds": max(steps, 1)})
        con.execute(
            "INSERT INTO runs (run_id, name, kind, scorer, status, config, created_at, started_at, ended_at, total_steps) "
            "VALUES (?, ?, ?, ?, ?, ?, now()::TIMESTAMP, now()::TIMESTAMP, ?, ?)",
            [run_id, run_id, kind, scorer, status, config.to_json(), None if status == "running" else "2026-01-01", steps],
        )
        for step in range(1, steps + 1):
            con.execute(
                "INSERT INTO steps (run_id, step, ts, elapsed_s, success_rate, violation_rate, duplicate_rate, mean_reward, "
                "vetoed, vetoed_updates, updates, clipped, clipped_by_epoch, transitions, metrics) "
                "VALUES (?, ?, now()::TIMESTAMP, ?, 0.5, 0.25, 0, 0.4, 1, 0, ?, 0, [0], 10, MAP {'entropy': 0.2, 'kl': 0.01})",
                [run_id, step, float(step), 0 if kind == "coding" else 30],
            )
            con.execute(
                "INSERT INTO trajectories (run_id, step, traj_idx, task_id, amount, states, actions, behavior_logps, "
                "advantages, reward, components, success, violation, duplicate_effect, eligible, vetoed, updated, "
                "prompt, completion, verifier_reason) VALUES (?, ?, 0, 'train-high', 90, ['start', 'known_high'], "
                "['lookup', 'refund'], NULL, [0.5, 0.5], 0.85, MAP {'outcome': 1.0, 'step_cost': -0.15}, true, true, false, "
                "false, true, false, ?, ?, ?)",
                [run_id, step, LM_PROMPT if kind == "trl" else None, LM_COMPLETION if kind == "trl" else None,
                 "tests passed" if kind == "coding" else None],
            )
            if states:
                con.execute("INSERT INTO action_probs SELECT ?, ?, 'known_high', a, 0.25 FROM "
                            "unnest(['finish', 'lookup', 'refund', 'request_approval']) t(a)", [run_id, step])
        con.execute("INSERT INTO evals VALUES (?, ?, 'held_out', 'eval-high', ['lookup', 'refund'], true, true)", [run_id, steps])
    finally:
        con.close()


# --- Browser tests (real Chromium against `streamlit run app.py`) ------------------------------


@pytest.fixture
def dashboard(tmp_path):
    """The dashboard as `make run` starts it, on its own (empty) runs directory and port."""
    runs_dir = tmp_path / "runs"
    with running_dashboard(tmp_path, runs_dir) as base_url:
        yield base_url, runs_dir


@pytest.fixture
def dashboard_with_scripts(tmp_path):
    """The dashboard started with the script engine turned on (AGENTRL_ALLOW_SCRIPT_ENGINE=1)."""
    runs_dir = tmp_path / "runs"
    with running_dashboard(tmp_path, runs_dir, allow_script_engine=True) as base_url:
        yield base_url, runs_dir


def holding_key(tab):
    """`tab` as the browser of a person who opened the link `make run` printed: it holds the test
    dashboards' key (cookies are per host, not per port)."""
    tab.context.add_cookies([{"name": "agentrl_key", "value": TEST_KEY, "domain": "127.0.0.1", "path": "/",
                              "httpOnly": True, "sameSite": "Strict"}])
    return tab


@pytest.fixture
def browser():
    """Chromium; each `new_page()` is a tab of its own context that holds the dashboards' key (a
    test of a browser without it uses `browser.new_context()`)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure-chromium.sh (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        new_page = chromium.new_page
        chromium.new_page = lambda **options: holding_key(new_page(**options))
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, tmp_path):
    """A browser tab that leaves a screenshot behind when its test fails."""
    tab = browser.new_page(viewport={"width": 1400, "height": 1800})
    tab.external_requests = []
    tab.on("request", lambda request: None if request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:"))
           else tab.external_requests.append(request.url))
    yield tab
    tab.screenshot(path=str(tmp_path / "last.png"), full_page=True)
