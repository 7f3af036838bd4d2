"""How fast the store ingests run chunks: `Ingestor.ingest()` over synthetic chunk files, against
a row-at-a-time `executemany` baseline on a small sample (the path DESIGN.md rules out).

Chunks -> **store**: builds `--chunks` trajectories chunks of `--rows` rows each (list and map
columns shaped like a tabular run's: states, actions, log-probabilities, advantages, reward
components), one steps chunk per trajectories chunk, in a throwaway runs directory laid out as a
run writes it, then times one ingest of everything and one idle tick after it.

    .venv/bin/python benchmarks/ingest_rate.py [--chunks 200] [--rows 5000] [--sample 2000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentrl.record.rows import TABLE_SCHEMAS, to_arrow  # noqa: E402
from agentrl.record.rundir import create_run_dir, iso, utc_now  # noqa: E402
from agentrl.store.db import apply_schema  # noqa: E402
from agentrl.store.ingest import Ingestor, connect  # noqa: E402

RUN_ID = "20260101-000000-bench-0000"
STATES = ["start", "known_low", "known_high", "approved", "recover", "done"]
ACTIONS = ["lookup", "refund", "request_approval", "deny", "escalate"]


def trajectory_rows(n: int, rng: random.Random) -> list[dict]:
    """`n` trajectory rows shaped like the tabular engine's (2-7 turns, 3-4 reward terms)."""
    rows = []
    for i in range(n):
        turns = rng.randint(2, 7)
        components = {"outcome": float(rng.random() < 0.8), "violation_penalty": -float(rng.random() < 0.1),
                      "duplicate_penalty": 0.0}
        if rng.random() < 0.5:
            components["veto"] = 0.0
        rows.append({
            "run_id": RUN_ID, "step": 1, "traj_idx": i % 32, "task_id": f"task-{i % 4}", "amount": rng.choice([20, 80]),
            "states": [rng.choice(STATES) for _ in range(turns)],
            "actions": [rng.choice(ACTIONS) for _ in range(turns)],
            "behavior_logps": [-rng.random() * 2 for _ in range(turns)],
            "advantages": [rng.gauss(0, 1) for _ in range(turns)],
            "reward": sum(components.values()), "components": components,
            "success": components["outcome"] == 1.0, "violation": components["violation_penalty"] < 0,
            "duplicate_effect": False, "eligible": True, "vetoed": False, "updated": rng.random() < 0.7,
        })
    return rows


def with_step(table: pa.Table, step: int) -> pa.Table:
    index = table.schema.get_field_index("step")
    return table.set_column(index, "step", pa.array([step] * table.num_rows, type=pa.int32()))


def build_runs_dir(root: Path, chunks: int, base: pa.Table) -> tuple[Path, int, int]:
    """Write the chunk files of one finished run; returns (runs_dir, files, rows)."""
    runs_dir = root / "runs"
    run = create_run_dir(runs_dir, RUN_ID, {"run_id": RUN_ID, "name": "bench", "kind": "tabular", "scorer": "outcome",
                                            "created_at": iso(utc_now()), "total_steps": chunks, "config": {}})
    (run.root / "trajectories").mkdir()
    (run.root / "steps").mkdir()
    rows = 0
    for part in range(chunks):
        step = part + 1
        pq.write_table(with_step(base, step), run.root / "trajectories" / f"part-{part:05d}.parquet")
        steps = to_arrow("steps", [{"run_id": RUN_ID, "step": step, "ts": utc_now(), "elapsed_s": float(step),
                                    "success_rate": 0.9, "violation_rate": 0.1, "duplicate_rate": 0.0,
                                    "mean_reward": 0.8, "vetoed": 0, "vetoed_updates": 0, "updates": 200,
                                    "clipped": 3, "clipped_by_epoch": [1, 2], "transitions": 160}])
        pq.write_table(steps, run.root / "steps" / f"part-{part:05d}.parquet")
        rows += base.num_rows + 1
    run.update_status(status="succeeded", ended_at=iso(utc_now()))
    return runs_dir, 2 * chunks, rows


