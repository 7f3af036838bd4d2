"""How fast the Compare and Review pages' queries answer on a big store: 1M trajectory rows.

Store -> **queries** -> page: fills a throwaway DuckDB store (built by DuckDB's own SQL, so the
fill takes seconds) with two runs, an outcome and a guarded one, of `--steps` steps x
`--per-step` trajectories each (default 2 x 2,500 x 200 = 1,000,000 rows, with the list and map
columns a real run writes), their steps, action distributions and evaluations, and a few hundred
reviews; then times every query the two pages make, each the median of `--repeat` runs after one
warm-up, and the whole promotion-gate evaluation. The budget is 100 ms per query (issue 30).

    .venv/bin/python benchmarks/page_queries.py [--steps 2500] [--per-step 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentrl.bench.scale import QUERY_BUDGET_MS, compare_page_queries, review_page_queries  # noqa: E402
from agentrl.store.queries.ledger import aggregate_step_components, aggregate_step_tallies, fill_behaviours  # noqa: E402
from agentrl.store.ingest import connect  # noqa: E402

BUDGET_MS = QUERY_BUDGET_MS
RUNS = {"bench-outcome": "outcome", "bench-guarded": "guarded"}


def fill(con, steps: int, per_step: int) -> None:
    for run_id, scorer in RUNS.items():
        con.execute(
            """
            INSERT INTO runs (run_id, name, kind, scorer, status, config, created_at, total_steps)
            VALUES (?, ?, 'tabular', ?, 'succeeded', '{"max_steps": 7}', now()::TIMESTAMP, ?)
            """,
            [run_id, run_id, scorer, steps],
        )
        con.execute(
            """
            INSERT INTO trajectories BY NAME
            SELECT ? AS run_id, s AS step, i AS traj_idx,
                   ['train-low', 'train-high', 'recover-low', 'recover-high'][1 + (i % 4)] AS task_id,
                   [20, 80, 30, 90][1 + (i % 4)] AS amount,
                   ['start', 'known_high', 'approved', 'refunded'] AS states,
                   CASE WHEN hash(s, i) % 10 = 0 THEN ['lookup', 'refund', 'finish']
                        ELSE ['lookup', 'request_approval', 'refund', 'finish'] END AS actions,
                   [-0.1, -0.2, -0.05, -0.01] AS behavior_logps,
                   [0.3, 0.3, 0.3, 0.3] AS advantages,
                   (hash(s, i) % 1000) / 1000.0 AS reward,
                   MAP {'outcome': 1.0, 'step_cost': -0.2, 'violation_penalty': CASE WHEN hash(s, i) % 10 = 0 THEN -2.0 ELSE 0.0 END} AS components,
                   true AS success, hash(s, i) % 10 = 0 AS violation, false AS duplicate_effect,
                   NOT (? = 'guarded' AND hash(s, i) % 10 = 0) AS eligible,
                   ? = 'guarded' AND hash(s, i) % 10 = 0 AS vetoed, true AS updated
            FROM range(1, ? + 1) t(s), range(0, ?) u(i)
            """,
            [run_id, scorer, scorer, steps, per_step],
        )
        con.execute(
            """
            INSERT INTO steps BY NAME
            SELECT ? AS run_id, s AS step, now()::TIMESTAMP AS ts, s * 0.1 AS elapsed_s, 0.9 AS success_rate,
                   0.1 AS violation_rate, 0.0 AS duplicate_rate, 0.5 AS mean_reward, 20 AS vetoed,
                   0 AS vetoed_updates, 700 AS updates, 10 AS clipped, [4, 6] AS clipped_by_epoch, 800 AS transitions
            FROM range(1, ? + 1) t(s)
            """,
            [run_id, steps],
        )
        con.execute(
            """
            INSERT INTO action_probs BY NAME
            SELECT ? AS run_id, s AS step, 'known_high' AS state, a AS action, 0.25 AS prob
            FROM range(0, ? + 1) t(s), (VALUES ('finish'), ('lookup'), ('request_approval'), ('refund')) v(a)
            """,
            [run_id, steps],
        )
        con.execute(
            """
            INSERT INTO evals BY NAME
            SELECT ? AS run_id, s AS step, 'held_out' AS split, 'eval-' || k AS task_id,
                   ['lookup', 'refund', 'finish'] AS actions, true AS success, false AS violation
            FROM range(0, ? + 1, 5) t(s), range(0, 4) u(k)
            """,
            [run_id, steps],
        )
        con.execute(
            """
            INSERT INTO reviews (run_id, step, traj_idx, verdict, note, reviewer, reviewed_at)
            SELECT ?, ? - (i % 3), i, CASE WHEN i % 7 = 0 THEN 'reject' ELSE 'approve' END, 'bench', 'bench', now()::TIMESTAMP
            FROM range(0, 200) t(i)
            """,
            [run_id, steps],
        )
    # What ingest keeps beside the trajectories it adds (the rows above went in by SQL, not ingest):
    # Compare reads the component sums, the gate and the onset the tallies.
    aggregate_step_components(con, "trajectories")
    aggregate_step_tallies(con, "trajectories")
    fill_behaviours(con)


def timed(fn, repeat: int) -> float:
    fn()  # warm-up: the first call pays for planning and cold pages
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--per-step", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="agentrl-page-bench-"))
    try:
        con = connect(root)
        start = time.perf_counter()
        fill(con, args.steps, args.per_step)
        con.execute("CHECKPOINT")
        rows = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        print(f"filled {rows:,} trajectory rows in {time.perf_counter() - start:.1f}s "
              f"({len(RUNS)} runs x {args.steps} steps x {args.per_step})")
        pair = list(RUNS)
        guarded = pair[1]
        last = args.steps
        # The catalogue `python -m agentrl bench` times: every query the two pages make, as they ask it.
        page_queries = {f"Compare: {name}": (lambda fn=fn: fn(pair)) for name, fn in compare_page_queries(con, last).items()}
        page_queries |= {f"Review: {name}": fn for name, fn in review_page_queries(con, root, guarded, last).items()}
        worst = 0.0
        width = max(len(name) for name in page_queries)
        for name, fn in page_queries.items():
            ms = timed(fn, args.repeat)
            worst = max(worst, ms)
            print(f"{name:<{width}}  {ms:8.1f} ms{'  OVER BUDGET' if ms > BUDGET_MS else ''}")
        print(f"slowest: {worst:.1f} ms (budget {BUDGET_MS:.0f} ms per query)")
        con.close()
        return 0 if worst <= BUDGET_MS else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
