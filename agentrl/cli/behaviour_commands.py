"""`python -m agentrl behaviours RUN_ID` and `python -m agentrl diff RUN_A RUN_B`: what a run's
trajectories did, which high-reward behaviours nobody has verified, and where two runs' next
actions differ most, for scripts and schedulers (`--json`).

CLI -> **behaviour_commands** -> analysis.behaviours -> store. Pending chunks are ingested first,
as the dashboard would have; definitions (window, top-reward quarter, unverified, weighted
divergence) are in `agentrl.analysis.behaviours`.
"""

from __future__ import annotations

import argparse
import json

from agentrl.cli.common import UsageError, add_runs_dir
from agentrl.cli.review_commands import _known_run, _store

DEFAULT_LAST = 5  # agentrl.analysis.behaviours.DEFAULT_LAST, without importing pandas to build the parser


def register(sub: argparse._SubParsersAction) -> None:
    behaviours = sub.add_parser("behaviours", help="a run's behaviours over its last K steps: share, reward, flags, "
                                                   "reviewed, and which high-reward ones are unverified")
    behaviours.add_argument("run_id", help="the run (see `python -m agentrl runs`)")
    behaviours.add_argument("--last", type=int, default=DEFAULT_LAST,
                            help=f"K: the window of last steps (default {DEFAULT_LAST})")
    behaviours.add_argument("--json", action="store_true", help="print a JSON list of behaviours")
    add_runs_dir(behaviours)
    behaviours.set_defaults(func=cmd_behaviours)

    diff = sub.add_parser("diff", help="the states where two runs' next-action distributions differ most "
                                       "(Jensen-Shannon in bits, weighted by how often both visit them)")
    diff.add_argument("run_a", help="the first run")
    diff.add_argument("run_b", help="the second run")
    diff.add_argument("--last", type=int, default=DEFAULT_LAST, help=f"compare each run's last K steps (default {DEFAULT_LAST})")
    diff.add_argument("--top", type=int, default=20, help="how many states to print without --json (default 20)")
    diff.add_argument("--json", action="store_true", help="print a JSON list of every state both runs visit")
    add_runs_dir(diff)
    diff.set_defaults(func=cmd_diff)


def _last(args: argparse.Namespace) -> int:
    if args.last < 1:
        raise UsageError(f"--last must be at least 1, not {args.last}")
    return args.last


def cmd_behaviours(args: argparse.Namespace) -> int:
    from agentrl.analysis import behaviours

    last = _last(args)
    with _store(args) as (con, _):
        _known_run(con, args.run_id)
        table = behaviours.behaviour_table(con, args.run_id, last=last)
    records = behaviours.as_records(table)
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    if not records:
        print(f"run {args.run_id} has no trajectories")
        return 0
    print(f"{'share':>6} {'reward':>7} {'flagged':>7} {'first':>5}  {'reviewed':<8} {'':<10} behaviour")
    earlier = [r for r in records if r["share"] == 0]
    for r in records:
        if r["share"] == 0:
            continue
        reward = "" if r["mean_reward"] is None else f"{r['mean_reward']:.3f}"
        flagged = "" if r["flagged_share"] is None else f"{r['flagged_share']:.0%}"
        mark = "UNVERIFIED" if r["unverified"] else ("high" if r["high_reward"] else "")
        print(f"{r['share']:>6.0%} {reward:>7} {flagged:>7} {r['first_step']:>5}  {'yes' if r['reviewed'] else 'no':<8} "
              f"{mark:<10} {r['behaviour']}")
    if earlier:
        print(f"... and {len(earlier)} behaviours seen only before the last {last} steps (--json lists them)")
    unverified = sum(r["unverified"] for r in records)
    print(f"\n{unverified} unverified: high-reward (>= 5% of the top-reward quarter of the last {last} steps), "
          "never flagged, never reviewed")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from agentrl.analysis import behaviours

    last = _last(args)
    with _store(args) as (con, _):
        for run_id in (args.run_a, args.run_b):
            _known_run(con, run_id)
        found = behaviours.run_divergence(con, args.run_a, args.run_b, last=last)
    records = behaviours.divergence_records(found)
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    if not records:
        print("the two runs visit no state in common")
        return 0
    def dist(probs: dict) -> str:
        return ", ".join(f"{a} {p:.2f}" for a, p in sorted(probs.items(), key=lambda item: -item[1]))
    for r in records[: max(1, args.top)]:
        print(f"js {r['js']:.3f} bits  weight {r['weight']:.2f}  visits {r['visits_a']}/{r['visits_b']}  at {r['state']}\n"
              f"    A: {dist(r['probs_a'])}\n    B: {dist(r['probs_b'])}")
    return 0
