"""The DuckDB file: open it (creating it and applying `schemas/*.sql`), or say who holds it.

Store -> **db**. DuckDB locks its file per process, so the dashboard holds the one read-write
connection for its lifetime; a CLI command that finds it held waits a few seconds, then says so
in one line (`StoreLockedError`).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import duckdb

from agentrl.paths import SCHEMAS_DIR
from agentrl.record.rundir import DB_FILENAME


Con = duckdb.DuckDBPyConnection  # a connection or a cursor: every query takes one


class StoreLockedError(RuntimeError):
    """Another process (usually the dashboard) holds the database."""


def apply_schema(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in sorted(SCHEMAS_DIR.glob("*.sql")):
        con.execute(ddl.read_text())


def connect(runs_dir: Path, wait_s: float = 5.0) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) `<runs_dir>/agentrl.duckdb` read-write and apply the DDL.

    Retries for `wait_s` while another process holds the lock (a run ingesting at its exit
    holds it for well under a second), then raises StoreLockedError.
    """
    path = Path(runs_dir) / DB_FILENAME
    deadline = time.monotonic() + wait_s
    while True:
        try:
            con = duckdb.connect(str(path))
            break
        except duckdb.IOException as error:
            if "lock" not in str(error).lower():
                raise
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    f"{path} is held by another process (is the dashboard running? it ingests runs itself)"
                ) from None
            time.sleep(0.1)
    apply_schema(con)
    return con


@contextlib.contextmanager
def transaction(con: Con):
    """A cursor of `con` inside one transaction: committed at the end, rolled back on any error."""
    cur = con.cursor()
    try:
        cur.execute("BEGIN TRANSACTION")
        yield cur
        cur.execute("COMMIT")
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    finally:
        cur.close()
