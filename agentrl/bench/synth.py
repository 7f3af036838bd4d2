"""Synthetic runs for the scale benchmark, written as a run writes them, but fast.

Bench -> **synth** -> chunks. A run of `steps` steps of `per_step` trajectories (the refund
presets' 32: 4 tasks x group 8), shaped like the tabular engine's rows (2-7 turns, list
columns of states, actions, log-probabilities and advantages, 3-4 reward components), with a
`steps` row, four action probabilities at one sensitive state and, every fifth step, four
held-out evaluations. Each commit holds `steps_per_commit` steps (a run at full speed flushes
about once a second: tens of steps a commit; a language-model run one). Commits are real
chunk commits (one Parquet file per table, marker last, numbered without gaps); what is
skipped to make 10 million rows in a minute is the fsync and the per-row Python checks, which
the benchmark does not measure. Every commit draws its own log-probabilities, advantages and
rewards (from as many distinct values as a tabular policy has: 36 state-action pairs, a group's
advantages), so what compression gains is what it would gain on a real run.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentrl.record.chunks import CHUNKS_DIR, commit_number_name, marker_name
from agentrl.record.rows import to_arrow
from agentrl.record.rundir import create_run_dir, iso, utc_now

STATES = ["start", "known_low", "known_high", "approved", "recover", "done"]
ACTIONS = ["lookup", "refund", "request_approval", "deny", "escalate", "finish"]
PROBED = ("finish", "lookup", "refund", "request_approval")  # the distribution recorded at known_high


@dataclass(frozen=True)
class Shape:
    runs: int = 20
    steps: int = 15_625
    per_step: int = 32
    steps_per_commit: int = 25

    @property
    def trajectories(self) -> int:
        return self.runs * self.steps * self.per_step

    def describe(self) -> str:
        return (f"{self.runs} runs x {self.steps:,} steps x {self.per_step} trajectories = {self.trajectories:,} trajectory "
                f"rows, {self.steps_per_commit} steps a commit")


def run_id_of(index: int) -> str:
    return f"20260101-{index:06d}-bench-{index:04x}"


def _template(run_id: str, shape: Shape, rng: random.Random) -> dict[str, pa.Table]:
    """One commit's tables for steps 1..steps_per_commit; later commits shift the step column."""
    k, n = shape.steps_per_commit, shape.per_step
    rows = []
    for s in range(1, k + 1):
        for i in range(n):
            turns = rng.randint(2, 7)
            violation = rng.random() < 0.1
            components = {"outcome": float(rng.random() < 0.8), "violation_penalty": -2.0 if violation else 0.0,
                          "step_cost": -0.05 * turns}
            if rng.random() < 0.5:
                components["veto"] = 0.0
            rows.append({
                "run_id": run_id, "step": s, "traj_idx": i, "task_id": f"train-{i % 4}", "amount": (20, 80)[i % 2],
                "states": [rng.choice(STATES) for _ in range(turns)], "actions": [rng.choice(ACTIONS) for _ in range(turns)],
                "behavior_logps": [-rng.random() * 2 for _ in range(turns)],
                "advantages": [rng.gauss(0, 1) for _ in range(turns)], "reward": sum(components.values()),
                "components": components, "success": components["outcome"] == 1.0, "violation": violation,
                "duplicate_effect": False, "eligible": True, "vetoed": False, "updated": rng.random() < 0.7,
            })
    now = utc_now()
    steps = [{"run_id": run_id, "step": s, "ts": now, "elapsed_s": float(s), "success_rate": 0.8, "violation_rate": 0.1,
              "duplicate_rate": 0.0, "mean_reward": 0.6, "vetoed": 0, "vetoed_updates": 0, "updates": 200, "clipped": 3,
              "clipped_by_epoch": [1, 2], "transitions": 150, "metrics": {"kl": 0.01, "entropy": 1.2}} for s in range(1, k + 1)]
    probs = [{"run_id": run_id, "step": s, "state": "known_high", "action": a, "prob": p}
             for s in range(1, k + 1) for a, p in zip(PROBED, (0.05, 0.1, 0.4, 0.45))]
    evals = [{"run_id": run_id, "step": s, "split": "held_out", "task_id": f"eval-{j}", "actions": ["lookup", "finish"],
              "success": True, "violation": False} for s in range(1, k + 1) if s % 5 == 0 for j in range(4)]
    hardware = [{"run_id": run_id, "ts": now, "step": k, "rss_bytes": 500_000_000, "cpu_percent": 95.0}]
    tables = {"trajectories": to_arrow("trajectories", rows), "steps": to_arrow("steps", steps),
              "action_probs": to_arrow("action_probs", probs), "hardware": to_arrow("hardware", hardware)}
    if evals:
        tables["evals"] = to_arrow("evals", evals)
    return tables


