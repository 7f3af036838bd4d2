"""The decisions log: every review, exploit fixture, promotion and run note, appended to a file beside the store.

Review page / gate / Runs page -> review, curation -> queries + **decisions** -> store. DuckDB is an
index that can be rebuilt from what lies on disk (DESIGN.md): runs' chunks hold what runs wrote,
and this log holds what people decided, which no chunk holds. A decision is inserted into its
table and appended here in one step (`recording`): the row is inserted in a transaction, read
back exactly as the store holds it, appended to `<runs_dir>/decisions.jsonl`, and only then
committed. A log that cannot be written refuses the decision, so nothing the store shows is
missing from the log. Tags, notes and the archived flag (`run_notes`, the latest edit counts) are
logged the same way.

Each line is one framed entry, `{"crc32":"<8 hex>","entry":<the entry's JSON>}` and a newline,
the checksum taken over the entry's bytes as they stand in the line: a line cut short (a full
disk, a crash mid-write) or changed is told from a whole one. A line is appended in one write,
under a lock on the file, and fsynced. Before appending, a log that does not end in a newline has
its torn tail moved to `decisions.jsonl.torn` (kept, never glued to the next entry). Reading, a
line that is not a whole entry costs that line only: it is named (`scan_log`, `check`) and every
other entry is read. Lines written before the frame (a plain JSON entry) are read as before.

`replay` puts every logged decision the store lacks back, with its own id (a rebuilt or deleted
store, or a commit that failed after its line was written), and each run's latest note; the
ingestor calls it when it starts, and `python -m agentrl rebuild` through it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from agentrl.store.db import database_file
from agentrl.store.queries.annotations import set_run_notes

try:
    import fcntl
except ImportError:  # not POSIX: the in-process lock only
    fcntl = None

DECISIONS_FILE = "decisions.jsonl"
TORN_SUFFIX = ".torn"  # decisions.jsonl.torn: torn tails set aside, byte for byte
LOG_FORMAT = 1

# table -> (id column, its sequence, timestamp columns): the decision tables of schemas/store.sql.
TABLES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "reviews": ("review_id", "review_ids", ("reviewed_at",)),
    "fixtures": ("fixture_id", "fixture_ids", ("created_at",)),
    "promotions": ("promotion_id", "promotion_ids", ("decided_at",)),
}
# Edits of a run's tags, note and archived flag (schemas/annotations.sql): keyed by run, the latest counts.
NOTES = "run_notes"
_KEY_COLUMNS = {**{table: spec[0] for table, spec in TABLES.items()}, NOTES: "run_id"}

_FRAME_START = b'{"crc32":"'
_FRAME_MIDDLE = b'","entry":'
_PAYLOAD_AT = len(_FRAME_START) + 8 + len(_FRAME_MIDDLE)
_LEGACY_START = b'{"format": '  # an unframed entry of an older agentrl (sort_keys puts "format" first)

_append_lock = threading.Lock()  # whole lines, even when two browser sessions decide at once


class DecisionLogError(OSError):
    """The decisions log cannot be written (or read); the message names its path."""


@dataclass
class LogScan:
    """What reading the log found: its whole entries in order, the lines that were not one
    (line number, why), and how many bytes of a last line cut short follow the last newline."""

    path: Path
    entries: list[dict[str, Any]] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)
    torn_tail: int = 0

    def problems(self) -> list[str]:
        """One line per damaged line, and one for a torn tail."""
        lines = [f"decisions log {self.path} line {number}: {why}; that line is skipped, every other "
                 f"decision is kept" for number, why in self.bad]
        if self.torn_tail:
            lines.append(f"decisions log {self.path} ends in {self.torn_tail} bytes of an entry cut short (a crash or "
                         f"a full disk mid-write; its decision was not recorded); the next decision moves them to "
                         f"{self.path.name}{TORN_SUFFIX}")
        return lines


def log_path(con) -> Path | None:
    """`decisions.jsonl` beside the connection's database file (None for an in-memory store)."""
    file = database_file(con)
    return None if file is None else file.parent / DECISIONS_FILE


def torn_path(path: Path) -> Path:
    return path.with_name(path.name + TORN_SUFFIX)


def _row(con, table: str, key) -> dict[str, Any]:
    key_column = _KEY_COLUMNS[table]
    # Table and column names come from the constants above, never from input.
    cursor = con.execute(f"SELECT * FROM {table} WHERE {key_column} = ?", [key])
    names = [d[0] for d in cursor.description]
    return dict(zip(names, cursor.fetchone()))


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot log a {type(value).__name__}")


