"""Commands on the store: `ingest` (copy pending chunks into DuckDB), `export` (a run's tables as
files), `check` (read every block of the store), `rebuild` (recreate it from the runs' chunks
and the decisions log) and `compact` (rewrite each finished run's commits as one)."""

from __future__ import annotations

import argparse
import os

from agentrl.cli.common import UsageError, add_runs_dir, runs_dir_of
from agentrl.record.rundir import DB_FILENAME, RunsDirError


def register(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser("ingest", help="copy pending run chunks into the DuckDB store")
    add_runs_dir(ingest)
    ingest.add_argument("--chunks-url", help="also take the runs other machines published under this URL (s3://bucket/"
                                             "prefix; default $AGENTRL_CHUNKS_URL): a head that shares only the URL")
    ingest.set_defaults(func=cmd_ingest)

    export = sub.add_parser("export", help="write one run's tables (steps, trajectories, reviews, ...) as files")
    export.add_argument("run_id", help="the run to export (see `python -m agentrl runs`)")
    export.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="file format (default parquet)")
    export.add_argument("--out", required=True, help="folder to write into; one file per table")
    add_runs_dir(export)
    export.set_defaults(func=cmd_export)

    check = sub.add_parser("check", help="read every block of the store; name any damage with the command that repairs it, "
                                         "and each damaged line of the decisions log (exit 1)")
    add_runs_dir(check)
    check.set_defaults(func=cmd_check)

    rebuild = sub.add_parser("rebuild", help="recreate agentrl.duckdb from the runs' chunks and the decisions log")
    add_runs_dir(rebuild)
    rebuild.set_defaults(func=cmd_rebuild)

    compact = sub.add_parser("compact", help="rewrite each finished, ingested run's many commits as one (the dashboard "
                                             "does it by itself a minute after a run ends)")
    compact.add_argument("run_ids", nargs="*", help="only these runs (default: every finished run)")
    add_runs_dir(compact)
    compact.set_defaults(func=cmd_compact)


def cmd_ingest(args: argparse.Namespace) -> int:
    from agentrl.store.db import connect
    from agentrl.store.health import read_every_block
    from agentrl.store.ingest import Ingestor

    runs_dir = runs_dir_of(args)
    if not runs_dir.is_dir():
        raise RunsDirError(f"runs directory {str(runs_dir)!r} does not exist")
    if not os.access(runs_dir, os.W_OK):
        raise RunsDirError(f"runs directory {str(runs_dir)!r} is read-only; ingest writes {DB_FILENAME} there. "
                           f"Read what is stored with `python -m agentrl export`, or ingest a writable copy")
    chunks_url = _reachable_chunks_url(args.chunks_url)
    from agentrl.launcher import Launcher

    # A run whose process died without a final status (SIGKILL, the OOM killer) is marked so first,
    # with how it ended, as the dashboard does on its every tick.
    Launcher(runs_dir).reconcile()
    con = connect(runs_dir)
    try:
        report = Ingestor(con, runs_dir, chunks_url=chunks_url).ingest()  # names each skipped file on stderr as it goes
        read_every_block(con, runs_dir / DB_FILENAME)  # a damaged block anywhere is named, not left for a page to find
    finally:
        con.close()
    restored = f"; {report.decisions} decisions put back from the decisions log" if report.decisions else ""
    found = f"; {report.published} runs published under {chunks_url} copied or updated" if report.published else ""
    print(f"ingested {report.rows} rows from {report.files} chunks in {report.seconds:.2f}s "
          f"({report.runs_synced} run records updated){restored}{found}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from agentrl.store.db import connect
    from agentrl.store.export import ExportError, export_run

    runs_dir = runs_dir_of(args)
    if not (runs_dir / DB_FILENAME).is_file():
        raise UsageError(f"no store in {runs_dir}; run `python -m agentrl ingest --runs-dir {runs_dir}` first")
    con = connect(runs_dir, read_only=True)  # reading needs no write access to the runs directory
    try:
        paths = export_run(con, args.run_id, args.out, args.format)
    except ExportError as error:
        raise UsageError(str(error)) from None
    finally:
        con.close()
    for path in paths:
        print(path)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from agentrl.store.health import check_store

    runs_dir = runs_dir_of(args)
    if not runs_dir.is_dir():
        raise RunsDirError(f"runs directory {str(runs_dir)!r} does not exist")
    report = check_store(runs_dir)  # a damaged store is a StoreDamagedError line, exit 2
    print(report.summary())
    return 1 if report.damaged_log_lines else 0  # a decisions-log line that cost a decision: named, exit 1


def cmd_rebuild(args: argparse.Namespace) -> int:
    from agentrl.store.health import rebuild

    runs_dir = runs_dir_of(args)
    if not runs_dir.is_dir():
        raise RunsDirError(f"runs directory {str(runs_dir)!r} does not exist")
    print(rebuild(runs_dir).summary())
    return 0


def _reachable_chunks_url(given: str | None) -> str | None:
    """`--chunks-url`, else $AGENTRL_CHUNKS_URL, checked against its storage (one line if it cannot be used)."""
    from agentrl.record.locations import CHUNKS_URL_ENV, ChunkLocationError, check_chunks_url

    url = given or os.environ.get(CHUNKS_URL_ENV) or None
    if not url:
        return None
    try:
        return check_chunks_url(url, reach=True)
    except ChunkLocationError as error:
        raise UsageError(str(error)) from None


def cmd_compact(args: argparse.Namespace) -> int:
    from agentrl.record.rundir import RunDir
    from agentrl.store.compact import compact_run
    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor

    runs_dir = runs_dir_of(args)
    if not runs_dir.is_dir():
        raise RunsDirError(f"runs directory {str(runs_dir)!r} does not exist")
    con = connect(runs_dir)
    try:
        ingestor = Ingestor(con, runs_dir)
        while ingestor.ingest().files:  # a run is compacted only once the store holds every commit of it
            pass
        wanted = args.run_ids or sorted(ingestor.drained)
        unknown = [r for r in wanted if not (runs_dir / r / "run.json").is_file()]
        if unknown:
            raise UsageError(f"no run {unknown[0]!r} in {runs_dir} (see `python -m agentrl runs`)")
        before = after = 0
        for run_id in wanted:
            report = compact_run(ingestor, RunDir(runs_dir / run_id))
            print(report.summary())
            if report.number is not None:
                before, after = before + report.bytes_before, after + report.bytes_after
    finally:
        con.close()
    print(f"compacted chunks: {before / 2**20:,.1f} MiB -> {after / 2**20:,.1f} MiB")
    return 0
