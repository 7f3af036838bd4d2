"""The DuckDB store: connect (applying `schemas/*.sql`), and ingest run chunks idempotently.

The dashboard process is the store's only writer: it holds one connection for its lifetime and
runs `Ingestor` in a background thread. Without a dashboard, `python -m agentrl ingest` (or a
run's own exit) does the same, if it can take DuckDB's file lock. Queries live in queries.py.

Ingest is idempotent: each chunk's rows and its `ingested_files` entry commit in one
transaction, so a crash between the two cannot happen and a file is never taken twice. Rows go
in through Arrow (`INSERT ... BY NAME SELECT * FROM <arrow table>`), never row by row.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.record.chunks import chunk_files
from agentrl.record.schema import CHUNK_TABLES, TABLE_SCHEMAS
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, list_run_dirs, utc_now
from agentrl.store.db import StoreLockedError, connect, transaction  # noqa: F401 - StoreLockedError is re-exported for callers

MAX_FILES_PER_TRANSACTION = 2000  # bounds one ingest tick's latency when a backlog builds up


@dataclass
class IngestReport:
    files: int = 0
    rows: int = 0
    runs_synced: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    seconds: float = 0.0


def _parse_ts(value) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


class Ingestor:
    """Copies new chunks and run status into the store; safe to call from one thread at a time.

    Keeps in memory which files it has taken (seeded from `ingested_files`) and which ended runs
    are fully drained, so a tick on an idle runs directory costs a few directory listings.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, runs_dir: Path, log: Callable[[str], None] | None = None):
        self.con = con
        self.runs_dir = Path(runs_dir)
        self.log = log or (lambda message: print(message, file=sys.stderr))
        self._lock = threading.Lock()
        self._taken: set[str] = {row[0] for row in con.execute("SELECT path FROM ingested_files").fetchall()}
        self._bad: dict[str, tuple[int, int]] = {
            row[0]: (row[1], row[2]) for row in con.execute("SELECT path, size, mtime_ns FROM ingest_errors").fetchall()
        }
        self._drained: set[str] = set()
        self._run_signatures: dict[str, tuple] = {}

    def ingest(self) -> IngestReport:
        with self._lock:
            started = time.perf_counter()
            report = IngestReport()
            for run in list_run_dirs(self.runs_dir):
                if run.run_id in self._drained:
                    continue
                status = run.status() or {}
                ended = status.get("status") in TERMINAL_STATUSES
                self._sync_run(run, status, report)
                new_files = self._new_chunks(run)
                if new_files:
                    self._ingest_files(new_files, report)
                # A run writes its terminal status only after its last flush, so one more scan
                # after it has ended finds everything it will ever write.
                if ended and not new_files:
                    self._drained.add(run.run_id)
            report.seconds = time.perf_counter() - started
            return report

    def _sync_run(self, run: RunDir, status: dict, report: IngestReport) -> None:
        meta = run.meta()
        if meta is None:
            return
        signature = tuple(sorted((k, str(v)) for k, v in status.items()))
        if self._run_signatures.get(run.run_id) == signature:
            return
        config = meta.get("config") or {}
        self.con.execute(
            """
            INSERT OR REPLACE INTO runs
                (run_id, name, kind, scorer, status, config, created_at, started_at, ended_at,
                 error, pid, total_steps, run_dir)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                run.run_id,
                meta.get("name", run.run_id),
                meta.get("kind", config.get("kind", "tabular")),
                meta.get("scorer", config.get("scorer", "")),
                status.get("status", "queued"),
                json.dumps(config),
                _parse_ts(meta.get("created_at")) or utc_now(),
                _parse_ts(status.get("started_at")),
                _parse_ts(status.get("ended_at")),
                status.get("error"),
                status.get("pid"),
                meta.get("total_steps"),
                str(run.root),
            ],
        )
        self._run_signatures[run.run_id] = signature
        report.runs_synced += 1

    def _new_chunks(self, run: RunDir) -> list[tuple[str, str, Path]]:
        found = []
        for table in CHUNK_TABLES:
            for path in chunk_files(run.root, table):
                key = f"{run.run_id}/{table}/{path.name}"
                if key in self._taken:
                    continue
                if key in self._bad:
                    stat = path.stat()
                    if self._bad[key] == (stat.st_size, stat.st_mtime_ns):
                        continue  # still the same broken file
                found.append((key, table, path))
        return found

    def _read(self, key: str, table: str, path: Path, report: IngestReport) -> pa.Table | None:
        try:
            data = pq.read_table(path)
            expected = TABLE_SCHEMAS[table]
            missing = [name for name in expected.names if name not in data.schema.names]
            if missing:
                raise ValueError(f"missing columns {missing}")
            return data.select(expected.names).cast(expected)
        except Exception as error:  # any unreadable chunk is skipped, named, and remembered
            self._record_bad(key, path, f"{type(error).__name__}: {error}", report)
            return None

    def _record_bad(self, key: str, path: Path, reason: str, report: IngestReport) -> None:
        stat = path.stat()
        self._bad[key] = (stat.st_size, stat.st_mtime_ns)
        self.con.execute(
            "INSERT OR REPLACE INTO ingest_errors (path, size, mtime_ns, error, seen_at) VALUES (?, ?, ?, ?, ?)",
            [key, stat.st_size, stat.st_mtime_ns, reason, utc_now()],
        )
        report.skipped.append((str(path), reason))
        self.log(f"ingest: skipped {path}: {reason}")

    def _ingest_files(self, files: list[tuple[str, str, Path]], report: IngestReport) -> None:
        for start in range(0, len(files), MAX_FILES_PER_TRANSACTION):
            batch = files[start : start + MAX_FILES_PER_TRANSACTION]
            loaded = [(key, table, path, data) for key, table, path in batch if (data := self._read(key, table, path, report)) is not None]
            if not loaded:
                continue
            try:
                self._commit(loaded)
            except duckdb.Error:
                # One bad file must not hold back the rest: retry them one by one.
                for item in loaded:
                    try:
                        self._commit([item])
                    except duckdb.Error as error:
                        if self._already_taken(item[0]):
                            continue  # another Ingestor on this database took it first
                        self._record_bad(item[0], item[2], f"insert failed: {error}", report)
                        continue
                    report.files += 1
                    report.rows += item[3].num_rows
                continue
            report.files += len(loaded)
            report.rows += sum(item[3].num_rows for item in loaded)

    def _already_taken(self, key: str) -> bool:
        if self.con.execute("SELECT count(*) FROM ingested_files WHERE path = ?", [key]).fetchone()[0]:
            self._taken.add(key)
            return True
        return False

    def _commit(self, loaded: list[tuple[str, str, Path, pa.Table]]) -> None:
        by_table: dict[str, list[pa.Table]] = {}
        for _, table, _, data in loaded:
            by_table.setdefault(table, []).append(data)
        now = utc_now()
        ledger = pa.table(
            {
                "path": [key for key, *_ in loaded],
                "table_name": [table for _, table, *_ in loaded],
                "run_id": [key.split("/", 1)[0] for key, *_ in loaded],
                "rows": pa.array([data.num_rows for *_, data in loaded], type=pa.int64()),
                "ingested_at": pa.array([now] * len(loaded), type=pa.timestamp("us")),
            }
        )
        with transaction(self.con) as cur:
            for table, parts in by_table.items():
                chunk = pa.concat_tables(parts)
                cur.register("chunk_rows", chunk)
                # Table names come from CHUNK_TABLES, never from input.
                cur.execute(f"INSERT INTO {table} BY NAME SELECT * FROM chunk_rows")
                cur.unregister("chunk_rows")
            cur.register("ledger_rows", ledger)
            cur.execute("INSERT INTO ingested_files BY NAME SELECT * FROM ledger_rows")
            cur.unregister("ledger_rows")
        self._taken.update(key for key, *_ in loaded)


def ingest_once(runs_dir: Path, wait_s: float = 5.0) -> IngestReport:
    """Open the store, ingest everything pending, close. Raises StoreLockedError if held."""
    con = connect(runs_dir, wait_s=wait_s)
    try:
        return Ingestor(con, runs_dir).ingest()
    finally:
        con.close()


class BackgroundIngest:
    """The dashboard's ingest loop: `tick()` every `interval` seconds in a daemon thread.

    `tick` is given by the caller (it reconciles run liveness, then ingests), so this class
    only owns the thread and remembers the last error for the UI to show.
    """

    def __init__(self, tick: Callable[[], object], interval: float = 0.5):
        self.tick = tick
        self.interval = interval
        self.last_error: str | None = None
        self.last_tick_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agentrl-ingest", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
                self.last_error = None
            except Exception as error:  # keep the loop alive; the UI shows the message
                self.last_error = f"{type(error).__name__}: {error}"
                print(f"agentrl ingest loop: {self.last_error}", file=sys.stderr)
            self.last_tick_at = time.time()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
