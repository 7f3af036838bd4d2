"""`python -m agentrl bench`: the store's scale figures (issue 15) measured here, each next to its
target, and written to docs/benchmarks.md with the machine they ran on (see `agentrl.bench`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from agentrl.cli.common import UsageError
from agentrl.paths import PROJECT_ROOT


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="measure ingest, page queries, compaction and the live tick at scale "
                                         "(10M trajectory rows; under 10 minutes) and write docs/benchmarks.md")
    bench.add_argument("--quick", action="store_true", help="small sizes (4 runs x 200 steps; seconds), for a test")
    bench.add_argument("--runs", type=int, help="runs of synthetic chunks (default 20)")
    bench.add_argument("--steps", type=int, help="steps a run (default 15,625: 20 x 15,625 x 32 = 10M trajectory rows)")
    bench.add_argument("--per-step", type=int, help="trajectories a step (default 32)")
    bench.add_argument("--steps-per-commit", type=int, help="steps a commit holds (default 25)")
    bench.add_argument("--repeat", type=int, help="samples of each page query for its p95 (default 20)")
    bench.add_argument("--out", default=str(PROJECT_ROOT / "docs" / "benchmarks.md"), help="the report to write")
    bench.add_argument("--work-dir", help="where the synthetic runs go (default: a temporary folder, removed after)")
    bench.add_argument("--keep", action="store_true", help="keep the work folder")
    bench.add_argument("--no-scripts", action="store_true", help="leave out the quick scripts of benchmarks/")
    bench.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    import dataclasses

    from agentrl.bench.report import Plan, run

    plan = Plan.quick() if args.quick else Plan()
    sizes = {"runs": args.runs, "steps": args.steps, "per_step": args.per_step, "steps_per_commit": args.steps_per_commit}
    for name, value in sizes.items():
        if value is not None and value < (2 if name == "runs" else 1):
            raise UsageError(f"--{name.replace('_', '-')} must be at least {2 if name == 'runs' else 1}, not {value}")
    plan.shape = dataclasses.replace(plan.shape, **{k: v for k, v in sizes.items() if v is not None})
    if args.repeat is not None:
        if args.repeat < 1:
            raise UsageError(f"--repeat must be at least 1, not {args.repeat}")
        plan.repeat = args.repeat
    if args.steps is not None:
        plan.tick_sizes = tuple(sorted({min(1_000, args.steps), args.steps}))
    if args.no_scripts:
        plan.scripts = {}
    command = shlex.join(["python", "-m", "agentrl", "bench", *sys.argv[2:]]) if sys.argv[1:2] == ["bench"] else ""
    figures = run(plan, Path(args.out), Path(args.work_dir) if args.work_dir else None, args.keep, command)
    missed = [f.what for f in figures if f.ok is False]
    if missed:
        print(f"{len(missed)} figures missed their target: {'; '.join(missed)}")
    return 0
