"""Compaction: a finished, fully ingested run's many commits rewritten as one commit.

Store upkeep (`agentrl.store.maintenance` in the dashboard, `python -m agentrl compact`) ->
**compact** -> the run's chunks and the ingest ledger. A run that flushed every second leaves
thousands of small commits; once it has ended and the store took every one of them, they are
rewritten as one commit, one Parquet file per table (zstd, large row groups), and removed. The
chunks stay the source of truth: `rebuild` from the compacted chunks and the decisions log
gives back the same store.

The order makes every moment of it safe to die in (SIGKILL included):

1. the run's writer lock is taken (no writer starts, no sweep runs meanwhile);
2. the new commit N (one above the highest) is written whole, table files first, each checked
   for its row count, then its marker, which lists the commits it `replaces`. Until the marker
   exists nothing changed for any reader (what a death left is swept like a cut flush); from
   then on readers see N instead of the commits it replaces (`list_commits`), even while some of
   them are still on disk;
3. N enters the ledger, without its rows (the store holds them already); a store that dies
   before this step enters N by itself at its next ingest, having taken every replaced commit;
4. the replaced commits' markers, then their table files, are removed;
5. their ledger entries are dropped (only those whose marker is gone).

A compaction run again finishes what a dead one left (leftover replaced files, ledger entries).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.record.chunks import (
    CHUNKS_DIR,
    COMMIT_SUFFIX,
    Commit,
    WriterBusyError,
    as_ranges,
    claim_run,
    commit_number_name,
    marker_name,
    release_run,
    scan_commits,
    superseded_out,
)
from agentrl.record.locations import ChunkFolder, chunk_folder
from agentrl.record.rows import CHUNK_TABLES, TABLE_SCHEMAS, conform
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, utc_now
from agentrl.record.runfiles import RunFileError, read_meta, read_status
from agentrl.store.db import transaction
from agentrl.store.discovery import replaced_markers
from agentrl.store.queries.ledger import forget_ledger_keys, take_without_rows

BATCH_ROWS = 65_536  # rows gathered before a row group is written (memory stays bounded)
COMPRESSION = "zstd"


class CompactionError(RuntimeError):
    """A compacted file did not read back as written; nothing was removed."""


@dataclass
class CompactReport:
    run_id: str
    commits: int = 0  # commits rewritten into one
    rows: int = 0
    bytes_before: int = 0  # chunk files of the run before
    bytes_after: int = 0  # and after
    seconds: float = 0.0
    number: int | None = None  # the compacted commit
    leftovers: int = 0  # files of an earlier, cut-short compaction removed
    skipped: str | None = None  # why nothing was rewritten
    retry: bool = False  # skipped for now (a writer held the run): try again later

    def summary(self) -> str:
        if self.skipped:
            return f"{self.run_id}: {self.skipped}"
        return (f"{self.run_id}: {self.commits} commits -> 1 ({self.rows:,} rows), {self.bytes_before / 2**20:,.1f} MiB -> "
                f"{self.bytes_after / 2**20:,.1f} MiB in {self.seconds:.1f}s")


def _key(run_id: str, name: str) -> str:
    return f"{run_id}/{CHUNKS_DIR}/{name}"


def compact_run(ingestor, run: RunDir, fault: Callable[[str], None] | None = None, con=None) -> CompactReport:
    """Rewrite a finished run's commits as one (see the module docstring). `ingestor` is the
    store's Ingestor (it must have drained the run: every commit taken); `con` the connection or
    cursor to write the ledger with (default the Ingestor's; another thread passes its own).
    `fault(point)` is called at each step, for tests that stop it there."""
    report = CompactReport(run.run_id)
    started = time.perf_counter()
    try:
        meta, status = read_meta(run), read_status(run) or {}
    except RunFileError as error:
        report.skipped = f"not compacted: {error}"
        return report
    if status.get("status") not in TERMINAL_STATUSES:
        report.skipped = "not compacted: the run has not ended"
        return report
    if run.run_id not in ingestor.drained:
        report.skipped = "not compacted: the store has not taken all of its commits yet"
        return report
    try:
        lock = claim_run(run.root)
    except WriterBusyError:
        report.skipped, report.retry = "not compacted: a writer holds the run", True
        return report
    try:
        folder = chunk_folder(run.root, meta)
        _compact(ingestor, con if con is not None else ingestor.con, run, folder, report, fault or (lambda point: None))
    finally:
        release_run(lock)
    report.seconds = time.perf_counter() - started
    return report


def _compact(ingestor, con, run: RunDir, folder: ChunkFolder, report: CompactReport, fault: Callable[[str], None]) -> None:
    every = scan_commits(folder)
    visible = superseded_out(every)
    shown = {c.number for c in visible}
    leftovers = [c for c in every if c.number not in shown]
    taken = ingestor.taken_markers(run.run_id)
    missing = [c.name for c in visible if c.name not in taken]
    if missing:
        report.skipped = f"not compacted: the store has not taken {len(missing)} of its commits ({missing[0]}, ...)"
        return
    if leftovers:  # a compaction died after its marker: finish removing what it replaced
        report.leftovers = _remove(ingestor, con, run, folder, leftovers)
    stale = [_key(run.run_id, name) for c in visible if c.replaces for name in replaced_markers(c) if name in taken]
    if stale:  # ledger entries of replaced commits whose files a dead compaction already removed
        with ingestor.lock, transaction(con) as cur:
            forget_ledger_keys(cur, stale)
            ingestor.forget(stale)
    if len(visible) <= 1:
        report.skipped = report.skipped or "already one commit"
        return
    names = folder.names()
    report.bytes_before = sum(folder.size(name) for name in names if not name.startswith("."))
    number = max(c.number for c in every) + 1
    tables = [t for t in CHUNK_TABLES if any(t in c.files for c in visible)]
    rows = {}
    for table in tables:
        rows[table] = _rewrite(folder, visible, table, f"{commit_number_name(number)}.{table}.parquet")
        fault("table")
    for table in tables:  # read back before anything depends on them
        written = folder.num_rows(f"{commit_number_name(number)}.{table}.parquet")
        if written != rows[table]:
            raise CompactionError(f"{run.run_id}: the compacted {table} file holds {written} rows, not {rows[table]}")
    payload = {"tables": rows, "replaces": as_ranges(c.number for c in visible)}
    folder.write_text(marker_name(number), json.dumps(payload))
    folder.sync()
    fault("marker")
    with ingestor.lock, transaction(con) as cur:
        take_without_rows(cur, _key(run.run_id, marker_name(number)), ",".join(tables), run.run_id,
                          sum(rows.values()), utc_now())
        ingestor.mark_taken([_key(run.run_id, marker_name(number))])
    fault("ledger")
    _remove(ingestor, con, run, folder, visible, fault)
    report.number = number
    report.commits = len(visible)
    report.rows = sum(rows.values())
    prefix = commit_number_name(number)
    report.bytes_after = sum(folder.size(name) for name in folder.names()
                             if name.startswith(prefix + ".") or name == prefix + COMMIT_SUFFIX)


def _rewrite(folder: ChunkFolder, commits: list[Commit], table: str, name: str) -> int:
    """One table of every commit, in commit order, as one Parquet file; returns its rows."""
    schema = TABLE_SCHEMAS[table]
    count = 0

    def write(sink) -> None:
        nonlocal count
        with pq.ParquetWriter(sink, schema, compression=COMPRESSION) as writer:
            batch: list[pa.Table] = []
            held = 0
            for commit in commits:
                if table not in commit.files:
                    continue
                data = conform(table, folder.read_table(commit.file_name(table)))
                batch.append(data)
                held += data.num_rows
                if held >= BATCH_ROWS:
                    writer.write_table(pa.concat_tables(batch))
                    count += held
                    batch, held = [], 0
            if batch:
                writer.write_table(pa.concat_tables(batch))
                count += held

    folder.write_with(name, write)
    return count


def _remove(ingestor, con, run: RunDir, folder: ChunkFolder, commits: list[Commit], fault=None) -> int:
    """Remove replaced commits (markers first: a commit half removed is already invisible), then
    drop the ledger entries of those whose marker is gone. Returns the files removed."""
    gone, files = [], 0
    for i, commit in enumerate(commits):
        if folder.remove(commit.name):
            gone.append(_key(run.run_id, commit.name))
            files += 1
        if fault is not None and i == len(commits) // 2:
            fault("removing")
    prefixes = {commit_number_name(c.number) + "." for c in commits}
    for name in folder.names():
        if name.split(".", 1)[0] + "." in prefixes and not name.endswith(COMMIT_SUFFIX) and folder.remove(name):
            files += 1
    folder.sync()
    with ingestor.lock, transaction(con) as cur:
        forget_ledger_keys(cur, gone)
        ingestor.forget(gone)
    return files


def compact_finished(ingestor, runs_dir: Path, log: Callable[[str], None] | None = None) -> list[CompactReport]:
    """Compact every run the Ingestor has drained (`python -m agentrl compact`)."""
    reports = []
    for run_id in sorted(ingestor.drained):
        report = compact_run(ingestor, RunDir(Path(runs_dir) / run_id))
        reports.append(report)
        if log is not None:
            log(report.summary())
    return reports