def _shifted(table: pa.Table, by: int) -> pa.Table:
    index = table.schema.get_field_index("step")
    return table.set_column(index, "step", pc.add(table.column("step"), pa.scalar(by, pa.int32())))


def _redrawn(table: pa.Table, rng: np.random.Generator) -> pa.Table:
    """A trajectories table with this commit's own log-probabilities, advantages and rewards."""
    for name, pool in (("behavior_logps", -rng.random(36) * 2), ("advantages", rng.normal(0, 1, 32))):
        column = table.column(name).combine_chunks()
        values = pool[rng.integers(0, len(pool), len(column.values))]
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pa.ListArray.from_arrays(column.offsets, pa.array(values, pa.float64())))
    reward = pc.add(table.column("reward"), pa.array(rng.choice([0.0, 0.0, 0.0, 0.5, -0.5], table.num_rows)))
    return table.set_column(table.schema.get_field_index("reward"), "reward", reward)


def write_commit(folder: Path, number: int, tables: dict[str, pa.Table]) -> int:
    """One commit: a Parquet file per table, the marker last. Returns its bytes."""
    prefix = commit_number_name(number)
    written = 0
    for table, data in tables.items():
        path = folder / f"{prefix}.{table}.parquet"
        pq.write_table(data, path)
        written += path.stat().st_size
    marker = folder / marker_name(number)
    marker.write_text(json.dumps({"tables": {t: d.num_rows for t, d in tables.items()}}))
    return written + marker.stat().st_size


def write_run(runs_dir: Path, index: int, shape: Shape, status: str = "succeeded", seed: int = 0) -> tuple[Path, int]:
    """A run folder with `shape.steps` steps of commits; returns (its folder, chunk bytes)."""
    run_id = run_id_of(index)
    run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": f"bench-{index}", "kind": "tabular",
                                            "scorer": ("outcome", "guarded")[index % 2], "created_at": iso(utc_now()),
                                            "total_steps": shape.steps, "config": {"kind": "tabular"}})
    folder = run.root / CHUNKS_DIR
    folder.mkdir()
    template = _template(run_id, shape, random.Random(seed * 1000 + index))
    draw = np.random.default_rng(seed * 1000 + index)
    start = to_arrow("action_probs", [{"run_id": run_id, "step": 0, "state": "known_high", "action": a, "prob": 0.25}
                                      for a in PROBED])
    written, number = 0, 0
    for first in range(0, shape.steps, shape.steps_per_commit):
        count = min(shape.steps_per_commit, shape.steps - first)
        tables = {t: _shifted(d, first) for t, d in template.items()}
        tables["trajectories"] = _redrawn(tables["trajectories"], draw)
        if count < shape.steps_per_commit:  # the last commit of a run whose length is not a multiple
            tables = {t: d.filter(pc.less_equal(d.column("step"), pa.scalar(shape.steps, pa.int32())))
                      for t, d in tables.items()}
            tables = {t: d for t, d in tables.items() if d.num_rows}
        if number == 0:
            tables["action_probs"] = pa.concat_tables([start, tables["action_probs"]])
        written += write_commit(folder, number, tables)
        number += 1
    run.update_status(status=status, step=shape.steps, pid=os.getpid() if status == "running" else None,
                      ended_at=None if status == "running" else iso(utc_now()))
    return run.root, written


def write_runs(runs_dir: Path, shape: Shape, seed: int = 0, workers: int = 2) -> int:
    """`shape.runs` finished runs (in `workers` processes: the writing is not what is measured);
    returns the bytes of chunks written."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    if workers <= 1 or shape.runs < 2:
        return sum(write_run(runs_dir, index, shape, seed=seed)[1] for index in range(shape.runs))
    # Forked before the benchmark starts any thread or opens the store: nothing to re-import.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(write_run, runs_dir, index, shape, "succeeded", seed) for index in range(shape.runs)]
        return sum(future.result()[1] for future in futures)


def chunk_bytes(runs_dir: Path) -> int:
    total = 0
    for root, _, files in os.walk(runs_dir):
        if Path(root).name == CHUNKS_DIR:
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def trajectories_per_second(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("nan")


def percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")
