"""Export of a run's rows out of the store: one Parquet or CSV file per table, and download bytes.

Sits after the store (store -> **export** -> a person's files): `export_run` copies every row a
run has in the store's tables to `<out_dir>/<table>.<fmt>` with DuckDB's own writer (COPY), and
`frame_to_bytes` turns a DataFrame a page already shows into the bytes of a download button.

Formats: Parquet keeps every column's type (lists stay lists, maps stay maps). CSV has no
nested types, so list, array, map and struct columns are written as JSON text (`["a","b"]`,
`{"success":1.0}`), which any reader can parse back; DuckDB's own string form (`[a, b]`,
`{success=1.0}`) cannot be told apart from a string that looks like it.
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

# Tables holding a run's rows, in the order a person reads them; any other table with a run
# column is exported too (after these, by name), so a table added to schemas/ needs no change
# here. Tables missing from the database are skipped.
EXPORT_TABLES = (
    "runs", "steps", "trajectories", "action_probs", "evals", "imitation_policy", "imitation_labels",
    "hardware", "budgets", "events", "reviews", "fixtures", "promotions",
)
# The store's own bookkeeping, which names runs but is no part of one.
NOT_EXPORTED = ("ingested_files", "ingest_errors")
# The column naming the run, first match: fixtures keep `source_run_id`, as they outlive their run.
RUN_COLUMNS = ("run_id", "source_run_id")
FORMATS = ("parquet", "csv")

_NESTED_TYPE = re.compile(r"(\[\d*\]$)|(^(MAP|STRUCT|UNION)\()")  # DuckDB's names of nested types


class ExportError(RuntimeError):
    """An export that cannot be done; the message says what to change, on one line."""


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {list(FORMATS)}")
    return fmt


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


@dataclass(frozen=True)
class _RunTable:
    """A table of the database that holds rows of runs."""

    name: str
    run_column: str
    columns: tuple[tuple[str, str], ...]  # (name, DuckDB type) in table order

    def select(self, fmt: str) -> str:
        """The run's rows; in CSV, nested columns as JSON text. The run id stays a parameter."""
        if fmt == "csv":
            items = [f"to_json({_quote(name)}) AS {_quote(name)}" if _NESTED_TYPE.search(data_type) else _quote(name) for name, data_type in self.columns]
        else:
            items = [_quote(name) for name, _ in self.columns]
        # Table and column names come from the catalog, never from input.
        return f"SELECT {', '.join(items)} FROM {_quote(self.name)} WHERE {_quote(self.run_column)} = ?"

    def count(self) -> str:
        return f"SELECT count(*) FROM {_quote(self.name)} WHERE {_quote(self.run_column)} = ?"


def _run_tables(con: duckdb.DuckDBPyConnection) -> list[_RunTable]:
    """Every table of the database with a run column, EXPORT_TABLES' order first, then by name."""
    rows = con.execute(
        """
        SELECT table_name, column_name, data_type
        FROM duckdb_columns()
        WHERE database_name = current_database() AND schema_name = current_schema()
        ORDER BY table_name, column_index
        """
    ).fetchall()
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in rows:
        if table not in NOT_EXPORTED:
            columns.setdefault(table, []).append((column, data_type))
    order = [t for t in EXPORT_TABLES if t in columns] + sorted(t for t in columns if t not in EXPORT_TABLES)
    tables = []
    for table in order:
        names = [name for name, _ in columns[table]]
        run_column = next((c for c in RUN_COLUMNS if c in names), None)
        if run_column is not None:
            tables.append(_RunTable(table, run_column, tuple(columns[table])))
    return tables


def export_run(con: duckdb.DuckDBPyConnection, run_id: str, out_dir: str | Path, fmt: str = "parquet") -> list[Path]:
    """Write `<out_dir>/<table>.<fmt>` for every table with rows of `run_id`; returns the files written.

    A run id no table knows is an ExportError, raised before anything is created.
    The tables are read in one transaction, so the files agree with each other while the
    dashboard keeps ingesting. Each file is written under a temporary name and renamed into
    place, so an interrupted export never leaves a torn file under the final name.
    """
    _check_format(fmt)
    if not isinstance(run_id, str) or not run_id:
        raise ExportError(f"run id must be a non-empty string, not {run_id!r}")
    out_dir = Path(out_dir)
    cur = con.cursor()  # its own transaction and nothing left behind on the caller's connection
    try:
        cur.execute("BEGIN TRANSACTION")
        tables = [table for table in _run_tables(cur) if cur.execute(table.count(), [run_id]).fetchall()[0][0]]
        if not tables:
            raise ExportError(f"unknown run id {run_id!r}; pick one listed by `python -m agentrl runs` or the dashboard")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ExportError(f"cannot create export folder {out_dir} ({error.strerror or error}); choose a writable folder") from None
        written = []
        for table in tables:
            target = out_dir / f"{table.name}.{fmt}"
            partial = out_dir / f".{table.name}.{fmt}.partial-{os.getpid()}"
            relation = cur.sql(table.select(fmt), params=[run_id])
            try:
                if fmt == "parquet":
                    relation.write_parquet(str(partial))
                else:
                    relation.write_csv(str(partial), header=True)
                os.replace(partial, target)
            except (duckdb.IOException, OSError) as error:
                partial.unlink(missing_ok=True)
                message = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise ExportError(f"cannot write {target} ({message}); choose a writable folder") from None
            written.append(target)
        return written
    finally:
        try:
            cur.execute("ROLLBACK")  # read only: nothing to keep
        except duckdb.Error:
            pass  # no transaction to end: BEGIN itself failed, and that error is the one to see
        cur.close()


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)  # timestamps and anything else JSON has no type for


def _is_nested(value) -> bool:
    return isinstance(value, (list, tuple, dict, np.ndarray))


def _nested_as_json(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with every list/dict/array cell written as JSON text (the CSV convention above)."""
    out = df.copy()
    for column in out.columns:
        if out[column].dtype == object and out[column].map(_is_nested).any():
            out[column] = out[column].map(lambda v: json.dumps(v, default=_json_default) if _is_nested(v) else v)
    return out


def frame_to_bytes(df: pd.DataFrame, fmt: str) -> bytes:
    """A DataFrame as the bytes of a CSV (UTF-8, header, no index) or Parquet file, for a download button.

    In CSV, list and map cells are JSON text, as in `export_run`. In Parquet they keep their
    type when pyarrow can infer one, else they too become JSON text.
    """
    _check_format(fmt)
    if fmt == "csv":
        return _nested_as_json(df).to_csv(index=False).encode("utf-8")
    buffer = io.BytesIO()
    try:
        df.to_parquet(buffer, index=False, engine="pyarrow")
    except (ValueError, TypeError, NotImplementedError):
        # pyarrow raises ArrowInvalid/ArrowTypeError (ValueError/TypeError) on cells of mixed types.
        buffer = io.BytesIO()
        _nested_as_json(df).to_parquet(buffer, index=False, engine="pyarrow")
    return buffer.getvalue()
