"""The decisions log survives a bad line (issue 22, item 3): each entry framed with its checksum,
a torn last line set aside in `decisions.jsonl.torn` and never glued to the next entry, a garbage
line costing that line only (named by `check`, skipped by ingest, rebuild, review and the
dashboard), an older unframed log still read, and tags, notes and archive flags logged too.

Decisions are made through the real review, gate and curation code; the CLI runs in a subprocess;
damage is done to the real log file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.record.rundir import DB_FILENAME, RUNS_DIR_ENV
from agentrl.review import reviews as review
from agentrl.store import curation, decisions, queries
from agentrl.store.db import connect
from helpers import agentrl, ok


def log_of(runs_dir: Path) -> Path:
    return runs_dir / decisions.DECISIONS_FILE


def review_ids(runs_dir: Path) -> list[int]:
    con = connect(runs_dir, read_only=True)
    try:
        return [r[0] for r in con.execute("SELECT review_id FROM reviews ORDER BY review_id").fetchall()]
    finally:
        con.close()


def approve_top(con, run_id: str, n: int, by: str = "alice") -> list[int]:
    top = queries.top_trajectories(con, run_id, n, 3)
    return [review.record_review(con, run_id, int(row.step), int(row.traj_idx), "approve", by) for row in top.itertuples()]


def test_each_line_is_one_framed_entry_with_its_checksum(pair_store):
    con, runs_dir, ids = pair_store
    approve_top(con, ids["guarded"], 2)
    lines = log_of(runs_dir).read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    for line in lines[:-1]:
        framed = json.loads(line)  # still a JSON line a person can read with jq
        assert set(framed) == {"crc32", "entry"} and framed["entry"]["table"] == "reviews"
        assert decisions.parse_line(line) == framed["entry"]
    changed = lines[0].replace(b'"alice"', b'"mallory"')
    with pytest.raises(ValueError, match="checksum does not match"):
        decisions.parse_line(changed)
    with pytest.raises(ValueError, match="cut short"):
        decisions.parse_line(lines[0][:40])


def test_a_torn_last_line_is_set_aside_and_the_next_decision_rebuilds_with_the_earlier_ones(pair_store):
    con, runs_dir, ids = pair_store
    earlier = approve_top(con, ids["guarded"], 2)
    # A full disk mid-write: only the first bytes of the next entry reached the file.
    torn = decisions.frame({"format": 1, "table": "reviews", "row": {"review_id": 99, "verdict": "reject"}})[:37]
    with open(log_of(runs_dir), "ab") as handle:
        handle.write(torn)
    assert decisions.scan_log(log_of(runs_dir)).torn_tail == len(torn)

    (new,) = approve_top(con, ids["outcome"], 1, by="bob")
    assert (runs_dir / "decisions.jsonl.torn").read_bytes() == torn + b"\n"  # kept, byte for byte
    scan = decisions.scan_log(log_of(runs_dir))
    assert scan.bad == [] and scan.torn_tail == 0
    assert [e["row"]["review_id"] for e in scan.entries] == earlier + [new]
    con.close()

    ok(agentrl("rebuild", "--runs-dir", runs_dir))
    assert review_ids(runs_dir) == earlier + [new]


def test_a_full_disk_mid_append_refuses_the_decision_and_leaves_no_torn_line(pair_store):
    """A file-size limit (RLIMIT_FSIZE) fails the write part way, as a full disk does."""
    import resource
    import signal

    con, runs_dir, ids = pair_store
    (first,) = approve_top(con, ids["guarded"], 1)
    before = log_of(runs_dir).read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 40, hard))
    try:
        with pytest.raises(decisions.DecisionLogError, match="cannot append to the decisions log"):
            approve_top(con, ids["outcome"], 1)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert log_of(runs_dir).read_bytes() == before  # the 40 bytes that fitted were taken back
    assert [r[0] for r in con.execute("SELECT review_id FROM reviews").fetchall()] == [first]  # and nothing stored
    (second,) = approve_top(con, ids["outcome"], 1)  # room again: the next decision goes in whole
    assert [e["row"]["review_id"] for e in decisions.read_log(log_of(runs_dir))] == [first, second]


def test_a_garbage_line_costs_that_line_only_in_check_ingest_rebuild_and_review(pair_store):
    con, runs_dir, ids = pair_store
    kept = approve_top(con, ids["guarded"], 3)
    lost = approve_top(con, ids["guarded"], 1, by="bob")  # the same top trajectory, a second review
    after = approve_top(con, ids["outcome"], 2)
    con.close()
    lines = log_of(runs_dir).read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b'"bob"', b'"eve"')  # a changed entry: its checksum no longer matches
    lines.insert(2, b"\x00\xff not a decision at all")  # and a garbage line among the others
    log_of(runs_dir).write_bytes(b"\n".join(lines))

    checked = agentrl("check", "--runs-dir", runs_dir)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    named = [line for line in checked.stdout.splitlines() if line.startswith("decisions log")]
    assert len(named) == 2, checked.stdout
    assert f"{log_of(runs_dir)} line 3: not" in named[0] and f"{log_of(runs_dir)} line 5: an entry whose checksum" in named[1]

    (runs_dir / DB_FILENAME).unlink()
    ingested = ok(agentrl("ingest", "--runs-dir", runs_dir))
    assert "4 decisions put back" not in ingested.stdout and "5 decisions put back" in ingested.stdout
    assert "line 3" in ingested.stderr and "line 5" in ingested.stderr and "Traceback" not in ingested.stderr
    assert review_ids(runs_dir) == kept + after and lost[0] not in review_ids(runs_dir)

    rebuilt = ok(agentrl("rebuild", "--runs-dir", runs_dir))
    assert "5 decisions from the decisions log" in rebuilt.stdout
    assert review_ids(runs_dir) == kept + after
    ok(agentrl("review", "list", ids["guarded"], "--runs-dir", runs_dir))
    ok(agentrl("review", "approve", ids["outcome"], "30/0", "--reviewer", "carol", "--runs-dir", runs_dir))
    assert decisions.scan_log(log_of(runs_dir)).entries[-1]["row"]["reviewer"] == "carol"  # appended after the damage


def test_the_dashboard_shows_no_error_over_a_garbage_line_and_keeps_every_other_decision(pair_store, monkeypatch):
    from streamlit.testing.v1 import AppTest

    con, runs_dir, ids = pair_store
    kept = approve_top(con, ids["guarded"], 2)
    curation.annotate(con, ids["guarded"], tags=["spec"], by="alice")
    con.close()
    with open(log_of(runs_dir), "ab") as handle:
        handle.write(b"garbage\n")
    (runs_dir / DB_FILENAME).unlink()  # the dashboard's ingest puts every decision back from the log
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs_dir))
    root = Path(__file__).resolve().parents[2]
    for page in ("app.py", "pages/4_Review.py"):
        at = AppTest.from_file(str(root / "app.py"), default_timeout=60)
        if page != "app.py":
            at.switch_page(page)
            at.query_params["run"] = ids["guarded"]
        at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert not at.error, (page, [e.value for e in at.error])
    import streamlit

    streamlit.cache_resource.clear()  # the dashboard lets go of its store: what it made holds every other decision
    assert review_ids(runs_dir) == kept
    con = connect(runs_dir)
    try:
        assert queries.run_notes(con, ids["guarded"])["tags"] == ["spec"]
    finally:
        con.close()


def test_an_older_unframed_log_is_read_and_a_torn_entry_glued_to_the_next_keeps_the_next(tmp_path):
    log = tmp_path / decisions.DECISIONS_FILE
    first = json.dumps({"format": 1, "row": {"review_id": 1}, "table": "reviews"}, sort_keys=True)
    second = json.dumps({"format": 1, "row": {"review_id": 2}, "table": "reviews"}, sort_keys=True)
    log.write_text(f"{first}\n" + '{"format": 1, "row": {"rev' + f"{second}\n")  # what an older agentrl left
    scan = decisions.scan_log(log)
    assert [e["row"]["review_id"] for e in scan.entries] == [1, 2]
    assert scan.bad == [(2, "a torn entry glued to the next one; the next one is kept")]
    framed = decisions.frame({"format": 1, "row": {"review_id": 3}, "table": "reviews"})
    log.write_bytes(framed[:20] + framed)
    assert [e["row"]["review_id"] for e in decisions.scan_log(log).entries] == [3]


def test_tags_notes_and_archive_flags_survive_rebuild_and_a_deleted_runs_do_not_come_back(pair_store):
    con, runs_dir, ids = pair_store
    curation.annotate(con, ids["guarded"], tags=["spec", "pair"], note="the veto works", by="alice")
    curation.annotate(con, ids["guarded"], archived=True, by="bob")
    curation.annotate(con, ids["guarded"], tags=["spec"], by="bob")  # the latest edit counts
    curation.annotate(con, ids["outcome"], tags=["gone"], note="deleted next")
    curation.delete_run(con, runs_dir, ids["outcome"])
    before = con.execute("SELECT * FROM run_notes ORDER BY run_id").fetchall()
    assert [e["table"] for e in decisions.read_log(log_of(runs_dir))] == ["run_notes"] * 4
    con.close()

    rebuilt = ok(agentrl("rebuild", "--runs-dir", runs_dir))
    assert "Traceback" not in rebuilt.stderr
    con = connect(runs_dir)
    try:
        assert con.execute("SELECT * FROM run_notes ORDER BY run_id").fetchall() == before
        assert queries.run_notes(con, ids["guarded"]) == {"tags": ["spec"], "note": "the veto works", "archived": True}
        assert queries.all_tags(con) == ["spec"]  # the deleted run's tags stay gone
    finally:
        con.close()


def test_a_note_the_log_cannot_take_is_refused_and_not_stored(pair_store):
    con, runs_dir, ids = pair_store
    log_of(runs_dir).mkdir()
    with pytest.raises(decisions.DecisionLogError, match="cannot append to the decisions log"):
        curation.annotate(con, ids["guarded"], note="x")
    assert queries.run_notes(con, ids["guarded"])["note"] is None
