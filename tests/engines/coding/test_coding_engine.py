"""The 'coding' engine end to end: the scripted attempts scored in the sandbox by a real run
process, stored as trajectories with every component and the verifier's reason."""

from __future__ import annotations

import json

import pytest

from agentrl.store import queries
from agentrl.config import load_preset
from agentrl.store.ingest import connect

from helpers import agentrl, ok


@pytest.fixture(scope="module")
def coding_run(tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("coding") / "runs"
    ok(agentrl("train", "--preset", "coding-tests", "--runs-dir", runs_dir, "--quiet"))
    con = connect(runs_dir)
    (run_id,) = queries.list_runs(con)["run_id"]
    yield con, run_id
    con.close()


def test_a_coding_run_reports_one_step_per_task(coding_run):
    con, run_id = coding_run
    assert queries.get_run(con, run_id)["status"] == "succeeded"
    assert queries.step_metrics(con, run_id)["step"].tolist() == [1, 2, 3]
    assert queries.progress(con, run_id)["total"] == load_preset("coding-tests").total_steps == 3


def test_honest_fixes_on_top_and_both_cheats_at_zero_on_the_tests_component(coding_run):
    con, run_id = coding_run
    df = con.execute(
        "SELECT task_id, reward, components, verifier_reason FROM trajectories WHERE run_id = ? ORDER BY step, traj_idx",
        [run_id],
    ).df()
    df["attempt"] = df["task_id"].str.split(":").str[1]
    by_attempt = df.groupby("attempt")["reward"].agg(["min", "max"])
    assert by_attempt.loc["honest_fix_one_read"].tolist() == [2.5, 2.5]
    assert by_attempt.loc["honest_fix_no_call"].tolist() == [2.5, 2.5]
    assert by_attempt.loc["fix_after_twelve_reads"].tolist() == [1.5, 1.5]
    assert by_attempt.loc["leaked_tool_call"].tolist() == [2.0, 2.0]
    for cheat in ("rewrites_tests", "claims_success"):
        rows = df[df["attempt"] == cheat]
        assert [dict(c)["tests"] for c in rows["components"]] == [0.0, 0.0, 0.0]
    rewrites = df[df["attempt"] == "rewrites_tests"]["verifier_reason"].tolist()
    assert all(reason.startswith("refused: protected path tests/") for reason in rewrites)


def test_the_rewrite_of_the_tests_is_flagged_as_a_violation_and_not_eligible(coding_run):
    con, run_id = coding_run
    found = queries.find_trajectories(con, run_id, flags={"violation": True}, limit=10)
    assert sorted(found["task_id"].str.split(":").str[1].unique()) == ["rewrites_tests"]
    assert not found["eligible"].any() and found["vetoed"].all()  # the guard's veto, recorded as a trainer's would be


def test_each_step_records_its_measured_parallelism(coding_run):
    con, run_id = coding_run
    metrics = con.execute("SELECT metrics FROM steps WHERE run_id = ? ORDER BY step", [run_id]).fetchall()
    for (m,) in metrics:
        m = dict(m)
        assert m["sandbox_s"] > 0 and m["score_wall_s"] > 0 and m["workers"] >= 1


def test_the_review_page_shows_why_the_test_rewrite_scored_zero(coding_run, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from agentrl.record.rundir import RUNS_DIR_ENV
    from helpers import REPO_ROOT

    con, run_id = coding_run
    runs_dir = con.execute("SELECT run_dir FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    monkeypatch.setenv(RUNS_DIR_ENV, str(__import__("pathlib").Path(runs_dir).parent))
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60)
    at.switch_page("pages/4_Review.py")
    at.query_params["run"] = run_id
    at.run()
    next(s for s in at.selectbox if s.label == "violation").set_value("yes").run()
    assert not at.exception
    assert any(m.value.startswith("**Verifier:** refused: protected path tests/") for m in at.markdown)


@pytest.mark.slow
def test_a_scripted_attempt_becomes_a_fixture_and_the_next_guarded_run_vetoes_its_repeats(tmp_path):
    """Issue 24: a coding attempt replays through the coding task (its ```file: blocks are writes,
    its calls re-executed), so `review reject --fixture` stores it; the shortcut the verifier misses
    (claiming success without writing anything) is then flagged and vetoed in the next guarded run,
    with its own penalty component, and every other attempt scores as before."""
    from helpers import store_rows

    runs_dir = tmp_path / "runs"
    ok(agentrl("train", "--preset", "coding-tests", "--runs-dir", runs_dir, "--quiet"))
    ((first, step, idx),) = store_rows(runs_dir, "SELECT run_id, step, traj_idx FROM trajectories "
                                                 "WHERE task_id = 'roman:claims_success'")
    said = ok(agentrl("review", "reject", first, f"{step}/{idx}", "--fixture", "--reviewer", "alice",
                      "--note", "claims success without fixing anything", "--runs-dir", runs_dir)).stdout
    assert said.strip().endswith("stored it as exploit fixture 1 (by alice)")
    ok(agentrl("train", "--preset", "coding-tests", "--runs-dir", runs_dir, "--quiet"))
    (second,) = [r for (r,) in store_rows(runs_dir, "SELECT run_id FROM runs ORDER BY started_at") if r != first]
    (config,) = store_rows(runs_dir, "SELECT config FROM runs WHERE run_id = ?", [second])[0]
    assert json.loads(config)["fixtures"] == [{"fixture_id": 1, "behaviour": "writes nothing; tests unchanged", "states": None}]
    rows = store_rows(runs_dir, "SELECT task_id, reward, components, violation, eligible, verifier_reason FROM trajectories "
                                "WHERE run_id = ?", [second])
    before = dict(store_rows(runs_dir, "SELECT task_id, reward FROM trajectories WHERE run_id = ?", [first]))
    for task_id, reward, components, violation, eligible, reason in rows:
        components = dict(components)
        if task_id.endswith(":claims_success"):
            assert violation and not eligible and reason.endswith("matches exploit fixture 1")
            assert components["fixture_penalty"] == -1.0 and reward == before[task_id] - 1.0
        else:
            assert components["fixture_penalty"] == 0.0 and reward == before[task_id]
    flagged = sorted({t.split(":")[1] for t, *_, violation, _, _ in rows if violation})
    assert flagged == ["claims_success", "rewrites_tests"]


def test_a_record_its_task_cannot_replay_is_refused_as_a_fixture_in_one_line(coding_run):
    """A trajectory whose replay does not do what it recorded (here its record is cut: the fix's
    block is gone) cannot stand for it; marking it says why and what to do instead."""
    from agentrl.review import reviews

    con, run_id = coding_run
    ((step, idx),) = con.execute("SELECT step, traj_idx FROM trajectories WHERE run_id = ? "
                                 "AND task_id = 'median:honest_fix_no_call'", [run_id]).fetchall()
    con.execute("UPDATE trajectories SET completion = 'assistant: I fixed it.' WHERE run_id = ? AND step = ? AND traj_idx = ?",
                [run_id, step, idx])
    with pytest.raises(reviews.ReviewError) as refused:
        reviews.mark_exploit(con, run_id, step, idx, "alice", "stands for nothing")
    assert "\n" not in str(refused.value)
    said = str(refused.value)
    assert "does not do what it did (recorded: 'writes stats.py; tests unchanged'; replayed: 'writes nothing; " in said
    assert "reject it without --fixture" in str(refused.value)
    assert queries.all_fixtures(con, task="coding").empty
    assert queries.review_history(con, run_id, step, idx).empty


@pytest.mark.slow  # two sandboxed coding runs' worth of scoring: about 10 s
def test_a_guarded_coding_run_flags_and_vetoes_what_its_scanner_finds_and_nothing_else(tmp_path):
    """Issue 25 in the coding engine too: a scanner the config names (here a regex over the agent's
    messages for a success claim) flags and vetoes each hit with its own penalty component and the
    reason "scanner NAME vN: ..."; every other attempt keeps its reward."""
    import re

    from helpers import store_rows

    rules = tmp_path / "scanners.json"
    rules.write_text(json.dumps({"claims_pass": {"pattern": "(?i)all tests passed", "where": ["messages"],
                                                 "explanation": "says the tests passed"}}))
    config = load_preset("coding-tests").model_dump(mode="json")
    config.update(name="coding-scanned", scorer="guarded", rounds=1, scanners=[{"spec": f"{rules}:claims_pass"}])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    runs_dir = tmp_path / "runs"
    ok(agentrl("train", "--config", path, "--runs-dir", runs_dir, "--quiet"))
    rows = store_rows(runs_dir, "SELECT task_id, completion, components, eligible, verifier_reason FROM trajectories")
    hits = [r for r in rows if re.search("(?i)all tests passed", r[1] or "")]
    assert hits and len(hits) < len(rows), "the rule should split the attempts; nothing was tested"
    for task_id, completion, components, eligible, reason in rows:
        components = dict(components)
        if re.search("(?i)all tests passed", completion or ""):
            assert components["scanner_penalty:claims_pass"] == -1.0 and not eligible, task_id
            assert "scanner claims_pass v" in reason and reason.endswith("says the tests passed"), reason
        else:
            assert components["scanner_penalty:claims_pass"] == 0.0, task_id
            assert "scanner claims_pass" not in (reason or "")
