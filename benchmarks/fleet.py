"""The environment fleet's measured speedup against SPEC section 9's modelled one.

Tabular run process -> **fleet**: samples the refund taskset's rounds (4 tasks x group 8) with the
cloned policy, every environment step waiting `--latency` seconds (an I/O-bound environment),
with 1, 2 and 4 worker processes, and prints transitions per second, the speedup over one worker
and the modelled speedup of SPEC section 9 for the same N. On 2 cores the target is >= 1.6x with
2 workers. The fleet's start-up (spawning workers) is outside the timed rounds, as in a run.

    .venv/bin/python benchmarks/fleet.py [--latency 0.02] [--rounds 4] [--workers 1 2 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentrl.analysis.throughput import transitions_per_second  # noqa: E402
from agentrl.engines.tabular.fleet import RolloutFleet  # noqa: E402
from agentrl.engines.tabular.imitation import clone_expert  # noqa: E402
from agentrl.tasks.refund.tasksets import EXPERT_TASKS, TRAIN_TASKS  # noqa: E402


def measure(workers: int, latency: float, rounds: int) -> float:
    policy = clone_expert(EXPERT_TASKS)
    with RolloutFleet(workers, run_seed=7, env_latency_s=latency) as fleet:
        fleet.sample(policy, TRAIN_TASKS, 8, round_index=0)  # warm-up: workers spawned and imported
        fleet.stats.per_round.clear()
        for round_index in range(1, rounds + 1):
            fleet.sample(policy, TRAIN_TASKS, 8, round_index)
        return statistics.median(fleet.stats.per_round)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per environment step (default 0.02)")
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per worker count (default 4)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="worker counts (default 1 2 4)")
    args = parser.parse_args()
    results = {n: measure(n, args.latency, args.rounds) for n in args.workers}
    base = results[args.workers[0]]
    print(f"environment fleet: refund taskset, 32 rollouts a round, {args.latency * 1000:.0f} ms per environment step, "
          f"median of {args.rounds} rounds")
    print(f"{'workers':>7}  {'transitions/s':>13}  {'speedup':>7}  {'SPEC 9 model':>12}")
    for n, rate in results.items():
        # SPEC 9's model with this run's own totals (one round: ~108 transitions, ~200 updates).
        modelled = transitions_per_second(108, 200, n) / transitions_per_second(108, 200, args.workers[0])
        print(f"{n:>7}  {rate:>13.1f}  {rate / base:>6.2f}x  {modelled:>11.2f}x")


if __name__ == "__main__":
    main()
