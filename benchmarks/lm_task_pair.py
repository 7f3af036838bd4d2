"""An outcome-vs-guarded LM pair on any task, measured: by default `lm-coding-outcome` and
`lm-coding-guarded` on the tiny coding model; `--task SPEC` runs the default language-model config
on that task (e.g. the calendar-booking example) with each scorer.

Launch -> **run process** x 2 -> chunks: starts the two runs as real, concurrent child processes
(`python -m agentrl train ...`, what the dashboard's launcher runs), waits for both, and reads
their chunks back. Reports, per run: wall time, median step time, the sampled success and
violation rates at the start and the end (means of the first and last 5 steps), vetoed rollouts
and the veto audit, the held-out (greedy) results, and the policy's distribution at each decision
point at step 0 and at the last step.

    .venv/bin/python benchmarks/lm_task_pair.py [--task SPEC] [--rounds N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from agentrl.record.rundir import list_run_dirs  # noqa: E402
from lm_pair import CHILD_ENV, read_table  # noqa: E402 - the refund pair's chunk reader and child environment

PRESETS = ("lm-coding-outcome", "lm-coding-guarded")


def mean(rows: list[dict], key: str) -> float | None:
    return statistics.mean(r[key] for r in rows) if rows else None


def summarise(run_root: Path, wall_s: float) -> dict:
    steps = sorted(read_table(run_root, "steps"), key=lambda r: r["step"])
    probs = read_table(run_root, "action_probs")
    evals = read_table(run_root, "evals")
    last = max((r["step"] for r in probs), default=0)
    points = sorted({r["state"] for r in probs})

    def distribution(step: int, point: str) -> dict[str, float]:
        return {r["action"]: round(r["prob"], 3) for r in probs if r["step"] == step and r["state"] == point}

    def held_out(split: str, step: int) -> str:
        rows = [r for r in evals if r["split"] == split and r["step"] == step]
        return f"{sum(r['success'] for r in rows)}/{len(rows)} succeed, {sum(r['violation'] for r in rows)} violate"

    eval_steps = sorted({r["step"] for r in evals if r["split"] == "held_out"})
    return {
        "status": json.loads((run_root / "status.json").read_text()).get("status"), "steps": len(steps), "wall_s": round(wall_s, 1),
        "step_time_median_s": statistics.median(dict(r["metrics"]).get("step_time", 0.0) for r in steps) if steps else None,
        "success_first5": mean(steps[:5], "success_rate"), "success_last5": mean(steps[-5:], "success_rate"),
        "violation_first5": mean(steps[:5], "violation_rate"), "violation_last5": mean(steps[-5:], "violation_rate"),
        "reward_first5": mean(steps[:5], "mean_reward"), "reward_last5": mean(steps[-5:], "mean_reward"),
        "success_curve": [round(r["success_rate"], 2) for r in steps], "violation_curve": [round(r["violation_rate"], 2) for r in steps],
        "vetoed": sum(r["vetoed"] for r in steps), "vetoed_updates": sum(r["vetoed_updates"] for r in steps),
        "held_out_start": held_out("held_out", 0) if eval_steps else None,
        "held_out_end": held_out("held_out", eval_steps[-1]) if eval_steps else None,
        "probes_end": held_out("probe", eval_steps[-1]) if eval_steps else None,
        "decision_points": {p: {"step 0": distribution(0, p), f"step {last}": distribution(last, p)} for p in points},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="override the presets' rounds")
    parser.add_argument("--task", help="a task spec: run the default language-model config on it instead of the coding presets")
    parser.add_argument("--keep", help="keep the runs in this directory instead of a temporary one")
    args = parser.parse_args(argv)
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="lm-task-pair-"))
    workdir.mkdir(parents=True, exist_ok=True)
    children, walls, started = {}, {}, time.monotonic()
    names = [f"task-{scorer}" for scorer in ("outcome", "guarded")] if args.task else list(PRESETS)
    for name in names:
        if args.task:
            config = {"kind": "trl", "name": name, "task": args.task, "scorer": name.removeprefix("task-")}
        else:
            config = json.loads((PROJECT_ROOT / "agentrl" / "config" / "presets" / f"{name}.json").read_text())
        if args.rounds:
            config["rounds"] = args.rounds
        (workdir / f"{name}.json").write_text(json.dumps(config))
        command = [sys.executable, "-m", "agentrl", "train", "--config", str(workdir / f"{name}.json"),
                   "--runs-dir", str(workdir / name), "--quiet"]
        log = open(workdir / f"{name}.log", "w")
        children[name] = subprocess.Popen(command, cwd=PROJECT_ROOT, env={**os.environ, **CHILD_ENV}, stdout=log, stderr=subprocess.STDOUT)
        print(f"started {name}: pid {children[name].pid}", flush=True)
    for name, process in children.items():
        code = process.wait()
        walls[name] = time.monotonic() - started
        print(f"{name}: exit {code} after {walls[name]:.1f}s (log {workdir / (name + '.log')})", flush=True)
    results = {}
    for name in names:
        runs = list_run_dirs(workdir / name)
        results[name] = summarise(runs[0].root, walls[name]) if runs else {"status": "no run"}
    for name, r in results.items():
        print(f"\n{name}: {r.get('status')} ({r.get('steps')} steps, {r.get('wall_s')} s wall, median step {r.get('step_time_median_s')} s)")
        for key in ("success", "violation", "reward"):
            print(f"  {key}: first 5 steps {r.get(key + '_first5')}, last 5 steps {r.get(key + '_last5')}")
        print(f"  vetoed {r.get('vetoed')}, vetoed updates (audit) {r.get('vetoed_updates')}")
        print(f"  held-out: start {r.get('held_out_start')}; end {r.get('held_out_end')}; probes at the end {r.get('probes_end')}")
        for point, dists in (r.get("decision_points") or {}).items():
            print(f"  {point}: {dists}")
    print("\n" + json.dumps(results, indent=2, default=str))
    return 0 if all(r.get("status") == "succeeded" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
