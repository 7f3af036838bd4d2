"""`agentrl scan RUN_ID --scanner PATH:NAME` (run a rule over a recorded run, results stored per
trajectory and version) and `agentrl scan RUN_ID --validate` (each scanner and the task's `verify`
scored against the run's review decisions), both with `--json` for scripts.

CLI -> **scan_commands** -> agentrl.scan -> store. Pending chunks are ingested first, as for the
review commands; a scanner that cannot be loaded or run is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json

from agentrl.cli.common import UsageError, add_runs_dir
from agentrl.cli.review_commands import _known_run, _store


def register(sub: argparse._SubParsersAction) -> None:
    scan = sub.add_parser("scan", help="run scanners (rules over trajectories) over a recorded run, or score them "
                                       "against its review decisions (--validate)")
    scan.add_argument("run_id", help="the run (see `python -m agentrl runs`)")
    scan.add_argument("--scanner", action="append", default=[], metavar="PATH:NAME",
                      help="a scanner: a .py file's (or module's) NAME, a regex scanner NAME of a .json file, or "
                           "builtin:NAME (dominant_component, reward_spike, repeated_call, schema_arguments, verify); "
                           "repeat for several")
    scan.add_argument("--validate", action="store_true",
                      help="print each scanner's precision, recall and F1 against the run's reviews (rejects and "
                           "fixtures positive, approvals negative), on a dev and a held-out split")
    scan.add_argument("--rescan", action="store_true", help="scan again trajectories this scanner version already scanned")
    scan.add_argument("--json", action="store_true", help="print JSON: the results (or, with --validate, the figures)")
    add_runs_dir(scan)
    scan.set_defaults(func=cmd_scan)


def _figure(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def cmd_scan(args: argparse.Namespace) -> int:
    from agentrl.scan import ScanError, load_scanner
    from agentrl.scan.results import results_records, run_task, scan_run
    from agentrl.scan.validate import validate_run
    from agentrl.store import queries

    if not args.scanner and not args.validate:
        raise UsageError("give --scanner PATH:NAME (one or more) or --validate")
    with _store(args) as (con, _):
        _known_run(con, args.run_id)
        task = run_task(con, args.run_id)
        try:
            scanners = [load_scanner(spec, task) for spec in args.scanner]
            summaries = [scan_run(con, args.run_id, s, task, rescan=args.rescan) for s in scanners]
            validations = validate_run(con, args.run_id) if args.validate else []
        except ScanError as error:
            raise UsageError(str(error)) from None
        results = [queries.scan_results(con, args.run_id, s.name, s.version) for s in scanners]
    if args.validate:
        if args.json:
            print(json.dumps([v.as_dict() for v in validations], indent=2))
            return 0
        for summary in summaries:
            print(f"scanned {summary.scanned} trajectories with {summary.scanner} v{summary.version}: {summary.hits} hits")
        print(f"{'scanner':<24} {'version':<10} {'split':<9} {'precision':>9} {'recall':>6} {'f1':>5} "
              f"{'positives':>9} {'negatives':>9}  note")
        for v in validations:
            print(f"{v.scanner:<24} {v.version:<10} {v.split:<9} {_figure(v.precision):>9} {_figure(v.recall):>6} "
                  f"{_figure(v.f1):>5} {v.positives:>9} {v.negatives:>9}  {v.note}")
        if not validations:
            print(f"run {args.run_id} has no scanner results and no task whose verify could be scored")
        return 0
    if args.json:
        print(json.dumps([r for frame in results for r in results_records(frame)], indent=2))
        return 0
    for summary, frame in zip(summaries, results):
        hits = frame[frame["hit"]]
        print(f"{summary.scanner} v{summary.version}: {len(hits)} of {len(frame)} trajectories hit "
              f"({summary.scanned} scanned now, {summary.kept} kept from before)")
        for row in hits.head(20).itertuples():
            refs = ",".join(str(int(r)) for r in (row.refs if row.refs is not None else []))
            print(f"  {int(row.step)}/{int(row.traj_idx)}  items {refs or '-'}  {row.explanation or ''}")
        if len(hits) > 20:
            print(f"  ... and {len(hits) - 20} more (--json lists them)")
    return 0
