"""The store's health: `check` reads every block of `agentrl.duckdb`, `rebuild` recreates it from disk.

CLI (`python -m agentrl check` / `rebuild`) -> **health** -> db, ingest, decisions. DuckDB is an
index (DESIGN.md): everything in it comes from files that stay on disk, the runs' chunks and
status files and the decisions log. So a damaged store is never repaired in place: `rebuild`
ingests everything into a new file beside it, keeps the old one under another name for
inspection, and swaps the new one in; the runs directory is held for the whole rebuild, so no
dashboard or command uses the store meanwhile.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from agentrl.record.chunks import list_commits
from agentrl.record.rundir import DB_FILENAME, ensure_writable, list_run_dirs, utc_now
from agentrl.store import decisions
from agentrl.store.db import (
    StoreDamagedError,
    StoreError,
    StoreFullError,
    apply_schema,
    connect,
    damaged,
    hold_runs_dir,
    is_damage,
    is_full_disk,
    release_runs_dir,
)
from agentrl.store.ingest import IngestReport, Ingestor


@dataclass
class CheckReport:
    path: Path
    exists: bool = True
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows, every block of it read
    pending_commits: int = 0  # commits on disk the store has not taken yet (`ingest` takes them)
    logged_decisions: int = 0
    stored_decisions: int = 0
    log_problems: list[str] = field(default_factory=list)  # one line per damaged line of the decisions log
    damaged_log_lines: int = 0  # of which lines that cost a decision (not a torn tail, which cost none)

    def summary(self) -> str:
        if not self.exists:
            head = f"no store at {self.path} yet; `python -m agentrl ingest` creates it"
        else:
            head = (f"ok: {self.path}: {len(self.rows)} tables, {sum(self.rows.values())} rows, every block read; "
                    f"{self.pending_commits} commits waiting to be ingested; decisions: {self.logged_decisions} in the "
                    f"log, {self.stored_decisions} in the store")
        return "\n".join([head, *self.log_problems])


def read_every_block(con, path: Path) -> dict[str, int]:
    """Read every row of every table (DuckDB checks each block's checksum as it reads it); returns
    the row count of each table, or raises StoreDamagedError naming the damage."""
    rows = {}
    try:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY table_name").fetchall()]
        for table in tables:
            # hash() of the whole row makes DuckDB read every column's blocks; names come from the catalog.
            rows[table] = con.execute(f'SELECT count(*), sum(hash("{table}")) FROM "{table}"').fetchone()[0]
    except duckdb.Error as error:
        if is_damage(error):
            raise damaged(path, error) from None
        raise
    return rows


def check_store(runs_dir: Path) -> CheckReport:
    """Open the store read-only and read every row of every table (DuckDB verifies each block's
    checksum as it reads); StoreDamagedError names the damage and the rebuild command."""
    runs_dir = Path(runs_dir)
    path = runs_dir / DB_FILENAME
    report = CheckReport(path)
    scan = decisions.scan_log(runs_dir / decisions.DECISIONS_FILE)
    report.log_problems, report.damaged_log_lines = scan.problems(), len(scan.bad)
    report.logged_decisions = sum(entry["table"] in decisions.TABLES for entry in scan.entries)
    if not path.exists():
        report.exists = False
        return report
    con = connect(runs_dir, read_only=True)
    try:
        report.rows = read_every_block(con, path)
        taken = {r[0] for r in con.execute("SELECT path FROM ingested_files").fetchall()} if "ingested_files" in report.rows else set()
        report.stored_decisions = sum(report.rows.get(t, 0) for t in decisions.TABLES)
    finally:
        con.close()
    for run in list_run_dirs(runs_dir):
        report.pending_commits += sum(f"{run.run_id}/chunks/{c.name}" not in taken for c in list_commits(run.root))
    return report


@dataclass
class RebuildReport:
    path: Path
    ingest: IngestReport
    runs: int
    kept: Path | None  # where the old file was moved (None when there was none)

    def summary(self) -> str:
        kept = f"; the old file is kept as {self.kept}" if self.kept else ""
        return (f"rebuilt {self.path}: {self.runs} runs, {self.ingest.rows} rows from {self.ingest.files} commits, "
                f"{self.ingest.decisions} decisions from the decisions log, {len(self.ingest.skipped)} files skipped{kept}")


def _rebuild_failed(path: Path, error: BaseException) -> StoreError:
    """Why the new copy could not be written, in one line (its partial file is already removed)."""
    if is_full_disk(error):
        return StoreFullError(f"the disk is full: rebuilding {path} needs room for a new copy beside it; free some "
                              f"space and run rebuild again (the old store and the runs' files are untouched)")
    if isinstance(error, StoreError):
        return error
    reason = " ".join(str(error).split())[:300]
    return StoreError(f"rebuilding {path} failed ({reason}); the old store and the runs' files are untouched")


def _side(path: Path) -> Path:
    return path.with_name(f"{path.name}.wal")


def rebuild(runs_dir: Path, log=None) -> RebuildReport:
    """Recreate `<runs_dir>/agentrl.duckdb` from the runs' chunks and the decisions log."""
    runs_dir = ensure_writable(Path(runs_dir))
    path = runs_dir / DB_FILENAME
    hold_runs_dir(runs_dir)  # StoreLockedError while a dashboard holds the runs directory
    try:
        if path.exists():  # DuckDB's own lock: a command may have the old file open without the directory
            with contextlib.suppress(StoreDamagedError):
                connect(runs_dir, wait_s=5.0, read_only=True).close()
        fresh = runs_dir / f".{DB_FILENAME}.rebuild-{os.getpid()}"
        for stale in (fresh, _side(fresh)):
            stale.unlink(missing_ok=True)
        try:
            con = duckdb.connect(str(fresh))
            try:
                apply_schema(con)
                report = Ingestor(con, runs_dir, log=log).ingest()
                runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
                con.execute("CHECKPOINT")
            finally:
                con.close()
        except (duckdb.Error, StoreError, OSError) as error:  # the old store and the runs' files are untouched
            for leftover in (fresh, _side(fresh)):
                with contextlib.suppress(OSError):
                    leftover.unlink()
            raise _rebuild_failed(path, error) from None
        kept = None
        if path.exists() or _side(path).exists():
            stamp = f"{utc_now():%Y%m%d-%H%M%S}"
            kept = path.with_name(f"{path.name}.before-rebuild-{stamp}")
            if path.exists():
                os.replace(path, kept)
            if _side(path).exists():  # never let the new file replay the old file's log
                os.replace(_side(path), _side(kept))
        os.replace(fresh, path)
        _side(fresh).unlink(missing_ok=True)
        return RebuildReport(path, report, runs, kept)
    finally:
        release_runs_dir(runs_dir)

