"""DuckDB as an index (issue 12, finding 5): the decisions log, `rebuild`, `check`, a damaged store
named in one line with the rebuild command, and no second store beside a running dashboard.

Decisions are made through the real review and gate code on the two preset runs; the CLI runs
in a subprocess; damage is done to the real file (truncated, garbage, empty, a block overwritten).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from agentrl.record.rundir import DB_FILENAME
from agentrl.review import gate
from agentrl.review import reviews as review
from agentrl.store import decisions, queries
from agentrl.store.db import StoreDamagedError, connect
from agentrl.store.ingest import Ingestor, StoreReplacedError
from helpers import agentrl, ok

# Columns that record when the store itself did something, not what was recorded.
BOOKKEEPING = {"ingested_files": ("ingested_at",), "ingest_errors": ("seen_at",), "store_migrations": ("applied_at",)}


def snapshot(con) -> dict[str, list]:
    """Every table's rows, sorted, without bookkeeping times: what `rebuild` must give back."""
    out = {}
    for (table,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall():
        columns = [r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                                            "ORDER BY column_index", [table]).fetchall()
                   if r[0] not in BOOKKEEPING.get(table, ())]
        # The pair fixture is a copy of a store made in another folder: a run's folder is compared by its name.
        select = ", ".join("parse_filename(run_dir)" if (table, c) == ("runs", "run_dir") else c for c in columns)
        rows = con.execute(f'SELECT {select} FROM "{table}"').fetchall()
        out[table] = sorted(rows, key=repr)
    return out


def decide_everything(con, runs_dir: Path, ids: dict) -> None:
    """A review of each verdict, a fixture, a promotion and its rollback, through the real code."""
    top = queries.top_trajectories(con, ids["guarded"], 5, 3)
    for row in top.itertuples():
        review.record_review(con, ids["guarded"], row.step, row.traj_idx, "approve", "alice")
    review.record_review(con, ids["guarded"], int(top.step.iloc[0]), int(top.traj_idx.iloc[0]), "reject", "bob", "twice")
    shortcut = con.execute("SELECT step, traj_idx FROM trajectories WHERE run_id = ? AND violation LIMIT 1",
                           [ids["outcome"]]).fetchone()
    review.mark_exploit(con, ids["outcome"], shortcut[0], shortcut[1], "alice", "refunds without approval")
    gate.promote(con, runs_dir, ids["guarded"], "alice", override_reason="rejected one on purpose")
    gate.rollback(con, ids["guarded"], "bob", "checking the rollback is kept")


@pytest.fixture
def decided(pair_store):
    con, runs_dir, ids = pair_store
    decide_everything(con, runs_dir, ids)
    return con, runs_dir, ids


def test_every_decision_is_in_the_decisions_log_exactly_as_the_store_holds_it(decided):
    con, runs_dir, _ = decided
    entries = decisions.read_log(runs_dir / decisions.DECISIONS_FILE)
    # A fixture is stored with its reject, in one decision.
    assert [e["table"] for e in entries] == ["reviews"] * 7 + ["fixtures", "promotions", "promotions"]
    for table, (id_column, _, _) in decisions.TABLES.items():
        logged = {e["row"][id_column]: e["row"] for e in entries if e["table"] == table}
        stored = con.execute(f"SELECT * FROM {table}").df()
        assert sorted(logged) == sorted(stored[id_column].tolist())


