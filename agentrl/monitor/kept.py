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

Store queries -> `agentrl.monitor.store_signal_columns` / `store_onset` -> **kept** -> Runs,
Compare, Live and the promotion gate.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from agentrl.monitor.columns import Column
from agentrl.monitor.onset import Onset

KEPT_RUNS = 256  # at most this many runs' signals are kept (a run of 15,625 steps: about 2 MB)

_lock = threading.Lock()
_kept: OrderedDict[tuple, tuple[tuple, dict]] = OrderedDict()  # (store, run) -> (fingerprint, columns)


def kept_signal_columns(con, run_id: str) -> dict[str, Column]:
    """`store_signal_columns` of the run, computed again only when what it reads changed. The
    arrays are shared between callers, and read-only."""
    from agentrl.monitor import store_signal_columns
    from agentrl.store import queries

    store, *fingerprint = queries.monitor_signals_fingerprint(con, run_id)
    if store is None:  # a store in memory: nothing to key it by
        return store_signal_columns(con, run_id)
    key, fingerprint = (store, run_id), tuple(fingerprint)
    with _lock:
        found = _kept.get(key)
        if found is not None and found[0] == fingerprint:
            _kept.move_to_end(key)
            return found[1]
    columns = store_signal_columns(con, run_id)  # outside the lock: another run's signals need not wait
    for steps, values in columns.values():
        steps.flags.writeable = values.flags.writeable = False
    with _lock:
        _kept[key] = (fingerprint, columns)
        _kept.move_to_end(key)
        while len(_kept) > KEPT_RUNS:
            _kept.popitem(last=False)
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
