"""`agentrl.monitor.kept`: a run's stored signals and onset are computed once per change of what
they read (its ingested chunks, its reviews, the fixtures) and shared by every caller of the
process; any such change is seen on the next call."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from agentrl.monitor import store_onset, store_signal_columns
from agentrl.monitor.kept import forget, kept_onset, kept_signal_columns
from agentrl.review.reviews import record_review


@pytest.fixture(autouse=True)
def _nothing_kept():
    forget()
    yield
    forget()


def _same_columns(found: dict, expected: dict) -> bool:
    return list(found) == list(expected) and all(
        np.array_equal(found[k][0], expected[k][0]) and np.array_equal(found[k][1], expected[k][1]) for k in expected)


def test_kept_signals_equal_the_stored_ones_and_are_computed_once(pair_store):
    con, _, ids = pair_store
    for run_id in ids.values():
        first = kept_signal_columns(con, run_id)
        assert _same_columns(first, store_signal_columns(con, run_id))
        assert kept_signal_columns(con, run_id) is first  # the same objects: not computed again
        assert kept_onset(con, run_id) == store_onset(con, run_id)
    assert kept_onset(con, ids["outcome"]) is not None  # the outcome preset games its reward


def test_kept_arrays_are_read_only(pair_store):
    con, _, ids = pair_store
    steps, values = kept_signal_columns(con, ids["outcome"])["flagged_share"]
    with pytest.raises(ValueError):
        values[0] = 1.0
    with pytest.raises(ValueError):
        steps[0] = 0


def test_a_review_is_seen_on_the_next_call(pair_store):
    con, _, ids = pair_store
    run_id = ids["guarded"]
    before = kept_signal_columns(con, run_id)
    assert before["unverified_share"][1].max() > 0
    # Approve one trajectory of every behaviour the run showed: each is verified from now on, so no
    # step's share of unverified behaviour is above 0 any more.
    rows = con.execute("SELECT arg_min(step, step * 1000 + traj_idx), arg_min(traj_idx, step * 1000 + traj_idx) "
                       "FROM trajectories WHERE run_id = ? AND NOT violation GROUP BY behaviour", [run_id]).fetchall()
    for step, idx in rows:
        record_review(con, run_id, step, idx, "approve", "tester")
    after = kept_signal_columns(con, run_id)
    assert after is not before
    assert _same_columns(after, store_signal_columns(con, run_id))
    assert after["unverified_share"][1].max() == 0


def test_a_decision_reads_the_reviews_again_but_not_the_runs_rows(pair_store, monkeypatch):
    """After a review the run's rows are what they were: its behaviour tallies (most of the
    reading) come from the kept row reads; the signals still equal those computed from scratch."""
    from agentrl.store import queries

    con, _, ids = pair_store
    run_id = ids["guarded"]
    before = kept_signal_columns(con, run_id)
    read: list[str] = []
    for name in ("monitor_behaviour_columns", "monitor_step_tallies", "monitor_reviewed"):
        real = getattr(queries, name)
        monkeypatch.setattr(queries, name, lambda *args, real=real, name=name: read.append(name) or real(*args))
    step, idx = con.execute("SELECT step, traj_idx FROM trajectories WHERE run_id = ? AND violation LIMIT 1",
                            [run_id]).fetchone()
    record_review(con, run_id, step, idx, "reject", "tester", "takes the shortcut")
    after = kept_signal_columns(con, run_id)
    assert after is not before and read == ["monitor_reviewed"]
    assert _same_columns(after, store_signal_columns(con, run_id))
    forget()
    read.clear()
    kept_signal_columns(con, run_id)  # nothing kept: everything is read
    assert sorted(read) == ["monitor_behaviour_columns", "monitor_reviewed", "monitor_step_tallies"]


def _split_commits(chunks, last_early_step: int, held) -> None:
    """Rewrite a run's commits as two: its rows up to `last_early_step` in commit 0, the rest in
    commit 1, which is written to `held` (a run's flushes fall wherever its second ticks do)."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from agentrl.record.chunks import marker_name

    tables: dict[str, list] = {}
    for path in sorted(chunks.glob("*.parquet")):
        tables.setdefault(path.name.split(".")[1], []).append(pq.read_table(path))
        path.unlink()
    for marker in chunks.glob("*.commit"):
        marker.unlink()
    for number, folder in ((0, chunks), (1, held)):
        counts = {}
        for name, parts in tables.items():
            table = pa.concat_tables(parts)
            if "step" in table.column_names:
                early = pc.less_equal(table["step"], last_early_step)
                table = table.filter(early if number == 0 else pc.invert(early))
            elif number == 1:
                continue
            pq.write_table(table, folder / f"{number:08d}.{name}.parquet")
            counts[name] = table.num_rows
        (folder / marker_name(number)).write_text(json.dumps({"tables": counts}))


def test_chunks_ingested_later_are_seen_on_the_next_call(trained_pair, tmp_path):
    """A run whose later commits reach the store after its signals were kept: the next call
    reads them (a live run's onset, on a page that stays open)."""
    from agentrl.store.ingest import connect, ingest_once

    template, ids = trained_pair
    runs_dir = tmp_path / "fresh-runs"
    runs_dir.mkdir()
    run_id = ids["outcome"]
    shutil.copytree(template / run_id, runs_dir / run_id)
    chunks, held = runs_dir / run_id / "chunks", tmp_path / "held"
    held.mkdir()
    _split_commits(chunks, 15, held)
    ingest_once(runs_dir)
    con = connect(runs_dir)
    try:
        early = kept_signal_columns(con, run_id)
        assert early["flagged_share"][0].max() == 15
        con.close()
        for path in held.iterdir():
            shutil.move(path, chunks / path.name)
        ingest_once(runs_dir)
        con = connect(runs_dir)
        late = kept_signal_columns(con, run_id)
        assert late["flagged_share"][0].max() == 30
        assert _same_columns(late, store_signal_columns(con, run_id))
        assert kept_onset(con, run_id) == store_onset(con, run_id)
    finally:
        con.close()


def test_a_store_in_memory_is_never_kept():
    import duckdb

    from agentrl.monitor import kept
    from agentrl.store.db import apply_schema

    con = duckdb.connect(":memory:")
    apply_schema(con)
    assert kept_signal_columns(con, "no-such-run") == {}
    assert kept_onset(con, "no-such-run") is None

    assert not kept._kept


def test_no_thread_outlives_the_signals_or_the_gate(pair_store):
    """The second cursor's thread ends with the call: a thread left waiting would outlive the
    dashboard's services when Streamlit releases them (tests/app/test_pages.py)."""
    import threading

    from agentrl.review.gate import evaluate_gate

    con, runs_dir, ids = pair_store
    store_signal_columns(con, ids["outcome"])
    evaluate_gate(con, runs_dir, ids["guarded"])
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("agentrl-signals", "agentrl-gate-onset"))]