def executemany_rate(db_path: Path, rows: list[dict]) -> float:
    """Rows/s inserting `rows` one parameter set at a time (the baseline)."""
    names = TABLE_SCHEMAS["trajectories"].names
    con = duckdb.connect(str(db_path))
    try:
        apply_schema(con)
        params = [[row.get(name) for name in names] for row in rows]
        sql = f"INSERT INTO trajectories ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        started = time.perf_counter()
        con.executemany(sql, params)
        seconds = time.perf_counter() - started
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == len(rows)
    finally:
        con.close()
    return len(rows) / seconds


def arrow_rate(db_path: Path, table: pa.Table) -> float:
    """Rows/s inserting the same rows as one Arrow table (the store's path, minus file reading)."""
    con = duckdb.connect(str(db_path))
    try:
        apply_schema(con)
        started = time.perf_counter()
        con.register("sample_rows", table)
        con.execute("INSERT INTO trajectories BY NAME SELECT * FROM sample_rows")
        seconds = time.perf_counter() - started
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == table.num_rows
    finally:
        con.close()
    return table.num_rows / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=200, help="trajectories chunks to ingest (plus as many steps chunks)")
    parser.add_argument("--rows", type=int, default=5000, help="rows per trajectories chunk")
    parser.add_argument("--sample", type=int, default=2000, help="rows for the executemany vs Arrow comparison")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary runs directory and print its path")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="agentrl-ingest-bench-"))
    try:
        base = to_arrow("trajectories", trajectory_rows(args.rows, rng))
        started = time.perf_counter()
        runs_dir, files, rows = build_runs_dir(root, args.chunks, base)
        write_s = time.perf_counter() - started
        on_disk = sum(p.stat().st_size for p in runs_dir.rglob("part-*.parquet"))

        con = connect(runs_dir)
        try:
            ingestor = Ingestor(con, runs_dir)
            started = time.perf_counter()
            report = ingestor.ingest()
            ingest_s = time.perf_counter() - started
            assert (report.files, report.rows, report.skipped) == (files, rows, []), report
            started = time.perf_counter()
            idle = ingestor.ingest()
            idle_s = time.perf_counter() - started
            assert idle.files == 0
            stored = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
            assert stored == args.chunks * args.rows, stored
        finally:
            con.close()

        sample_rows = trajectory_rows(args.sample, rng)
        many = executemany_rate(root / "baseline-executemany.duckdb", sample_rows)
        bulk = arrow_rate(root / "baseline-arrow.duckdb", to_arrow("trajectories", sample_rows))
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    mib = on_disk / 2**20
    print(f"agentrl ingest benchmark: {args.chunks} trajectories chunks x {args.rows:,} rows "
          f"+ {args.chunks} steps chunks ({mib:,.1f} MiB of Parquet, written in {write_s:.1f} s)")
    print()
    table = [
        ("Ingestor.ingest(), all chunks", f"{rows:,}", f"{files:,}", f"{ingest_s:.2f}", f"{rows / ingest_s:,.0f}", f"{files / ingest_s:,.0f}"),
        ("Ingestor.ingest(), idle tick after", "0", "0", f"{idle_s:.4f}", "-", "-"),
        (f"executemany, row at a time ({args.sample:,} rows)", f"{args.sample:,}", "-", f"{args.sample / many:.2f}", f"{many:,.0f}", "-"),
        (f"Arrow INSERT ... SELECT ({args.sample:,} rows)", f"{args.sample:,}", "-", f"{args.sample / bulk:.4f}", f"{bulk:,.0f}", "-"),
    ]
    header = ("path", "rows", "files", "seconds", "rows/s", "files/s")
    widths = [max(len(str(r[i])) for r in table + [header]) for i in range(len(header))]
    line = "  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header))
    print(line)
    print("-" * len(line))
    for row in table:
        print("  ".join(str(v).ljust(widths[0]) if i == 0 else str(v).rjust(widths[i]) for i, v in enumerate(row)))
    print()
    print(f"Arrow bulk insert is {bulk / many:,.0f}x row-at-a-time executemany on the same {args.sample:,} rows.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
