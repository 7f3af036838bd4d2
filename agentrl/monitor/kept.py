"""A run's stored signals and onset, kept in this process for as long as nothing they read changed.

The Runs table asks for the onset of every run it shows, Compare for each of up to twenty picked
runs, Review's gate for its run; on the bench store (10M trajectory rows, runs of 15,625 steps)
one run's signals take about 120 ms to compute, and every fresh tab asked them all again (a page's
own memory, `ui.remembered`, lasts one browser session). Kept here, keyed by the store's file
and the run, they are computed once per change of what they read, for every tab of the
dashboard's process:
- the run's ingested chunks (`ingested_files`: its trajectories, tallies, distributions, probes
  and the onset events it recorded itself), and its record's creation time (a run deleted and
  written again under its id is a new run);
- its reviews (a rejected trajectory makes its actions suspect, an approved behaviour verified);
- the exploit fixtures of every task (few: their behaviours are suspect in every run of their task).
One query reads that fingerprint on each call (a few ms). The onset is detected from the kept
signals on each call (a run's recorded onset event first: one small read). A store in memory has
no file to key by, and is never kept.

What the signals read of the run's rows alone (`agentrl.monitor.RowReads`: its behaviours' tallies
as columns, most of the reading) is kept as well, for the few runs asked last: a review or a new
fixture changes the signals but not those, so the gate's check after each decision on Review
reads only the reviews, the fixtures and the suspect actions' uses again.

Store queries -> `agentrl.monitor.store_signal_columns` / `store_onset` -> **kept** -> Runs,
Compare, Live and the promotion gate.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from agentrl.monitor.columns import Column
from agentrl.monitor.onset import Onset

KEPT_RUNS = 256  # at most this many runs' signals are kept (a run of 15,625 steps: about 2 MB)
KEPT_ROW_READS = 4  # and this many runs' row reads (a run of 15,625 steps: about 20 MB), the last asked

_lock = threading.Lock()
_kept: OrderedDict[tuple, tuple[tuple, dict]] = OrderedDict()  # (store, run) -> (fingerprint, columns)
_rows: OrderedDict[tuple, tuple[tuple, object]] = OrderedDict()  # (store, run) -> (rows' fingerprint, RowReads)


def _remember(kept: OrderedDict, key: tuple, value: tuple, most: int) -> None:
    with _lock:
        kept[key] = value
        kept.move_to_end(key)
        while len(kept) > most:
            kept.popitem(last=False)


def kept_signal_columns(con, run_id: str) -> dict[str, Column]:
    """`store_signal_columns` of the run, computed again only when what it reads changed (from
    its kept row reads when only its reviews or the fixtures did). The arrays are shared between
    callers, and read-only."""
    from agentrl.monitor import store_signal_columns, store_signal_reads
    from agentrl.store import queries

    store, *fingerprint = queries.monitor_signals_fingerprint(con, run_id)
    if store is None:  # a store in memory: nothing to key it by
        return store_signal_columns(con, run_id)
    key, fingerprint = (store, run_id), tuple(fingerprint)
    of_rows = fingerprint[:3]  # the run's creation time and its ingested chunks: what its rows are
    with _lock:
        found = _kept.get(key)
        if found is not None and found[0] == fingerprint:
            _kept.move_to_end(key)
            return found[1]
        rows = _rows.get(key)
        rows = rows[1] if rows is not None and rows[0] == of_rows else None
    columns, rows = store_signal_reads(con, run_id, rows)  # outside the lock: another run's signals need not wait
    ready = rows.behaviours[1]
    for array in [a for column in columns.values() for a in column] + [*rows.tallies.values()] + (
            [] if ready is None else ready.arrays()):
        array.flags.writeable = False
    _remember(_kept, key, (fingerprint, columns), KEPT_RUNS)
    _remember(_rows, key, (of_rows, rows), KEPT_ROW_READS)
    return columns


def kept_onset(con, run_id: str) -> Onset | None:
    """`store_onset` of the run at the default thresholds: the event it recorded itself (one small
    read), else the onset its kept signals show."""
    from agentrl.monitor import store_onset

    return store_onset(con, run_id, signal_columns=kept_signal_columns)


def forget() -> None:
    """Drop everything kept (a test that edits a store's tables behind ingest's back)."""
    with _lock:
        _kept.clear()
        _rows.clear()
