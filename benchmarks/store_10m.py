"""The 10M-row bench store, by hand: build it once, time every Compare and Review query on it, and
compare another checkout's code against this one on the same store at the same load (issue 30).

    .venv/bin/python benchmarks/store_10m.py build DIR [--runs N] [--steps 15625] [--code CHECKOUT]
    .venv/bin/python benchmarks/store_10m.py queries DIR [--repeat 30] [--code CHECKOUT] [--skip-slow]
    .venv/bin/python benchmarks/store_10m.py ab DIR --before CHECKOUT [--rounds 30]
    .venv/bin/python benchmarks/store_10m.py slow DIR --before CHECKOUT [--rounds 2] [--repeat 20]

`build` writes the bench's synthetic chunks once (DIR/pristine: 20 runs x 15,625 steps x 32
trajectories, `agentrl.bench.synth`), hard-links them (all, or the first N runs) into DIR/runs
and ingests them as `python -m agentrl bench` does, printing rows/s and the load. `--code` runs a
command with another checkout's `agentrl` (e.g. /work/main, to measure before a change). `ab`
times the old Compare series queries (from the other checkout) and this checkout's, as the pages
ask them, interleaved in one process: wall p95 and median, and CPU time a call, which the load of
a shared machine barely moves. `slow` times what `queries --skip-slow` leaves out (the onset, the
gate, the Behaviours view and the found divergence) with the other checkout's code and this one's,
each in its own process (they are whole packages), alternating `--rounds` times: p95 and median
of each, and the load. Nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _load(label: str) -> str:
    return f"load average {label}: " + " / ".join(f"{x:.1f}" for x in os.getloadavg())


def build(root: Path, runs: int | None, steps: int) -> None:
    from agentrl.bench.synth import Shape, write_runs
    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor
    from agentrl.store.maintenance import Maintenance

    pristine, target = root / "pristine", root / "runs"
    if not pristine.exists():
        started = time.perf_counter()
        write_runs(pristine, Shape(steps=steps))
        print(f"wrote the chunks in {time.perf_counter() - started:.0f} s", flush=True)
    subprocess.run(["rm", "-rf", str(target)], check=True)
    target.mkdir(parents=True)
    for run in sorted(p for p in pristine.iterdir() if p.is_dir())[:runs]:
        subprocess.run(["cp", "-al", str(run), str(target / run.name)], check=True)
    print(_load("before"), flush=True)
    con = connect(target)
    ingestor = Ingestor(con, target, log=lambda *a: None)
    maintenance = Maintenance(ingestor, target, start=False, compact=False)
    started, files, rows = time.perf_counter(), 0, 0
    while True:
        report = ingestor.ingest()
        files, rows = files + report.files, rows + report.rows
        maintenance.maybe_checkpoint()
        if not report.files:
            break
    seconds = time.perf_counter() - started
    print(f"ingested {rows:,} rows from {files:,} commits in {seconds:.1f} s: {rows / seconds:,.0f} rows/s; "
          f"{len(maintenance.checkpoints)} checkpoints, {sum(c for c, _ in maintenance.checkpoints):.1f} s", flush=True)
    print(_load("after"), flush=True)
    con.execute("CHECKPOINT")
    con.close()


SLOW = ("Behaviours", "divergence", "evaluate_gate", "store_onset")


def queries(root: Path, repeat: int, skip_slow: bool, only_slow: bool = False) -> None:
    from agentrl.bench.scale import _p95, compare_page_queries, review_page_queries
    from agentrl.monitor import store_onset
    from agentrl.store.db import connect

    runs_dir = root / "runs"
    con = connect(runs_dir)
    run_ids = sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall())
    steps = int(con.execute("SELECT max(step) FROM steps").fetchone()[0])
    one = run_ids[1]
    if not con.execute("SELECT count(*) FROM reviews WHERE run_id = ?", [one]).fetchone()[0]:  # as the bench does
        con.execute("""INSERT INTO reviews (run_id, step, traj_idx, verdict, note, reviewer, reviewed_at)
                       SELECT ?, ? - (i % 3), i % 32, CASE WHEN i % 7 = 0 THEN 'reject' ELSE 'approve' END, 'bench',
                              'bench', now()::TIMESTAMP FROM range(0, 200) t(i)""", [one, steps])
    print(_load("before"), flush=True)
    timed = {f"Compare: {n}": (lambda fn=fn: fn(run_ids)) for n, fn in compare_page_queries(con, steps).items()}
    timed |= {f"Review: {n}": fn for n, fn in review_page_queries(con, runs_dir, one, steps).items()}
    timed["store_onset"] = lambda: store_onset(con, one)
    try:
        from agentrl.monitor.kept import forget, kept_onset
    except ImportError:  # a checkout from before the kept onset
        kept_onset = None
    if kept_onset is not None:
        gate = next(fn for name, fn in timed.items() if "evaluate_gate" in name)
        timed["store_onset kept (unchanged since)"] = lambda: kept_onset(con, one)
        timed["Review: evaluate_gate, its onset computed"] = lambda: (forget(), gate())
    decided = []
    if kept_onset is not None:
        def after_a_decision(check):
            def timed_after_a_review():  # a new review (not timed), then the check: the run's rows are unchanged
                step = steps - len(decided) % 3
                con.execute("INSERT INTO reviews (run_id, step, traj_idx, verdict, note, reviewer, reviewed_at) "
                            "VALUES (?, ?, ?, 'approve', 'bench', 'bench', now()::TIMESTAMP)", [one, step, len(decided) % 32])
                decided.append(step)
                started = time.perf_counter()
                check()
                return time.perf_counter() - started
            return timed_after_a_review
        timed["Review: evaluate_gate after a decision (new review; the run's rows kept)"] = after_a_decision(gate)
        timed["store_onset kept, after a decision"] = after_a_decision(lambda: kept_onset(con, one))
    for name, fn in timed.items():
        slow = any(k in name for k in SLOW)
        if "after a decision" in name:
            if only_slow or not skip_slow:
                fn()
                samples = [fn() for _ in range(repeat)]
                print(f"{np_percentile(samples, 95) * 1000:9.1f} ms p95 "
                      f"{np_percentile(samples, 50) * 1000:7.1f} ms median  {name}", flush=True)
            continue
        if only_slow and slow:
            fn()  # planning and cold pages
            samples = []
            for _ in range(repeat):
                started = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - started)
            print(f"{np_percentile(samples, 95) * 1000:9.1f} ms p95 "
                  f"{np_percentile(samples, 50) * 1000:7.1f} ms median  {name}", flush=True)
        elif not only_slow and not (skip_slow and slow):
            print(f"{_p95(fn, repeat) * 1000:9.1f} ms p95  {name}", flush=True)
    print(_load("after"), flush=True)


def np_percentile(samples: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(samples, q))


def slow(root: Path, before: Path, rounds: int, repeat: int) -> None:
    """The slow queries with `before`'s code and this checkout's, alternating, each in its own process."""
    for k in range(rounds):
        for label, code in (("before", before), ("after", HERE)):
            print(f"--- round {k + 1}, {label} ({code})", flush=True)
            subprocess.run([sys.executable, __file__, "queries", str(root), "--only-slow", "--repeat", str(repeat),
                            "--code", str(code)], check=True)


def ab(root: Path, before: Path, rounds: int) -> None:
    import numpy as np

    from agentrl.store import queries as now
    from agentrl.store.db import connect

    spec = importlib.util.spec_from_file_location("before_compare", before / "agentrl/store/queries/compare.py")
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    con = connect(root / "runs")
    runs = sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall())
    pairs = {  # as the pages asked before, and as they ask now
        "steps_for_runs": (lambda: old.steps_for_runs(con, runs), lambda: now.steps_for_runs(con, runs, max_points=1000)),
        "step_metric_for_runs": (lambda: old.step_metric_for_runs(con, runs, "kl"),
                                 lambda: now.step_metric_for_runs(con, runs, "kl", max_points=1000)),
        "action_probs_for_runs (thinned)": (lambda: old.action_probs_for_runs(con, runs, "known_high", max_steps=1000),
                                            lambda: now.action_probs_for_runs(con, runs, "known_high", max_steps=1000)),
        "reward_components_for_runs (thinned)": (lambda: old.reward_components_for_runs(con, runs, max_steps=1000),
                                                 lambda: now.reward_components_for_runs(con, runs, max_steps=1000)),
    }
    print(f"{len(runs)} runs picked; " + _load("before"), flush=True)
    for name, (a, b) in pairs.items():
        a(), b()
        wall, cpu = {a: [], b: []}, {a: [], b: []}
        for _ in range(rounds):
            for fn in (a, b):
                started, cpu_started = time.perf_counter(), time.process_time()
                rows = len(fn())
                wall[fn].append(time.perf_counter() - started)
                cpu[fn].append(time.process_time() - cpu_started)
        said = [f"p95 {np.percentile(wall[fn], 95) * 1000:.1f} ms, median {np.median(wall[fn]) * 1000:.1f} ms, "
                f"CPU {np.median(cpu[fn]) * 1000:.1f} ms ({len(fn()):,} rows)" for fn in (a, b)]
        print(f"{name}: before {said[0]} | after {said[1]}", flush=True)
    print(_load("after"), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["build", "queries", "ab", "slow"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--runs", type=int, default=None, help="build: only the first N runs")
    parser.add_argument("--steps", type=int, default=15_625, help="build: steps a run, when it writes the chunks")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--skip-slow", action="store_true", help="queries: leave out the Behaviours view, gate and onset")
    parser.add_argument("--only-slow", action="store_true", help="queries: only those, with p95 and median")
    parser.add_argument("--code", type=Path, default=HERE, help="the checkout whose agentrl is measured")
    parser.add_argument("--before", type=Path, help="ab: the checkout to compare against")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    if args.what == "build":
        build(args.dir, args.runs, args.steps)
    elif args.what == "queries":
        queries(args.dir, args.repeat, args.skip_slow, args.only_slow)
    elif args.what == "slow":
        if args.before is None:
            parser.error("slow needs --before CHECKOUT")
        slow(args.dir, args.before, args.rounds if args.rounds != 30 else 2, args.repeat if args.repeat != 30 else 20)
    else:
        if args.before is None:
            parser.error("ab needs --before CHECKOUT")
        ab(args.dir, args.before, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