def frame(entry: dict[str, Any]) -> bytes:
    """One log line: the entry's JSON (ASCII, so no byte of it is a newline) with its checksum."""
    payload = json.dumps(entry, default=_json, sort_keys=True).encode("ascii")
    return _FRAME_START + b"%08x" % zlib.crc32(payload) + _FRAME_MIDDLE + payload + b"}\n"


def _entry(payload: bytes) -> dict[str, Any]:
    entry = json.loads(payload)
    if not (isinstance(entry, dict) and entry.get("table") in _KEY_COLUMNS and isinstance(entry.get("row"), dict)):
        raise ValueError("not a decision entry")
    return entry


def parse_line(line: bytes) -> dict[str, Any]:
    """The entry of one line (without its newline); ValueError says why it is not a whole one."""
    if line.startswith(_FRAME_START):
        if len(line) < _PAYLOAD_AT + 1 or line[_PAYLOAD_AT - len(_FRAME_MIDDLE):_PAYLOAD_AT] != _FRAME_MIDDLE \
                or not line.endswith(b"}"):
            raise ValueError("an entry cut short or changed (its frame is not whole)")
        payload = line[_PAYLOAD_AT:-1]
        try:
            crc = int(line[len(_FRAME_START):len(_FRAME_START) + 8], 16)
        except ValueError:
            raise ValueError("an entry whose checksum is not hexadecimal") from None
        if zlib.crc32(payload) != crc:
            raise ValueError("an entry whose checksum does not match (cut short or changed)")
        return _entry(payload)
    try:
        return _entry(line)  # an unframed entry of an older agentrl
    except UnicodeDecodeError:
        raise ValueError("not text") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at column {error.colno})") from None


def _glued(line: bytes) -> dict[str, Any] | None:
    """A whole entry after a torn one on the same line (an older agentrl appended without setting
    the torn tail aside): the whole one is kept."""
    for start in (_FRAME_START, _LEGACY_START):
        at = line.rfind(start)
        if at > 0:
            with contextlib.suppress(ValueError):
                return parse_line(line[at:])
    return None


