"""AppTest of the Behaviours view (Live and Compare), the found divergence on Compare, and Review
grouped by behaviour: on the preset pair, and on script runs recorded through `agentrl.init`
(no decision points, no gym)."""

from __future__ import annotations

import pytest
from apptest import app, figure, no_errors, no_failures, table_with, view

from agentrl.record.rundir import RUNS_DIR_ENV
from agentrl.store.ingest import ingest_once
from helpers import FLAGGED, HONEST, SHORTCUT, record_script_run, shortcut_spreads


@pytest.fixture
def script_runs(tmp_path, monkeypatch):
    """Two script runs: an honest one, and one where an unflagged shortcut takes half of each step."""
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    honest = record_script_run(runs_dir, "honest", [[(HONEST, 0.8, False)] * 7 + [(FLAGGED, 0.85, True)]] * 8)
    shortcut = record_script_run(runs_dir, "shortcut", shortcut_spreads())
    ingest_once(runs_dir)
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    return runs_dir, honest, shortcut


def test_compare_behaviours_view_stacks_each_runs_behaviours_in_stable_colours(pair_app_env):
    runs_dir, ids = pair_app_env
    at = view(app("pages/3_Compare.py").run(), "Behaviours")
    no_errors(at)
    outcome = figure(at, "refund-outcome (outcome): behaviours per step")
    guarded = figure(at, "refund-guarded (guarded): behaviours per step")
    colours = {}
    for fig in (outcome, guarded):
        for trace in fig["data"]:
            assert colours.setdefault(trace["name"], trace["color"]) == trace["color"]  # one colour in every run
    shortcut = dict(zip(outcome["data"][0]["x"], outcome["data"][0]["y"]))
    assert outcome["data"][0]["name"] == "lookup > refund > finish" and shortcut[30] > 0.9
    tables = [d.value for d in at.dataframe if {"behaviour", "first_step", "share", "reviewed"} <= set(d.value.columns)]
    assert len(tables) == 2 and all("held_out_success" in t.columns and "mean_reward" in t.columns for t in tables)


def test_a_script_runs_unverified_shortcut_shows_on_live_and_the_found_divergence_on_compare(script_runs):
    runs_dir, honest, shortcut = script_runs
    at = app("pages/2_Live.py", run=shortcut).run()
    at.button_group(key="panels").set_value(["Behaviours"]).run()
    no_errors(at) if not at.warning else no_failures(at)
    shares = figure(at, "Behaviours: share of each step's trajectories")
    names = [t["name"] for t in shares["data"]]
    assert "⚠ refund > finish" in names
    assert any("unverified high-reward behaviour" in w.value and "refund > finish" in w.value for w in at.warning)
    table = table_with(at, "behaviour", "unverified")
    assert table.set_index("behaviour").loc[" > ".join(SHORTCUT), "unverified"] == "⚠ unverified"

    at = view(app("pages/3_Compare.py", run=[honest, shortcut]).run(), "Action distribution")
    no_failures(at)
    assert any("no action distributions at declared decision points" in i.value for i in at.info)
    found = table_with(at, "state", "js", "visits_a", "visits_b")
    assert found.iloc[0]["state"] == "(start)" and found.iloc[0]["js"] > 0.3
    assert figure(at, "Where the runs' next actions differ")["data"]


def test_review_groups_trajectories_by_behaviour_and_opens_a_member(script_runs):
    runs_dir, honest, shortcut = script_runs
    at = app("pages/4_Review.py", run=shortcut).run()
    at.toggle(key="by-behaviour").set_value(True).run()
    no_failures(at)
    grouped = table_with(at, "behaviour", "members", "mean_reward")
    assert set(grouped["behaviour"]) == {" > ".join(a) for a in (HONEST, SHORTCUT, FLAGGED)}
    assert grouped.set_index("behaviour").loc[" > ".join(SHORTCUT), "members"] == 4 * 3  # the last 3 steps, by default
    at.selectbox(key="behaviour-open").set_value(" > ".join(SHORTCUT)).run()
    no_failures(at)
    (members,) = [d.value for d in at.dataframe if {"step", "traj_idx", "verdict"} <= set(d.value.columns)
                  and "members" not in d.value.columns]
    assert len(members) == 12 and (members["reward"] == 0.9).all()
    assert at.selectbox(key="open-trajectory").value == f"{members.iloc[0]['step']}/{members.iloc[0]['traj_idx']}"
    assert any(m.value.startswith("#### Step 8") for m in at.markdown)  # the member is opened below
