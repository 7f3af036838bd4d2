"""The store's upkeep in the dashboard: DuckDB checkpoints off the ingest path, and compaction.

ui (the dashboard) -> **maintenance** -> db, compact. DuckDB checkpoints by itself when its
write-ahead log passes `checkpoint_threshold` (16 MiB), and it does so inside the transaction
that crossed it: an ingest commit that then takes seconds (one stalled 14.9 s under load). The
dashboard's connection raises that threshold (`defer_checkpoints`) to a ceiling it should never
reach, and this thread checkpoints instead, between ingest transactions (it holds the
Ingestor's lock), whenever the log passes `wal_limit` or ingest has been idle for a while with
anything in the log. Nothing is lost meanwhile: every committed transaction is in the log, which
DuckDB replays when the file is opened again after a crash. A backlog (one ingest of thousands of
commits) is checkpointed between its own transactions once the file grew by `growth_limit`:
DuckDB writes large appends straight into the file and frees those blocks at the checkpoint, so
without one the file would end up twice the size of its data (free blocks it reuses later).

The same thread compacts each run the Ingestor has drained (ended, every commit taken), one run
per round, a minute after it ended (a `watch` still reading it has finished by then).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

import duckdb

from agentrl.record.rundir import DB_FILENAME, RunDir, read_json, utc_now
from agentrl.store.compact import CompactReport, compact_run
from agentrl.store.db import database_file, full_disk, is_full_disk

logger = logging.getLogger(__name__)

DEFERRED_THRESHOLD = "1GiB"  # DuckDB's own checkpoint only past this: ours come far sooner
WAL_LIMIT_BYTES = 8 * 2**20  # checkpoint once the log holds this much
GROWTH_LIMIT_BYTES = 64 * 2**20  # or once the file grew this much since the last checkpoint (a backlog)
IDLE_CHECKPOINT_S = 10.0  # or once ingest has taken nothing for this long with anything logged
COMPACT_AFTER_S = 60.0  # a run is compacted this long after it ended
INTERVAL_S = 1.0


def defer_checkpoints(con: duckdb.DuckDBPyConnection, threshold: str = DEFERRED_THRESHOLD) -> None:
    """Keep DuckDB's automatic checkpoint out of this database's commits (up to `threshold` of log)."""
    con.execute(f"SET checkpoint_threshold = '{_checked_size(threshold)}'")


def _checked_size(value: str) -> str:
    digits = value.rstrip("KMGTiBb")
    if not digits.isdigit():
        raise ValueError(f"checkpoint threshold must be a size like '1GiB', not {value!r}")
    return value


def wal_bytes(con: duckdb.DuckDBPyConnection) -> int:
    """Bytes in the database's write-ahead log (0 for none, or an in-memory database)."""
    file = database_file(con)
    if file is None:
        return 0
    try:
        return os.path.getsize(f"{file}.wal")
    except OSError:
        return 0


