"""Commands that bring other trackers' history into the store: `import-trackio`."""

from __future__ import annotations

import argparse

from agentrl.cli.common import UsageError, add_runs_dir, runs_dir_of


def register(sub: argparse._SubParsersAction) -> None:
    trackio = sub.add_parser("import-trackio", help="import a Trackio project (its .db file) as agentrl runs")
    trackio.add_argument("project_db", metavar="PROJECT_DB",
                         help="the project's SQLite file (Trackio keeps <project>.db in ~/.cache/huggingface/trackio)")
    add_runs_dir(trackio)
    trackio.set_defaults(func=cmd_import_trackio)


def cmd_import_trackio(args: argparse.Namespace) -> int:
    from agentrl.integrations.trackio import TrackioImportError, import_project
    from agentrl.store.ingest import StoreLockedError, ingest_once

    runs_dir = runs_dir_of(args)
    try:
        report = import_project(args.project_db, runs_dir)
    except TrackioImportError as error:
        raise UsageError(str(error)) from None
    for name, run_id, steps, completions in report.imported:
        print(f"imported {name}: {steps} steps, {completions} completions -> {run_id}")
    for name, run_id, steps, completions in report.followed:
        print(f"followed {name}: {steps} new steps, {completions} completions -> {run_id}")
    for name, run_id in report.already:
        print(f"skipped {name}: already imported as {run_id}")
    if report.skipped_values:
        print(f"left out {report.skipped_values} values that are neither numbers nor tables (media, histograms)")
    if report.bad_rows:
        print(f"left out {report.bad_rows} rows whose step is not a whole number from 0 to 2147483647 or whose "
              "metrics are not JSON text")
    if not report.imported and not report.already and not report.refused and not report.followed:
        print("the project has no runs")
    try:
        ingested = ingest_once(runs_dir, wait_s=0.0)
        print(f"ingested {ingested.rows} rows from {ingested.files} chunks")
    except StoreLockedError:
        print("the store is open elsewhere (the dashboard ingests the runs itself)")
    if report.refused:
        (name, why), more = report.refused[0], len(report.refused) - 1
        raise UsageError(f"run {name!r} of {args.project_db} was not imported: {why}"
                         + (f" (and {more} more runs)" if more else "") + "; the project's other runs were")
    return 0
