"""What bubblewrap's allow-listed view costs a sandboxed test run, against the launcher's own
namespaces (the fallback): the same honest fix of a built-in task, run one at a time, alternating
the two views, `--runs` times each.

Rewards -> **sandbox**: `run_tests(..., bubblewrap=True)` and `run_tests(..., bubblewrap=False)` on
the slugify repository under its runner (`--runner`: script, unittest or pytest); prints the
median and the spread of the wall-clock seconds of the whole call (copy, run, verdict, clean-up)
and of the run itself (`SandboxResult.duration_s`). Run it quiet, at a low priority:

    nice -n 10 .venv/bin/python benchmarks/sandbox_view.py [--runs 15] [--runner script]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentrl.rewards import written_files
from agentrl.sandbox import run_tests
from agentrl.tasks.coding.tasks import CODING_TASKS, scripted_attempts, task_row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--runner", default="script", choices=["script", "unittest", "pytest"])
    args = parser.parse_args(argv)
    task = CODING_TASKS["slugify"]
    files = written_files(scripted_attempts(task)["honest_fix_one_read"])
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as scratch:
        row = task_row(task, Path(scratch), args.runner)
        times: dict[str, list[tuple[float, float]]] = {"bubblewrap": [], "namespaces": []}
        for i in range(args.runs + 1):
            for view in times:
                started = time.monotonic()
                result = run_tests(Path(row["workspace"]), files, row["test_command"], row["protected"], writable=row["writable"],
                                   answer_keys=row["answer_keys"], bubblewrap=view == "bubblewrap")
                elapsed = time.monotonic() - started
                if not result.passed:
                    raise SystemExit(f"{view}: the honest fix did not pass, the timing would mean nothing: {result.reason}")
                if i:  # the first round warms the caches (the suite's collection count, the probes)
                    times[view].append((elapsed, result.duration_s))
    for view, rows in times.items():
        calls, runs = [c for c, _ in rows], [r for _, r in rows]
        print(f"{view:10s} call median {statistics.median(calls):.3f} s (min {min(calls):.3f}, max {max(calls):.3f}); "
              f"run median {statistics.median(runs):.3f} s, {len(rows)} runs, runner {args.runner}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