class Maintenance:
    """Checkpoints and compaction for one store, in a daemon thread (`start=False`: call
    `run_once` yourself). `checkpoints` and `compactions` keep what it did, for the benchmark."""

    def __init__(self, ingestor, runs_dir: Path, interval: float = INTERVAL_S, wal_limit: int = WAL_LIMIT_BYTES,
                 idle_checkpoint_s: float = IDLE_CHECKPOINT_S, compact: bool = True,
                 compact_after_s: float = COMPACT_AFTER_S, start: bool = True, log: Callable[[str], None] | None = None,
                 growth_limit: int = GROWTH_LIMIT_BYTES):
        self.ingestor = ingestor
        self.runs_dir = Path(runs_dir)
        self.interval = interval
        self.wal_limit = wal_limit
        self.growth_limit = growth_limit
        self.idle_checkpoint_s = idle_checkpoint_s
        self.compact = compact
        self.compact_after_s = compact_after_s
        self.log = log or logger.info  # a run compacted
        self.checkpoints: list[tuple[float, int]] = []  # (seconds, log bytes before)
        self.compactions: list[CompactReport] = []
        self.last_error: str | None = None
        self._done: set[str] = set()  # runs compacted (or found compact) by this process
        self._idle_since = time.monotonic()
        self._stop = threading.Event()
        defer_checkpoints(ingestor.con)
        self.con = ingestor.con.cursor()  # this thread's own connection to the store (made here, used there)
        self._file = database_file(ingestor.con)
        self._checkpointed_at = self._bytes("")  # the database file at the last checkpoint
        ingestor.after_transaction = self._between_transactions
        self._thread = None
        if start:
            self._thread = threading.Thread(target=self._loop, name="agentrl-maintenance", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
                self.last_error = None
            except Exception as error:  # keep the thread alive; the next round tries again
                # A full disk is said as such (DuckDB invalidates the database after a checkpoint
                # it had no room for; the dashboard opens it again, see ui.services).
                self.last_error = (str(full_disk(self._file or self.runs_dir / DB_FILENAME)) if is_full_disk(error)
                                   else f"{type(error).__name__}: {error}")
                logger.warning("agentrl store maintenance: %s", self.last_error)

    def run_once(self) -> None:
        self.maybe_checkpoint()
        if self.compact:
            self.compact_one()

    # -- checkpoints ------------------------------------------------------------------------------

    def _bytes(self, suffix: str | None = None) -> int:
        """Bytes of the database file and its log (or of one, by suffix), read from the file system."""
        if self._file is None:
            return 0
        total = 0
        for name in ([f"{self._file}{suffix}"] if suffix is not None else [str(self._file), f"{self._file}.wal"]):
            try:
                total += os.path.getsize(name)
            except OSError:
                pass
        return total

    def _between_transactions(self) -> None:
        """In the ingest thread, between two of its transactions: a backlog's checkpoint, once the
        file itself grew (large appends; a live run's small commits go to the log, checkpointed
        by this thread's own rounds)."""
        if self._bytes("") - self._checkpointed_at <= self.growth_limit:
            return
        started = time.perf_counter()
        logged = self._bytes(".wal")
        try:
            self.ingestor.con.execute("CHECKPOINT")
        except duckdb.TransactionException:
            return
        self.checkpoints.append((time.perf_counter() - started, logged))
        self._checkpointed_at = self._bytes("")

    def maybe_checkpoint(self) -> float | None:
        report = self.ingestor.last_report
        if report is None or report.files:
            self._idle_since = time.monotonic()
        logged = self._bytes(".wal")
        idle = time.monotonic() - self._idle_since >= self.idle_checkpoint_s
        if logged > self.wal_limit or (logged and idle):
            return self.checkpoint()
        return None

    def checkpoint(self) -> float | None:
        """Checkpoint now, between two ingest transactions; seconds it took, or None if DuckDB refused
        (another transaction was open: the next round tries again)."""
        with self.ingestor.lock:
            logged = self._bytes(".wal")
            started = time.perf_counter()
            try:
                self.con.execute("CHECKPOINT")
            except duckdb.TransactionException:
                return None
            seconds = time.perf_counter() - started
            self._checkpointed_at = self._bytes("")
        self.checkpoints.append((seconds, logged))
        return seconds

    # -- compaction -------------------------------------------------------------------------------

    def compact_one(self, now: datetime | None = None) -> CompactReport | None:
        """Compact the next drained run that ended at least `compact_after_s` ago."""
        for run_id in sorted(self.ingestor.drained - self._done):
            run = RunDir(self.runs_dir / run_id)
            if not self._ended_long_enough(run, now):
                continue
            self._done.add(run_id)
            try:
                report = compact_run(self.ingestor, run, con=self.con)
            except Exception:
                self.ingestor.rescan(run_id)  # whatever it left, the next ingest and compaction finish
                raise
            if report.retry:
                self._done.discard(run_id)
            self.compactions.append(report)
            if report.number is not None:
                self.log(f"agentrl: compacted {report.summary()}")
            return report
        return None

    def _ended_long_enough(self, run: RunDir, now: datetime | None) -> bool:
        if self.compact_after_s <= 0:
            return True
        ended = (read_json(run.status_path) or {}).get("ended_at")
        try:
            ended_at = datetime.fromisoformat(str(ended))
        except ValueError:
            return True  # no end time recorded (a run of an older agentrl): its status says it ended
        return ((now or utc_now()) - ended_at).total_seconds() >= self.compact_after_s

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.con.close()
