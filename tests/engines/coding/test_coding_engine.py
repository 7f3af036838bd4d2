"""The 'coding' engine end to end: the scripted attempts scored in the sandbox by a real run
process, stored as trajectories with every component and the verifier's reason."""

from __future__ import annotations

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
    assert not found["eligible"].any()


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


def test_a_scripted_attempt_the_coding_task_cannot_replay_is_refused_as_a_fixture(coding_run):
    """Issue 24: fixtures go through the Task contract. The scripted attempts write their files in
    the answer's fenced blocks, which the coding task's tools never see: replayed, the test rewrite
    writes nothing, so it cannot stand for what it did, and marking it says so in one line."""
    from agentrl.review import reviews

    con, run_id = coding_run
    found = queries.find_trajectories(con, run_id, flags={"violation": True}, limit=1).iloc[0]
    with pytest.raises(reviews.ReviewError, match="does not do what it did .*it cannot become a fixture"):
        reviews.mark_exploit(con, run_id, int(found.step), int(found.traj_idx), "alice", "rewrites the tests")
    assert queries.all_fixtures(con, task="coding").empty
    assert queries.review_history(con, run_id, int(found.step), int(found.traj_idx)).empty
