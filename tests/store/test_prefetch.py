"""Reading ahead keeps the order, reads at most `ahead` items before they are asked for, and
reads a single item (a live tick) without a thread; with it, ingest's behaviours filled in Arrow
are the ones its SQL gives."""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa

from agentrl.store.prefetch import prefetched
from agentrl.store.queries.ledger import BEHAVIOUR_SQL, with_default_behaviours


def test_items_come_back_in_order_each_with_its_reading():
    assert list(prefetched(range(50), lambda i: i * i, ahead=4)) == [(i, i * i) for i in range(50)]
    assert list(prefetched([], lambda i: i)) == []


def test_the_reader_runs_at_most_ahead_items_before_the_consumer():
    asked = []
    consumed = 0
    lead = []

    def read(i):
        asked.append(i)
        lead.append(len(asked) - consumed)
        return i

    for _ in prefetched(range(40), read, ahead=5):
        consumed += 1
    assert asked == list(range(40)) and max(lead) <= 5 + 1


def test_a_single_item_is_read_in_the_callers_thread():
    threads = []
    list(prefetched(["one"], lambda item: threads.append(threading.current_thread())))
    assert threads == [threading.current_thread()]


def test_a_consumer_that_stops_early_leaves_no_reader_running():
    gen = prefetched(range(100), lambda i: i, ahead=3)
    assert next(gen) == (0, 0)
    gen.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("agentrl-read-ahead")]


def test_behaviours_filled_in_arrow_are_the_ones_the_sql_gives():
    actions = [["lookup", "refund", "finish"], [], None, ["lookup", None, "finish"], [""], ["x" * 300, "y" * 300],
               ["café", "ünïcode"], ["lookup"]]
    given = [None, None, None, None, None, None, None, "a task's own name"]
    chunk = pa.table({"actions": pa.array(actions, pa.list_(pa.string())), "behaviour": pa.array(given, pa.string())})
    filled = with_default_behaviours(chunk)
    con = duckdb.connect()
    con.register("filled", filled)
    con.register("chunk_rows", chunk)
    expected = con.execute(f"SELECT coalesce(behaviour, {BEHAVIOUR_SQL}) FROM chunk_rows").fetchall()
    assert con.execute(f"SELECT coalesce(behaviour, {BEHAVIOUR_SQL}) FROM filled").fetchall() == expected
    plain = filled.column("behaviour").to_pylist()
    assert plain[0] == "lookup > refund > finish" and plain[7] == "a task's own name"
    assert plain[1] is None and plain[5] is None  # left to the SQL: no calls, over 500 characters
