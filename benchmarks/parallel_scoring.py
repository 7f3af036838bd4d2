"""How much the worker pool speeds up the tests reward: a group of sandboxed test runs of about
one CPU second each, scored serially (`workers=1`) and with a pool (`--workers`, default 2).

Rewards -> **sandbox**: builds a throwaway workspace whose protected test burns `--seconds` of
real CPU time (a busy loop on `time.process_time()`) and then checks the completion's
`solution.py`; scores `--runs` completions through `tests_reward` once per pool size and prints
the wall-clock times and the speedup. On a 2-core machine the target is >= 1.6x with 2 workers.

    .venv/bin/python benchmarks/parallel_scoring.py [--runs 8] [--workers 2] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentrl.rewards import tests_outcomes

BUSY_TEST = """import time
while time.process_time() < {seconds}:
    pass
from solution import answer
assert answer() == 42
"""


def score(completions: list[str], columns: dict, workers: int) -> tuple[float, list[float]]:
    started = time.monotonic()
    outcomes = tests_outcomes(completions, **columns, workers=workers)
    elapsed = time.monotonic() - started
    failed = [o.reason for o in outcomes if not o.passed]
    if failed:
        raise SystemExit(f"a run failed, the timing would mean nothing: {failed[0]}")
    return elapsed, [o.sandbox.duration_s for o in outcomes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="completions in the group")
    parser.add_argument("--workers", type=int, default=2, help="pool size to compare with 1")
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds each test run burns")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as scratch:
        workspace = Path(scratch) / "repo"
        workspace.mkdir()
        (workspace / "test_busy.py").write_text(BUSY_TEST.format(seconds=args.seconds))
        columns = {"workspace": str(workspace), "test_command": [sys.executable, "test_busy.py"], "protected": ["test_busy.py"]}
        completions = ["```file:solution.py\ndef answer():\n    return 42\n```\n"] * args.runs

        print(f"{args.runs} runs of ~{args.seconds:.1f} CPU s each, {os.cpu_count()} cores")
        serial, durations = score(completions, columns, workers=1)
        print(f"  workers=1: {serial:6.2f} s  (each run {min(durations):.2f}-{max(durations):.2f} s)")
        pooled, durations = score(completions, columns, workers=args.workers)
        print(f"  workers={args.workers}: {pooled:6.2f} s  (each run {min(durations):.2f}-{max(durations):.2f} s)")
        print(f"  speedup:   {serial / pooled:6.2f}x")


if __name__ == "__main__":
    main()
