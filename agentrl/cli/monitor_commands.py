"""`python -m agentrl watch RUN_ID`: a run's hacking signals as they arrive; exit status 3 at an onset."""

from __future__ import annotations

import argparse
import sys

from agentrl.cli.common import UsageError, add_runs_dir, runs_dir_of
from agentrl.record.rundir import RunDir

ONSET_EXIT = 3


def register(sub: argparse._SubParsersAction) -> None:
    watch = sub.add_parser("watch", help="print a run's hacking signals as they arrive; exit 3 at an onset, 0 when it ends without one")
    watch.add_argument("run_id", help="the run to watch (see `python -m agentrl runs`)")
    add_runs_dir(watch)
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between looks at the run's chunks (default 1)")
    watch.add_argument("--timeout", type=float, help="give up after this many seconds (exit 0 if no onset by then)")
    watch.set_defaults(func=cmd_watch)


def _format(signals: dict[str, float]) -> str:
    return "  ".join(f"{name} {value:.3f}" for name, value in sorted(signals.items())) or "(no signal yet)"


def cmd_watch(args: argparse.Namespace) -> int:
    from agentrl.monitor.watch import watch

    if not args.interval > 0:
        raise UsageError(f"--interval must be a positive number of seconds, not {args.interval}")
    run = RunDir(runs_dir_of(args) / args.run_id)
    if "/" in args.run_id or args.run_id in ("", ".", "..") or not run.meta_path.is_file():
        raise UsageError(f"no run {args.run_id!r} in {runs_dir_of(args)} (see `python -m agentrl runs`)")
    def unreadable(number: int, why: str) -> None:
        print(f"watch: commit {number} of {args.run_id} cannot be read ({why}); its rows are left out",
              file=sys.stderr, flush=True)

    for reading in watch(run, interval=args.interval, timeout=args.timeout, unreadable=unreadable):
        print(f"step {reading.step:>5}  {_format(reading.signals)}", flush=True)
        if reading.onset is not None:
            print(reading.onset.message, flush=True)
            return ONSET_EXIT
    status = (run.status() or {}).get("status", "?")
    print(f"run {args.run_id} is {status}; no hacking onset", file=sys.stderr if status == "?" else sys.stdout, flush=True)
    return 0
