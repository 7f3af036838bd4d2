"""The DuckDB store: connect (applying `schemas/*.sql`), and ingest run chunks idempotently.

The dashboard process is the store's only writer: it holds one connection for its lifetime and
runs `Ingestor` in a background thread. Without a dashboard, `python -m agentrl ingest` (or a
run's own exit) does the same, if it can take DuckDB's file lock. Queries live in queries.py.

Ingest is idempotent: each chunk's rows and its `ingested_files` entry commit in one
transaction, so a crash between the two cannot happen and a file is never taken twice. Rows go
in through Arrow (`INSERT ... BY NAME SELECT * FROM <arrow table>`), never row by row.

Faults stay where they are: a damaged run file or chunk costs that run or chunk, named once
(`ingest_errors`); a store that cannot be written (damaged, full disk, deleted under us) raises
one `StoreError` line and blames no chunk. An Ingestor's first pass puts back decisions from the
decisions log that the store lacks, so ingesting into a new store loses no review.

A tick costs the same at step 15,625 as at step 10 (`agentrl.store.discovery`: a run's folder
is listed when first seen and after it ends; in between a tick looks for the next commit number).
Every run's new commits go in together, bounded per transaction. Chunks may sit behind an fsspec
URL (run.json's `chunks_url`). A commit's trajectories bring their per-step reward-component sums
(`step_components`), the monitor's tallies, each behaviour's tallies (`step_behaviours`, `run_behaviours`;
a row without a behaviour gets its tool calls') and its actions' uses (`behaviour_actions`) in the same transaction. A compacted commit (`agentrl.store.compact`) whose
replaced commits the store holds already enters the ledger without its rows.

Given a chunks URL (`chunks_url`, default `$AGENTRL_CHUNKS_URL`), a pass first copies the run files
published there by runs on other machines into this runs directory (`agentrl.record.published`),
so a head that shares nothing with the writers but the URL finds their runs by listing it.

Each run's record (`runs`), its damaged run files and runs whose files were removed:
`agentrl.store.runrecords`.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa

from agentrl.record.chunks import CHUNKS_DIR, ChunkFolderUnreachable, Commit, commit_number, sweep_uncommitted
from agentrl.record.locations import CHUNKS_URL_ENV, chunk_folder
from agentrl.record.published import sync_published
from agentrl.record.rows import conform
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, list_run_dirs, utc_now
from agentrl.record.runfiles import RunFileError, read_meta, read_status
from agentrl.store import decisions
from agentrl.store.discovery import Cursor, Unit, commit_unit, legacy_units, mtime_ns, new_commits, replaced_markers
from agentrl.store.loop import BackgroundIngest  # noqa: F401 - the dashboard's loop, imported from here
from agentrl.store.prefetch import prefetched
from agentrl.store.queries.ledger import (
    aggregate_behaviour_actions,
    aggregate_run_behaviours,
    aggregate_step_behaviours,
    aggregate_step_components,
    aggregate_step_tallies,
    insert_trajectories,
    take_without_rows,
    with_default_behaviours,
)
from agentrl.store.runrecords import RunRecords
from agentrl.store.db import (  # noqa: F401 - the errors are re-exported for callers
    StoreDamagedError,
    StoreError,
    StoreLockedError,
    StoreWriteError,
    chunk_fault,
    connect,
    file_identity,
    rebuild_command,
    store_error,
)

logger = logging.getLogger(__name__)

MAX_FILES_PER_TRANSACTION = 2000  # bounds one ingest transaction when a backlog builds up ...
MAX_ROWS_PER_TRANSACTION = 200_000  # ... and this many rows (a few seconds on two busy cores)

PUBLISHED_RETRY_S = 10.0  # a chunks URL whose listing failed is listed again this much later


@dataclass
class IngestReport:
    files: int = 0
    rows: int = 0
    runs_synced: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    seconds: float = 0.0
    decisions: int = 0  # decisions put back from the decisions log (a rebuilt or deleted store)
    published: int = 0  # copies of runs published under the chunks URL made or brought up to date


class Ingestor(RunRecords):
    """Copies new chunks and run status into the store; safe to call from one thread at a time.

    Keeps in memory which files it has taken (seeded from `ingested_files`), the next commit
    number of each run and which ended runs are fully drained, so a tick costs a look per running
    run whatever its length. `transaction_seconds` keeps how long each recent transaction took.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, runs_dir: Path, log: Callable[[str], None] | None = None,
                 chunks_url: str | None = None):
        self.con = con
        self.runs_dir = Path(runs_dir)
        # Where runs of other machines publish (None: only this runs directory's own runs).
        self.chunks_url = chunks_url if chunks_url is not None else os.environ.get(CHUNKS_URL_ENV) or None
        self._published_retry_at = 0.0  # after a listing of the URL failed: when to list it again
        self.log = log or logger.warning  # a skipped chunk, an unreachable chunk URL
        self._lock = threading.Lock()
        try:
            self._taken: set[str] = set()
            self._taken_markers: dict[str, set[str]] = {}  # run id -> commit marker names taken (never read again)
            self._highest: dict[str, int] = {}  # run id -> the highest commit number taken
            self._mark_taken(row[0] for row in con.execute("SELECT path FROM ingested_files").fetchall())
            self._bad: dict[str, tuple[int, int]] = {
                row[0]: (row[1], row[2]) for row in con.execute("SELECT path, size, mtime_ns FROM ingest_errors").fetchall()
            }
        except duckdb.Error as error:  # a damaged store found on its first read
            raise store_error(self.runs_dir, error) from None
        self._drained: dict[str, int | None] = {}  # run id -> its status.json's mtime when drained
        self._cursors: dict[str, Cursor] = {}
        self._said: dict[str, str] = {}  # run id -> the last "cannot be read now" it logged
        self._run_signatures: dict[str, tuple] = {}
        self._db_file = file_identity(con)  # the file this connection has open, to notice it being deleted
        self._replayed = False
        self.transaction_seconds: collections.deque[float] = collections.deque(maxlen=100_000)
        self.last_report: IngestReport | None = None
        self.after_transaction: Callable[[], None] | None = None  # the store's upkeep, between two transactions

    @property
    def lock(self) -> threading.Lock:
        """Held for a whole ingest: what the store's upkeep takes so it never runs inside one."""
        return self._lock

    @property
    def drained(self) -> frozenset[str]:
        """Runs that ended and whose every commit this Ingestor has taken."""
        return frozenset(self._drained)

    def taken_markers(self, run_id: str) -> frozenset[str]:
        return frozenset(self._taken_markers.get(run_id, ()))

    def rescan(self, run_id: str) -> None:
        """List this run's folder again at the next ingest (after a compaction was cut short)."""
        with self._lock:
            self._drained.pop(run_id, None)
            self._cursors.pop(run_id, None)

    def ingest(self) -> IngestReport:
        with self._lock:
            started = time.perf_counter()
            report = IngestReport()
            self._check_same_file()
            try:
                self._ingest(report)
            except duckdb.Error as error:
                # The store's fault (a damaged file, a full disk), never a chunk's: one StoreError
                # line, and the chunks stay on disk for the next tick.
                raise store_error(self.runs_dir, error) from None
            report.seconds = time.perf_counter() - started
            self.last_report = report
            return report

    def _ingest(self, report: IngestReport) -> None:
        if not self._replayed:  # once per Ingestor: a rebuilt or deleted store gets its decisions back
            report.decisions = decisions.replay(self.con, log=self.log)
            self._replayed = True
        if self.chunks_url and "://" in self.chunks_url and time.monotonic() >= self._published_retry_at:
            try:
                report.published += len(sync_published(self.runs_dir, self.chunks_url, self.log))
            except OSError as error:  # the storage does not answer: the runs copied already go on, and
                self._unreachable("<published runs>", error)  # the listing waits a while, not every tick
                self._published_retry_at = time.monotonic() + PUBLISHED_RETRY_S
        pending: list[Unit] = []
        ended: list[tuple[RunDir, Cursor | None, bool]] = []
        listed = list_run_dirs(self.runs_dir)
        self._end_lost_runs({run.run_id for run in listed}, report)
        for run in listed:
            if run.run_id in self._drained:
                if self._drained[run.run_id] == mtime_ns(run.status_path):
                    continue
                # status.json changed since: the run was continued (agentrl.init(id=..., resume=...))
                del self._drained[run.run_id]
                self._cursors.pop(run.run_id, None)
                self._run_signatures.pop(run.run_id, None)
            try:
                meta, status = read_meta(run), read_status(run) or {}
            except RunFileError as error:  # this run only; the others carry on
                self._bad_run_file(run, error, report)
                continue
            self._run_file_fixed(run)
            readable = self._sync_run(run, meta, status, report)
            cursor = self._cursor(run, meta) if readable else None
            try:
                new_units = self._new_units(run, cursor, status.get("status") in TERMINAL_STATUSES, report) \
                    if cursor is not None else []
            except OSError as error:  # its chunk URL cannot be reached now: this run waits, the others go on
                if cursor is None or not cursor.folder.remote:
                    raise
                self._unreachable(run.run_id, error)
                continue
            pending += new_units
            if status.get("status") in TERMINAL_STATUSES:
                ended.append((run, cursor, bool(new_units)))
        if pending:  # every run's new commits in as few transactions as MAX_FILES_PER_TRANSACTION allows
            self._ingest_units(pending, report)
        # A run writes its terminal status only after its last flush, so the scan after it has
        # ended finds everything it will ever write; what a flush cut short by a kill left (files
        # no commit names) can go now that no writer runs.
        for run, cursor, had_units in ended:
            try:
                sweep_uncommitted(run.root, folder=cursor.folder if cursor is not None else None)
            except OSError as error:
                if cursor is None or not cursor.folder.remote:
                    raise
                self._unreachable(run.run_id, error)
                continue
            if not had_units:
                self._drained[run.run_id] = mtime_ns(run.status_path)

    def _cursor(self, run: RunDir, meta: dict) -> Cursor:
        """This run's place in its commits (a new one when run.json moves its chunks elsewhere)."""
        folder = chunk_folder(run.root, meta)
        cursor = self._cursors.get(run.run_id)
        if cursor is None or cursor.folder != folder:
            cursor = self._cursors[run.run_id] = Cursor(folder)
        return cursor

    def _new_units(self, run: RunDir, cursor: Cursor, ended: bool, report: IngestReport) -> list[Unit]:
        """What the run has committed that the store has not taken (`agentrl.store.discovery`):
        its commits, and when its folder was listed, the part files of a record-schema-1 run."""
        taken = self._taken_markers.get(run.run_id, set())
        commits, listed = new_commits(cursor, ended, taken, self._highest.get(run.run_id, -1))
        found = legacy_units(run) if listed else []
        found += [commit_unit(run.run_id, c, cursor.folder) for c in commits
                  if not (c.replaces and self._held_already(run, c, taken, report))]
        fresh = []
        for unit in found:
            if unit.key in self._taken:
                continue
            if unit.key in self._bad and self._bad[unit.key] == unit.folder.signature(unit.marker):
                continue  # still the same broken file
            fresh.append(unit)
        return fresh

    def _held_already(self, run: RunDir, commit: Commit, taken, report: IngestReport) -> bool:
        """A compacted commit the store does not list yet: when the store took every commit it
        replaces (a compaction stopped before its ledger step), enter it without its rows and say
        True; when it took none (a rebuilt store), False: take it. Part of them is named, once."""
        replaced = replaced_markers(commit)
        held = sum(name in taken for name in replaced)
        if held == 0:
            return False
        key = f"{run.run_id}/{CHUNKS_DIR}/{commit.name}"
        if held < len(replaced):
            if key not in self._bad:
                self._record_bad(key, str(commit.marker), commit.folder.signature(commit.name),
                                 f"this compacted commit replaces {len(replaced)} commits of which the store took only "
                                 f"{held}; recreate the store from the chunks: {rebuild_command(self.runs_dir)}", report)
            return True
        rows = sum(commit.folder.num_rows(commit.file_name(table)) for table in commit.files)
        cur = self.con.cursor()
        try:
            take_without_rows(cur, key, ",".join(commit.files), run.run_id, rows, utc_now())
        finally:
            cur.close()
        self._mark_taken([key])
        return True

    def _read(self, unit: Unit, report: IngestReport, read=None) -> list[tuple[str, pa.Table]] | None:
        """Every table file of a unit, cast to its schema (`read`: what `read_unit` gave already);
        None (and the unit named) if any fails. A chunk URL that cannot be read just now raises
        `ChunkFolderUnreachable` instead: the unit is not blamed, and is read again later."""
        outcome = read_unit(unit) if read is None else read
        if isinstance(outcome, ChunkFolderUnreachable):  # nothing wrong with the commit: read again next tick
            raise outcome
        if isinstance(outcome, Exception):  # any other unreadable chunk is skipped, named, and remembered
            self._record_bad(unit.key, unit.where, unit.folder.signature(unit.marker),
                             f"{type(outcome).__name__}: {outcome}", report)
            return None
        return outcome

    def _unreachable(self, run_id: str, error: OSError) -> None:
        """A run's chunk URL failed: list it again next tick; say so once per distinct failure."""
        cursor = self._cursors.get(run_id)
        if cursor is not None:
            cursor.scanned = False
        message = f"ingest: the chunks of {run_id} cannot be read now ({error}); trying again"
        if self._said.get(run_id) != message:
            self._said[run_id] = message
            self.log(message)

    def _record_bad(self, key: str, where: str, signature: tuple, reason: str, report: IngestReport) -> None:
        size, mtime = signature
        self._bad[key] = (size, mtime)
        self.con.execute(
            "INSERT OR REPLACE INTO ingest_errors (path, size, mtime_ns, error, seen_at) VALUES (?, ?, ?, ?, ?)",
            [key, size, mtime, reason, utc_now()],
        )
        report.skipped.append((where, reason))
        self.log(f"ingest: skipped {where}: {reason}")

    def _check_same_file(self) -> None:
        """The file this connection writes must still be the store's file: deleted or replaced
        under a running dashboard, writing on would fill a database nobody will ever open."""
        if self._db_file is None:
            return
        path, identity = self._db_file
        try:
            stat = os.stat(path)
            current = (stat.st_dev, stat.st_ino)
        except OSError:
            current = None
        if current != identity:
            raise StoreReplacedError(
                f"the store {path} was deleted or replaced while this process had it open; nothing is lost "
                f"(runs' chunks and the decisions log are on disk): stop this dashboard, then "
                f"{rebuild_command(path.parent)} (or just restart the dashboard)")

    def _batches(self, units: list[Unit], report: IngestReport):
        """The units read, in batches of at most MAX_FILES_PER_TRANSACTION commits and about
        MAX_ROWS_PER_TRANSACTION rows: one transaction each, so a backlog never holds the store long."""
        loaded, rows = [], 0
        for unit, read in prefetched(units, read_unit):  # the next commits are read while DuckDB takes these
            try:
                tables = self._read(unit, report, read)
            except ChunkFolderUnreachable as error:  # read again at the next tick, not blamed
                self._unreachable(unit.key.split("/", 1)[0], error)
                continue
            if tables is None:
                continue
            loaded.append((unit, tables))
            rows += sum(t.num_rows for _, t in tables)
            if len(loaded) >= MAX_FILES_PER_TRANSACTION or rows >= MAX_ROWS_PER_TRANSACTION:
                yield loaded
                loaded, rows = [], 0
        if loaded:
            yield loaded

    def _ingest_units(self, units: list[Unit], report: IngestReport) -> None:
        for loaded in self._batches(units, report):
            try:
                self._commit(loaded)
            except duckdb.Error as error:
                if not chunk_fault(error):
                    raise store_error(self.runs_dir, error) from None
                # One bad unit must not hold back the rest: retry them one by one.
                for item in loaded:
                    try:
                        self._commit([item])
                    except duckdb.Error as error:
                        if self._already_taken(item[0].key):
                            continue  # another Ingestor on this database took it first
                        if not chunk_fault(error):
                            raise store_error(self.runs_dir, error) from None
                        unit = item[0]
                        self._record_bad(unit.key, unit.where, unit.folder.signature(unit.marker),
                                         f"insert failed: {error}", report)
                        continue
                    report.files += 1
                    report.rows += sum(t.num_rows for _, t in item[1])
                continue
            report.files += len(loaded)
            report.rows += sum(t.num_rows for _, tables in loaded for _, t in tables)
            if self.after_transaction is not None:
                self.after_transaction()

    def _already_taken(self, key: str) -> bool:
        if self.con.execute("SELECT count(*) FROM ingested_files WHERE path = ?", [key]).fetchone()[0]:
            self._mark_taken([key])
            return True
        return False

    def _mark_taken(self, keys) -> None:
        for key in keys:
            self._taken.add(key)
            run_id, _, rest = key.partition("/")
            folder, _, name = rest.rpartition("/")
            if folder == CHUNKS_DIR:
                self._taken_markers.setdefault(run_id, set()).add(name)
                number = commit_number(name)
                if number is not None and number > self._highest.get(run_id, -1):
                    self._highest[run_id] = number

    def mark_taken(self, keys) -> None:
        """Ledger keys another writer of this store entered (a compaction): never take them again."""
        self._mark_taken(list(keys))

    def forget(self, keys) -> None:
        """Ledger keys whose commits are gone (replaced by a compacted commit)."""
        for key in keys:
            self._taken.discard(key)
            run_id, _, rest = key.partition("/")
            self._taken_markers.get(run_id, set()).discard(rest.rpartition("/")[2])

    def _commit(self, loaded: list[tuple[Unit, list[tuple[str, pa.Table]]]]) -> None:
        by_table: dict[str, list[pa.Table]] = {}
        for _, tables in loaded:
            for table, data in tables:
                by_table.setdefault(table, []).append(data)
        now = utc_now()
        ledger = pa.table(
            {
                "path": [unit.key for unit, _ in loaded],
                "table_name": [",".join(table for table, _ in tables) for _, tables in loaded],
                "run_id": [unit.key.split("/", 1)[0] for unit, _ in loaded],
                "rows": pa.array([sum(t.num_rows for _, t in tables) for _, tables in loaded], type=pa.int64()),
                "ingested_at": pa.array([now] * len(loaded), type=pa.timestamp("us")),
            }
        )
        cur = self.con.cursor()
        started = time.perf_counter()
        try:
            cur.execute("BEGIN TRANSACTION")
            for table, parts in by_table.items():
                chunk = pa.concat_tables(parts)
                if table == "trajectories":
                    chunk = with_default_behaviours(chunk)
                cur.register("chunk_rows", chunk)
                if table == "trajectories":  # with the per-step aggregates Compare, the monitor and Behaviours read
                    insert_trajectories(cur)
                    aggregate_step_components(cur)
                    aggregate_step_tallies(cur)
                    aggregate_run_behaviours(cur)  # before the step tallies, which take its behaviours' numbers
                    aggregate_step_behaviours(cur)
                    aggregate_behaviour_actions(cur)
                else:  # table names come from CHUNK_TABLES, never from input
                    cur.execute(f"INSERT INTO {table} BY NAME SELECT * FROM chunk_rows")
                cur.unregister("chunk_rows")
            cur.register("ledger_rows", ledger)
            cur.execute("INSERT INTO ingested_files BY NAME SELECT * FROM ledger_rows")
            cur.unregister("ledger_rows")
            cur.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # a failed commit may have ended the transaction already
                cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()
            self.transaction_seconds.append(time.perf_counter() - started)
        self._mark_taken(unit.key for unit, _ in loaded)


def read_unit(unit: Unit) -> list[tuple[str, pa.Table]] | Exception:
    """A unit's table files, each cast to its schema, or the error that stopped it (returned, not
    raised: the reader thread of `prefetched` touches no store and leaves the naming to ingest)."""
    try:
        if not unit.files:
            raise ValueError("the commit names no table file")
        tables = []
        for table, name in unit.files:
            try:
                data = unit.folder.read_table(name)
            except OSError as error:
                if unit.folder.remote and not isinstance(error, FileNotFoundError):
                    raise ChunkFolderUnreachable(f"{unit.folder.locate(name)}: {error}") from None
                raise
            try:
                # As the current schema: a column added since the chunk was written is null.
                tables.append((table, conform(table, data)))
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        return tables
    except Exception as error:
        return error


class StoreReplacedError(StoreError):
    """The database file was deleted or replaced under an open connection."""


def ingest_once(runs_dir: Path, wait_s: float = 5.0, chunks_url: str | None = None) -> IngestReport:
    """Open the store, ingest everything pending, close. Raises StoreLockedError if held."""
    con = connect(runs_dir, wait_s=wait_s)
    try:
        return Ingestor(con, runs_dir, chunks_url=chunks_url).ingest()
    finally:
        con.close()