def test_rebuild_from_chunks_and_the_log_loses_nothing_and_new_ids_follow_the_old(decided):
    con, runs_dir, ids = decided
    before = snapshot(con)
    con.close()
    (runs_dir / DB_FILENAME).write_bytes(b"this is not a database" * 100)

    result = ok(agentrl("rebuild", "--runs-dir", runs_dir))
    assert "10 decisions from the decisions log" in result.stdout
    kept = list(runs_dir.glob(f"{DB_FILENAME}.before-rebuild-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not")  # the damaged file is kept, aside
    con = connect(runs_dir)
    try:
        assert snapshot(con) == before
        top = queries.top_trajectories(con, ids["guarded"], 1, 1).iloc[0]
        new_id = review.record_review(con, ids["guarded"], int(top.step), int(top.traj_idx), "approve", "carol")
        assert new_id == max(r[0] for r in before["reviews"]) + 1
    finally:
        con.close()


def test_deleting_the_store_and_ingesting_again_keeps_every_review_fixture_and_promotion(decided):
    con, runs_dir, _ = decided
    before = snapshot(con)
    con.close()
    (runs_dir / DB_FILENAME).unlink()
    result = ok(agentrl("ingest", "--runs-dir", runs_dir))
    assert "10 decisions put back from the decisions log" in result.stdout
    con = connect(runs_dir)
    try:
        assert snapshot(con) == before
    finally:
        con.close()


def test_a_decision_the_log_cannot_take_is_refused_and_not_stored(pair_store):
    con, runs_dir, ids = pair_store
    (runs_dir / decisions.DECISIONS_FILE).mkdir()  # the log cannot be appended to
    top = queries.top_trajectories(con, ids["guarded"], 1, 1).iloc[0]
    with pytest.raises(decisions.DecisionLogError, match="cannot append to the decisions log"):
        review.record_review(con, ids["guarded"], int(top.step), int(top.traj_idx), "approve", "alice")
    assert con.execute("SELECT count(*) FROM reviews").fetchone()[0] == 0


def test_a_last_line_cut_short_by_a_crash_is_left_out_and_a_garbled_one_is_named(tmp_path):
    log = tmp_path / decisions.DECISIONS_FILE
    log.write_text(json.dumps({"table": "reviews", "row": {"review_id": 1}}) + "\n" + '{"table": "rev')
    assert len(decisions.read_log(log)) == 1
    log.write_text("garbage\n" + json.dumps({"table": "reviews", "row": {"review_id": 2}}) + "\n")
    scan = decisions.scan_log(log)  # the garbled line is named and costs that line only
    assert [e["row"]["review_id"] for e in scan.entries] == [2] and [n for n, _ in scan.bad] == [1]


# --- a damaged store ------------------------------------------------------------------------------


def truncate(path: Path) -> None:
    os.truncate(path, 5000)


def garbage(path: Path) -> None:
    path.write_bytes(b"\x13" * 20000)


def empty(path: Path) -> None:
    path.write_bytes(b"")


DAMAGE = {"truncated": truncate, "garbage": garbage, "empty": empty}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_store_is_one_line_naming_it_with_the_rebuild_command_on_every_command(trained_pair, tmp_path, how):
    runs_dir, ids = trained_pair
    DAMAGE[how](runs_dir / DB_FILENAME)
    expected = f"python -m agentrl rebuild --runs-dir {runs_dir}"
    for args in (["ingest"], ["check"], ["export", ids["guarded"], "--out", tmp_path / "out"]):
        result = agentrl(*args, "--runs-dir", runs_dir)
        assert result.returncode == 2, (args, result.stderr)
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: the store {runs_dir / DB_FILENAME} is damaged (") and line.endswith(expected)
    # A run still trains; its rows wait on disk and it says where they went.
    trained = agentrl("train", "--preset", "refund-outcome", "--runs-dir", runs_dir, "--quiet")
    assert trained.returncode == 0, trained.stderr
    assert "not ingested now" in trained.stdout and "Traceback" not in trained.stderr
    ok(agentrl("rebuild", "--runs-dir", runs_dir))
    assert "ok: " in ok(agentrl("check", "--runs-dir", runs_dir)).stdout


def overwrite_a_block_of_trajectories(path: Path) -> None:
    """Overwrite bytes inside a block that holds trajectory rows (its checksum no longer matches)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]
        block = con.execute("SELECT max(block_id) FROM pragma_storage_info('trajectories') WHERE block_id >= 0").fetchone()[0]
    finally:
        con.close()
    with open(path, "r+b") as handle:
        handle.seek(3 * 4096 + block * block_size + 1024)  # after the three header blocks and the block's checksum
        handle.write(b"\xaa" * 4096)


def test_a_corrupted_block_in_the_middle_is_found_by_check_and_ingest(trained_pair):
    runs_dir, _ = trained_pair
    overwrite_a_block_of_trajectories(runs_dir / DB_FILENAME)
    for command in ("check", "ingest"):
        result = agentrl(command, "--runs-dir", runs_dir)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "is damaged (" in result.stderr and "python -m agentrl rebuild" in result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_every_page_names_a_damaged_store_with_the_rebuild_command(trained_pair, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from agentrl.record.rundir import RUNS_DIR_ENV

    runs_dir, _ = trained_pair
    truncate(runs_dir / DB_FILENAME)
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    root = Path(__file__).resolve().parents[2]
    for page in ["app.py", *sorted(p.relative_to(root).as_posix() for p in (root / "pages").glob("*.py"))]:
        at = AppTest.from_file(str(root / "app.py"), default_timeout=60)
        if page != "app.py":
            at.switch_page(page)
        at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        messages = [e.value for e in at.error]
        assert len(messages) == 1 and "is damaged" in messages[0], (page, messages)
        assert f"python -m agentrl rebuild --runs-dir {runs_dir}" in messages[0]


# --- the store deleted under a running dashboard ----------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from agentrl.store.db import connect, hold_runs_dir
runs_dir = Path(sys.argv[1])
hold_runs_dir(runs_dir)
con = connect(runs_dir)
print("holding", flush=True)
sys.stdin.readline()
"""


def test_deleting_the_store_under_a_running_dashboard_never_gives_two_databases(trained_pair):
    runs_dir, _ = trained_pair
    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(runs_dir)], cwd=root, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        (runs_dir / DB_FILENAME).unlink()
        for args in (["ingest"], ["rebuild"]):
            result = agentrl(*args, "--runs-dir", runs_dir)
            assert result.returncode == 2 and "held by another process" in result.stderr, result.stderr
        trained = ok(agentrl("train", "--preset", "refund-outcome", "--runs-dir", runs_dir, "--quiet"))
        assert "the store is open elsewhere" in trained.stdout
        assert not (runs_dir / DB_FILENAME).exists()  # nobody made a second one
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    ok(agentrl("ingest", "--runs-dir", runs_dir))  # once the dashboard is gone, the store comes back whole


def test_the_dashboards_ingest_stops_with_one_line_when_its_store_is_deleted(pair_store):
    con, runs_dir, _ = pair_store
    ingestor = Ingestor(con, runs_dir)
    ingestor.ingest()
    (runs_dir / DB_FILENAME).unlink()
    with pytest.raises(StoreReplacedError, match="was deleted or replaced") as caught:
        ingestor.ingest()
    assert "python -m agentrl rebuild" in str(caught.value) and "\n" not in str(caught.value)
    assert not (runs_dir / DB_FILENAME).exists()


def test_connect_names_a_damaged_file_before_anything_else(runs_dir):
    runs_dir.mkdir()
    garbage(runs_dir / DB_FILENAME)
    with pytest.raises(StoreDamagedError) as caught:
        connect(runs_dir)
    assert "python -m agentrl rebuild" in str(caught.value)
    with pytest.raises(duckdb.Error):  # and connect changed nothing: the file is as it was
        duckdb.connect(str(runs_dir / DB_FILENAME))
    shutil.rmtree(runs_dir)