def scan_log(path: Path) -> LogScan:
    """Every whole entry of the log, in order, and every line that is not one, named."""
    scan = LogScan(Path(path))
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return scan
    except OSError as error:
        raise DecisionLogError(f"cannot read the decisions log {path}: {error.strerror or error}") from None
    lines = data.split(b"\n")
    scan.torn_tail = len(lines[-1])  # the part after the last newline is unfinished
    for number, line in enumerate(lines[:-1], start=1):
        if not line.strip():
            continue
        try:
            scan.entries.append(parse_line(line.rstrip(b"\r")))
        except ValueError as error:
            kept = _glued(line)
            if kept is not None:
                scan.entries.append(kept)
                scan.bad.append((number, "a torn entry glued to the next one; the next one is kept"))
            else:
                scan.bad.append((number, str(error)))
    return scan


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every whole entry of the log, in order (a damaged line and a last line cut short are left out)."""
    return scan_log(path).entries


# --- appending ----------------------------------------------------------------------------------


def _last_newline(fd: int, size: int) -> int:
    """The offset just past the last newline of the file (0 if it has none)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        block = os.pread(fd, end - start, start)
        at = block.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def _set_aside_torn_tail(fd: int, path: Path) -> None:
    """A log that does not end in a newline ends in an entry cut short: move those bytes to the
    .torn file (appended, fsynced) and cut the log back to its last newline."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = _last_newline(fd, size)
    tail = os.pread(fd, size - start, start)
    with open(torn_path(path), "ab") as torn:
        torn.write(tail + b"\n")
        torn.flush()
        os.fsync(torn.fileno())
    os.ftruncate(fd, start)
    os.fsync(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _append(path: Path, entries: list[dict[str, Any]]) -> None:
    data = b"".join(frame(entry) for entry in entries)
    with _append_lock:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as error:
            raise DecisionLogError(f"cannot append to the decisions log {path}: {error.strerror or error}") from None
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)  # other processes on this runs directory append one at a time too
            try:
                _set_aside_torn_tail(fd, path)
            except OSError as error:
                raise DecisionLogError(f"cannot set aside the torn last line of the decisions log {path}: "
                                       f"{error.strerror or error}") from None
            size = os.fstat(fd).st_size
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError as error:
                with contextlib.suppress(OSError):  # no torn line left behind when it can be helped
                    os.ftruncate(fd, size)
                raise DecisionLogError(f"cannot append to the decisions log {path}: {error.strerror or error}") from None
        finally:
            os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def recording(con) -> Iterator[list[tuple[str, Any]]]:
    """Insert decisions in the body, appending `(table, id)` of each (`("run_notes", run_id)` for
    a note) to the yielded list: they are committed only once their rows are in the log; on any
    error nothing is recorded."""
    written: list[tuple[str, Any]] = []
    con.execute("BEGIN TRANSACTION")
    try:
        yield written
        path = log_path(con)
        if path is not None and written:
            _append(path, [{"format": LOG_FORMAT, "table": table, "row": _row(con, table, key)}
                           for table, key in written])
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            con.execute("ROLLBACK")
        raise


# --- replaying ----------------------------------------------------------------------------------


def _stamped(row: dict[str, Any], columns) -> dict[str, Any]:
    row = dict(row)
    for column in columns:
        if isinstance(row.get(column), str):
            row[column] = datetime.fromisoformat(row[column])
    return row


def replay(con, path: Path | None = None, log: Callable[[str], None] | None = None) -> int:
    """Insert every logged decision the store lacks, with its logged id, and each run's latest
    logged note where the store holds an older one (or none); returns how many rows it wrote.

    Idempotent: a decision already in the store (same id) is left as it is. A line or an entry
    that cannot be put back costs that entry only; `log` is told of each, in one line."""
    path = path or log_path(con)
    if path is None:
        return 0
    say = log or (lambda message: None)
    scan = scan_log(path)
    for line in scan.problems()[:len(scan.bad)]:
        say(f"replay: {line}")
    if not scan.entries:
        return 0
    skipped: set[int] = set()
    while True:
        con.execute("BEGIN TRANSACTION")
        failed = None
        try:
            inserted, failed = _replay_entries(con, path, scan.entries, skipped, say)
            if failed is None:
                if inserted:
                    for table, (id_column, sequence, _) in TABLES.items():
                        _advance(con, table, id_column, sequence)
                con.execute("COMMIT")
                return inserted
        except BaseException:
            with contextlib.suppress(Exception):
                con.execute("ROLLBACK")
            raise
        with contextlib.suppress(Exception):  # an entry the store refused: again without it
            con.execute("ROLLBACK")
        skipped.add(failed[0])
        say(f"replay: decisions log {path}: a {scan.entries[failed[0]]['table']} entry cannot be put back "
            f"({failed[1]}); it is skipped, every other decision is kept")


def _replay_entries(con, path: Path, entries: list[dict[str, Any]], skipped: set[int], say):
    """Insert what the store lacks; (rows written, None), or (_, (index, why)) for an entry the
    store refused (the caller rolls back and tries again without it)."""
    known = {table: {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]).fetchall()} for table in _KEY_COLUMNS}
    inserted = 0
    notes: dict[str, tuple[int, dict[str, Any]]] = {}  # run id -> its latest logged note
    for index, entry in enumerate(entries):
        if index in skipped:
            continue
        table = entry["table"]
        if table == NOTES:
            row = _stamped(entry["row"], ("updated_at",))
            if isinstance(row.get("run_id"), str):
                notes[row["run_id"]] = (index, row)
            else:
                skipped.add(index)
                say(f"replay: decisions log {path}: a run note without its run_id is skipped")
            continue
        id_column, _, stamps = TABLES[table]
        row = _stamped(entry["row"], stamps)
        # Names come from the log but are checked against the table's own columns first.
        unknown = [c for c in row if c not in known[table]]
        if not isinstance(row.get(id_column), int) or unknown:
            skipped.add(index)
            why = f"names columns {unknown} that {table} does not have" if unknown else f"has no {id_column}"
            say(f"replay: decisions log {path}: a {table} entry {why}; it is skipped, every other decision is kept")
            continue
        if con.execute(f"SELECT count(*) FROM {table} WHERE {id_column} = ?", [row[id_column]]).fetchone()[0]:
            continue
        columns = list(row)
        try:
            con.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        [row[c] for c in columns])
        except duckdb.Error as error:
            return inserted, (index, " ".join(str(error).split())[:200])
        inserted += 1
    for run_id, (index, row) in notes.items():
        if not (path.parent / run_id).is_dir():
            continue  # a deleted run's notes went with it
        stored = con.execute("SELECT updated_at FROM run_notes WHERE run_id = ?", [run_id]).fetchone()
        if stored is not None and (row.get("updated_at") is None or (stored[0] is not None and stored[0] >= row["updated_at"])):
            continue
        try:
            set_run_notes(con, run_id, list(row.get("tags") or []), row.get("note"), bool(row.get("archived")),
                          row.get("updated_by"), row.get("updated_at"))
        except (duckdb.Error, TypeError) as error:
            return inserted, (index, " ".join(str(error).split())[:200])
        inserted += 1
    return inserted, None


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
