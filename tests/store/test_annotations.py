"""Run colours, tags, notes, archiving and deleting (the decisions log outlives a deleted run);
the default Compare pair; the gate's sample puts violations first among equal rewards."""

from __future__ import annotations

import pytest

from agentrl.config import load_preset
from agentrl.engines.tabular.engine import run_tabular
from agentrl.launcher import create_run
from agentrl.review import reviews as review
from agentrl.store import curation, queries
from agentrl.store.ingest import Ingestor


def _train(con, runs_dir, config) -> str:
    run = create_run(runs_dir, config)
    run_tabular(config, run, log=lambda message: None)
    Ingestor(con, runs_dir).ingest()
    return run.run_id


def test_colours_are_assigned_once_in_creation_order_and_never_reused(pair_store):
    con, runs_dir, ids = pair_store
    assert queries.assign_run_colors(con) == 2
    assert queries.assign_run_colors(con) == 0
    first = queries.run_color_indexes(con, [ids["outcome"], ids["guarded"]])
    assert first == {ids["outcome"]: 0, ids["guarded"]: 1}
    curation.delete_run(con, runs_dir, ids["outcome"])
    third = _train(con, runs_dir, load_preset("refund-outcome", name="third").model_copy(update={"rounds": 2}))
    queries.assign_run_colors(con)
    assert queries.run_color_indexes(con, [third, ids["guarded"]]) == {ids["guarded"]: 1, third: 2}


def test_tags_notes_and_archive_show_in_the_run_list(pair_store):
    con, _, ids = pair_store
    curation.annotate(con, ids["guarded"], tags=["spec", " spec ", "pair"], note="  the veto works ", by="alice")
    curation.annotate(con, ids["guarded"], archived=True)
    row = queries.list_runs(con).set_index("run_id").loc[ids["guarded"]]
    assert (list(row["tags"]), row["note"], row["archived"]) == (["spec", "pair"], "the veto works", True)
    assert queries.newest_pair(con) == []  # an archived run is no default
    with pytest.raises(curation.CurationError, match="no run 'nope'"):
        curation.annotate(con, "nope", note="x")


def test_list_runs_carries_each_runs_final_figures(pair_store):
    con, _, ids = pair_store
    runs = queries.list_runs(con).set_index("run_id")
    assert runs.loc[ids["outcome"], ["final_success", "final_violation", "held_out_success"]].tolist() == [1.0, 0.5, 1.0]
    assert runs.loc[ids["guarded"], "final_violation"] == 0.0


def test_deleting_a_run_removes_its_folder_and_rows_and_keeps_its_reviews(pair_store):
    con, runs_dir, ids = pair_store
    run_id = ids["outcome"]
    review.record_review(con, run_id, 30, 8, "reject", "alice", "refunds without approval")
    deleted = curation.delete_run(con, runs_dir, run_id)
    assert deleted["trajectories"] == 30 * 32 and deleted["runs"] == 1
    assert not (runs_dir / run_id).exists()
    assert queries.get_run(con, run_id) is None and queries.step_metrics(con, run_id).empty
    assert queries.reviews_for_run(con, run_id)["verdict"].tolist() == ["reject"]
    # Nothing of the run is left in any table but the decisions (the onset events and the per-step
    # aggregates included), whatever tables the store gains.
    decisions = {"reviews", "fixtures", "promotions"}
    tables = [t for (t,) in con.execute("SELECT DISTINCT table_name FROM duckdb_columns() WHERE column_name = 'run_id' "
                                        "AND database_name = current_database()").fetchall()]
    assert {"events", "step_tallies", "step_components"} <= set(tables)
    left = {t: con.execute(f'SELECT count(*) FROM "{t}" WHERE run_id = ?', [run_id]).fetchone()[0]
            for t in tables if t not in decisions}
    assert {t: n for t, n in left.items() if n} == {}
    Ingestor(con, runs_dir).ingest()  # nothing comes back
    assert queries.get_run(con, run_id) is None


def test_two_sessions_deleting_one_run_at_once_delete_it_once_and_say_so_to_the_other(pair_store):
    """Two browser sessions (threads of the dashboard, each on its own cursor) press Delete on the
    same run at once: it is deleted once, and the others are told in one line that it is gone."""
    from helpers import sessions_at_once

    con, runs_dir, ids = pair_store
    run_id = ids["outcome"]
    outcomes = sessions_at_once(con, 3, lambda cursor, i: curation.delete_run(cursor, runs_dir, run_id)["trajectories"],
                                curation.CurationError)
    assert sorted(outcomes) == [("done", 30 * 32)] + [("refused", f"no run {run_id!r} in the store")] * 2, outcomes
    assert not (runs_dir / run_id).exists() and queries.get_run(con, run_id) is None


def test_a_running_run_cannot_be_deleted(pair_store):
    con, runs_dir, ids = pair_store
    con.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", [ids["guarded"]])
    with pytest.raises(curation.CurationError, match="cancel it"):
        curation.delete_run(con, runs_dir, ids["guarded"])
    assert (runs_dir / ids["guarded"]).exists()


def test_newest_pair_is_two_runs_launched_together_not_any_outcome_and_guarded(pair_store):
    con, runs_dir, ids = pair_store
    # A newer outcome run of another length is no partner for the preset guarded run.
    other = _train(con, runs_dir, load_preset("refund-outcome", name="short").model_copy(update={"rounds": 3}))
    assert queries.newest_pair(con) == [ids["outcome"], ids["guarded"]]
    assert other not in queries.newest_pair(con)


def test_equal_rewards_list_violations_first_in_the_explorer_and_the_gates_sample(pair_store):
    con, _, ids = pair_store
    top = queries.find_trajectories(con, ids["outcome"], step_min=28, step_max=30, limit=10)
    assert top["reward"].nunique() == 1  # the outcome run's top ten tie at 0.850 ...
    assert top["violation"].all()  # ... and the exploits come first
    sample = queries.top_trajectories(con, ids["outcome"], 5, 3)
    assert sample["violation"].all()
