"""Commands on the store: `ingest` (copy pending chunks into DuckDB) and `export` (a run's tables as files)."""

from __future__ import annotations

import argparse

from agentrl.cli.common import UsageError, add_runs_dir, runs_dir_of
from agentrl.record.rundir import DB_FILENAME, RunsDirError


def register(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser("ingest", help="copy pending run chunks into the DuckDB store")
    add_runs_dir(ingest)
    ingest.set_defaults(func=cmd_ingest)

    export = sub.add_parser("export", help="write one run's tables (steps, trajectories, reviews, ...) as files")
    export.add_argument("run_id", help="the run to export (see `python -m agentrl runs`)")
    export.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="file format (default parquet)")
    export.add_argument("--out", required=True, help="folder to write into; one file per table")
    add_runs_dir(export)
    export.set_defaults(func=cmd_export)


def cmd_ingest(args: argparse.Namespace) -> int:
    from agentrl.store.ingest import ingest_once

    runs_dir = runs_dir_of(args)
    if not runs_dir.is_dir():
        raise RunsDirError(f"runs directory {str(runs_dir)!r} does not exist")
    report = ingest_once(runs_dir)  # its Ingestor names each skipped chunk on stderr as it goes
    print(f"ingested {report.rows} rows from {report.files} chunks in {report.seconds:.2f}s "
          f"({report.runs_synced} run records updated)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from agentrl.store.db import connect
    from agentrl.store.export import ExportError, export_run

    runs_dir = runs_dir_of(args)
    if not (runs_dir / DB_FILENAME).is_file():
        raise UsageError(f"no store in {runs_dir}; run `python -m agentrl ingest --runs-dir {runs_dir}` first")
    con = connect(runs_dir)
    try:
        paths = export_run(con, args.run_id, args.out, args.format)
    except ExportError as error:
        raise UsageError(str(error)) from None
    finally:
        con.close()
    for path in paths:
        print(path)
    return 0
