"""The decisions log: every review, exploit fixture and promotion, appended to a file beside the store.

Review page / gate -> review -> queries + **decisions** -> store. DuckDB is an index that can be
rebuilt from what lies on disk (DESIGN.md): runs' chunks hold what runs wrote, and this log holds
what people decided, which no chunk holds. A decision is inserted into its table and appended
here in one step (`recording`): the row is inserted in a transaction, read back exactly as the
store holds it, appended to `<runs_dir>/decisions.jsonl` (one JSON object a line, flushed and
fsynced), and only then committed. A log that cannot be written refuses the decision, so nothing
the store shows is missing from the log.

`replay` puts every logged decision the store lacks back, with its own id (a rebuilt or deleted
store, or a commit that failed after its line was written); the ingestor calls it when it
starts, and `python -m agentrl rebuild` through it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from agentrl.store.db import database_file

DECISIONS_FILE = "decisions.jsonl"
LOG_FORMAT = 1

# table -> (id column, its sequence, timestamp columns): the decision tables of schemas/store.sql.
TABLES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "reviews": ("review_id", "review_ids", ("reviewed_at",)),
    "fixtures": ("fixture_id", "fixture_ids", ("created_at",)),
    "promotions": ("promotion_id", "promotion_ids", ("decided_at",)),
}

_append_lock = threading.Lock()  # whole lines, even when two browser sessions decide at once


class DecisionLogError(OSError):
    """The decisions log cannot be written (or read); the message names its path."""


def log_path(con) -> Path | None:
    """`decisions.jsonl` beside the connection's database file (None for an in-memory store)."""
    file = database_file(con)
    return None if file is None else file.parent / DECISIONS_FILE


def _row(con, table: str, row_id: int) -> dict[str, Any]:
    id_column = TABLES[table][0]
    # Table and column names come from TABLES, never from input.
    cursor = con.execute(f"SELECT * FROM {table} WHERE {id_column} = ?", [row_id])
    names = [d[0] for d in cursor.description]
    return dict(zip(names, cursor.fetchone()))


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot log a {type(value).__name__}")


def _append(path: Path, entries: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(entry, default=_json, sort_keys=True) + "\n" for entry in entries)
    try:
        with _append_lock, open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise DecisionLogError(f"cannot append to the decisions log {path}: {error.strerror or error}") from None


@contextlib.contextmanager
def recording(con) -> Iterator[list[tuple[str, int]]]:
    """Insert decisions in the body, appending `(table, id)` of each to the yielded list: they are
    committed only once their rows are in the log; on any error nothing is recorded."""
    written: list[tuple[str, int]] = []
    con.execute("BEGIN TRANSACTION")
    try:
        yield written
        path = log_path(con)
        if path is not None and written:
            _append(path, [{"format": LOG_FORMAT, "table": table, "row": _row(con, table, row_id)}
                           for table, row_id in written])
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            con.execute("ROLLBACK")
        raise


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every whole entry of the log, in order (a last line cut short by a crash is left out)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise DecisionLogError(f"cannot read the decisions log {path}: {error.strerror or error}") from None
    entries = []
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):  # the part after the last newline is unfinished
        try:
            entry = json.loads(line)
            if not (isinstance(entry, dict) and entry.get("table") in TABLES and isinstance(entry.get("row"), dict)):
                raise ValueError("not a decision entry")
        except ValueError as error:
            raise DecisionLogError(f"the decisions log {path} is damaged at line {number}: {error}") from None
        entries.append(entry)
    return entries


def replay(con, path: Path | None = None) -> int:
    """Insert every logged decision the store lacks, with its logged id; returns how many.

    Idempotent: a decision already in the store (same id) is left as it is."""
    path = path or log_path(con)
    if path is None:
        return 0
    entries = read_log(path)
    if not entries:
        return 0
    inserted = 0
    con.execute("BEGIN TRANSACTION")
    try:
        known = {table: {r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]).fetchall()} for table in TABLES}
        for entry in entries:
            table, row = entry["table"], dict(entry["row"])
            id_column, _, stamps = TABLES[table]
            for column in stamps:
                if isinstance(row.get(column), str):
                    row[column] = datetime.fromisoformat(row[column])
            if not isinstance(row.get(id_column), int):
                raise DecisionLogError(f"the decisions log {path} has a {table} entry without its {id_column}")
            columns = list(row)
            # Names come from the log but are checked against the table's own columns first.
            unknown = [c for c in columns if c not in known[table]]
            if unknown:
                raise DecisionLogError(f"the decisions log {path} names columns {unknown} that {table} does not have")
            exists = con.execute(f"SELECT count(*) FROM {table} WHERE {id_column} = ?", [row[id_column]]).fetchone()[0]
            if exists:
                continue
            con.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        [row[c] for c in columns])
            inserted += 1
        if inserted:
            for table, (id_column, sequence, _) in TABLES.items():
                _advance(con, table, id_column, sequence)
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            con.execute("ROLLBACK")
        raise
    return inserted


def _advance(con, table: str, id_column: str, sequence: str) -> None:
    """Move a table's id sequence past its largest id, so a new decision never takes a replayed id."""
    top = con.execute(f"SELECT coalesce(max({id_column}), 0) FROM {table}").fetchone()[0]
    current = con.execute(f"SELECT nextval('{sequence}')").fetchone()[0]
    if current < top:
        con.execute(f"SELECT max(nextval('{sequence}')) FROM range(?)", [top - current]).fetchone()


def logged_fixtures(runs_dir: Path, task: str) -> list[dict[str, Any]]:
    """The exploit fixtures of task spec `task` in `<runs_dir>/decisions.jsonl`, oldest first, as
    `{"fixture_id", "behaviour", "states"}`: what a run launched now vetoes. Read from the log, not the store,
    so a launch never opens the database (a fixture of an older store, without a task, is the
    refund task's; one without a behaviour is its actions joined by " > ")."""
    from agentrl.record.behaviour import default_behaviour

    found = {}
    for entry in read_log(Path(runs_dir) / DECISIONS_FILE):
        if entry["table"] != "fixtures":
            continue
        row = entry["row"]
        if (row.get("task") or "refund") != task or not isinstance(row.get("fixture_id"), int):
            continue
        found[row["fixture_id"]] = {"fixture_id": row["fixture_id"],
                                    "behaviour": row.get("behaviour") or default_behaviour(row.get("actions")),
                                    "states": row.get("states") or None}
    return [found[k] for k in sorted(found)]
