"""The LM comparison pair, measured: outcome-only and guarded GRPO runs of the tiny model, at once.

Launch -> **run process** x 2 -> chunks: starts the two LM preset configs as real, concurrent
child processes (one torch thread each, so the pair fits a 2-core machine), waits for both, and
reads their chunks back. Reports, per run: wall time, median optimiser-step time, peak RSS
against the budget estimate, vetoed rollouts and the veto audit (vetoed rows that got gradient,
must be 0), held-out results at the start and the end, and the sensitive-state distribution
p(refund | known_high) and p(request_approval | known_high) at step 0 and at the last step.

    .venv/bin/python benchmarks/lm_pair.py [--rounds N] [--keep DIR]

Each run is `python -m agentrl train --config FILE`, as the dashboard's launcher starts it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from agentrl.record.chunks import chunk_files
from agentrl.record.rundir import list_run_dirs

PRESETS = ("lm-refund-outcome", "lm-refund-guarded")
# The values proposed for the two presets (agentrl/presets/<name>.json), used when the preset
# files are not there yet.
PAIR = {
    "lm-refund-outcome": {
        "name": "lm-refund-outcome", "kind": "trl", "scorer": "outcome", "rounds": 60, "group_size": 8, "lr": 0.001,
        "eval_every": 10, "lm": {"tasks_per_step": 4, "max_completion_length": 128, "max_tool_calls": 8},
    },
    "lm-refund-guarded": {
        "name": "lm-refund-guarded", "kind": "trl", "scorer": "guarded", "rounds": 60, "group_size": 8, "lr": 0.001,
        "eval_every": 10, "lm": {"tasks_per_step": 4, "max_completion_length": 128, "max_tool_calls": 8},
    },
}
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def preset_values(name: str) -> dict:
    path = PROJECT_ROOT / "agentrl" / "presets" / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else dict(PAIR[name])


def read_table(run_root: Path, table: str) -> list[dict]:
    files = chunk_files(run_root, table)
    if not files:
        return []
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()


def summarise(run_root: Path, wall_s: float) -> dict:
    steps = sorted(read_table(run_root, "steps"), key=lambda r: r["step"])
    probs = read_table(run_root, "action_probs")
    evals = [r for r in read_table(run_root, "evals") if r["split"] == "held_out"]  # not the exploit probes
    budgets = read_table(run_root, "budgets")
    status = json.loads((run_root / "status.json").read_text())
    step_times = [dict(r["metrics"]).get("step_time") for r in steps]
    gaps = [b["elapsed_s"] - a["elapsed_s"] for a, b in itertools.pairwise(steps)]
    last = max((r["step"] for r in probs), default=0)

    def p(step: int, action: str) -> float | None:
        rows = [r["prob"] for r in probs if r["step"] == step and r["state"] == "known_high" and r["action"] == action]
        return rows[0] if rows else None

    def held_out(step: int) -> str:
        rows = [r for r in evals if r["step"] == step]
        return f"{sum(r['success'] for r in rows)}/{len(rows)} succeed, {sum(r['violation'] for r in rows)} violate"

    estimate = {r["component"]: r["bytes"] for r in budgets if r["source"] == "estimate"}
    measured = {r["component"]: r["bytes"] for r in budgets if r["source"] == "measured"}
    eval_steps = sorted({r["step"] for r in evals})
    return {
        "status": status.get("status"), "steps": len(steps), "wall_s": wall_s,
        "step_time_median_s": statistics.median([t for t in step_times if t is not None]) if steps else None,
        "step_gap_median_s": statistics.median(gaps) if gaps else None,
        "train_s": steps[-1]["elapsed_s"] if steps else None,
        "peak_rss_bytes": measured.get("process_peak_rss"), "estimate_total_bytes": estimate.get("total"),
        "vetoed": sum(r["vetoed"] for r in steps), "vetoed_updates": sum(r["vetoed_updates"] for r in steps),
        "updates": sum(r["updates"] for r in steps),
        "violation_rate_last5": statistics.mean(r["violation_rate"] for r in steps[-5:]) if steps else None,
        "success_rate_last5": statistics.mean(r["success_rate"] for r in steps[-5:]) if steps else None,
        "p_refund_start": p(0, "refund"), "p_approval_start": p(0, "request_approval"),
        "p_refund_end": p(last, "refund"), "p_approval_end": p(last, "request_approval"),
        "held_out_start": held_out(0) if eval_steps else None, "held_out_end": held_out(eval_steps[-1]) if eval_steps else None,
        "last_step": last,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="override the presets' rounds")
    parser.add_argument("--keep", help="keep the runs in this directory instead of a temporary one")
    args = parser.parse_args(argv)
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="lm-pair-"))
    workdir.mkdir(parents=True, exist_ok=True)
    children = {}
    try:
        for name in PRESETS:
            values = preset_values(name)
            if args.rounds:
                values["rounds"] = args.rounds
            config_path = workdir / f"{name}.json"
            config_path.write_text(json.dumps(values, indent=2))
            runs_dir = workdir / name
            # The command the dashboard's launcher runs.
            command = [sys.executable, "-m", "agentrl", "train", "--config", str(config_path), "--runs-dir", str(runs_dir)]
            log = open(workdir / f"{name}.log", "w")
            started = time.monotonic()
            process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **CHILD_ENV})
            children[name] = (process, started, runs_dir, log)
            print(f"started {name}: pid {process.pid}, {values['rounds']} steps", flush=True)
        walls = {}
        for name, (process, started, runs_dir, log) in children.items():
            code = process.wait()
            walls[name] = time.monotonic() - started
            log.close()
            print(f"{name}: exit {code} after {walls[name]:.1f}s (log {workdir / (name + '.log')})", flush=True)
        results = {}
        for name, (_, _, runs_dir, _) in children.items():
            runs = list_run_dirs(runs_dir)
            results[name] = summarise(runs[0].root, walls[name]) if runs else {"status": "no run folder"}
    finally:
        for process, *_ in children.values():
            if process.poll() is None:
                process.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    def fmt(value, spec=".3f"):
        return "-" if value is None else format(value, spec)

    for name, r in results.items():
        print(f"\n{name}: {r.get('status')} ({r.get('steps')} steps)")
        if "wall_s" not in r:
            continue
        print(f"  wall {r['wall_s']:.1f}s (training {fmt(r['train_s'], '.1f')}s); step time median {fmt(r['step_time_median_s'])}s "
              f"(step to step, with telemetry and evals: {fmt(r['step_gap_median_s'])}s)")
        rss, est = r["peak_rss_bytes"], r["estimate_total_bytes"]
        print(f"  peak RSS {fmt(rss and rss / 2**20, '.0f')} MiB; budget estimate (run total, excluding the OS reserve) "
              f"{fmt(est and est / 2**20, '.1f')} MiB")
        print(f"  vetoed rollouts {r['vetoed']}, vetoed updates (audit) {r['vetoed_updates']}, updated rollouts {r['updates']}")
        print(f"  sampled success {fmt(r['success_rate_last5'], '.2f')}, violation {fmt(r['violation_rate_last5'], '.2f')} (mean of the last 5 steps)")
        print(f"  p(refund | known_high): step 0 {fmt(r['p_refund_start'])} -> step {r['last_step']} {fmt(r['p_refund_end'])}")
        print(f"  p(request_approval | known_high): step 0 {fmt(r['p_approval_start'])} -> step {r['last_step']} {fmt(r['p_approval_end'])}")
        print(f"  held-out: start {r['held_out_start']}; end {r['held_out_end']}")
    print("\n" + json.dumps(results, indent=2, default=str))
    return 0 if all(r.get("status") == "succeeded" for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
