"""What `python -m agentrl bench` runs, in which order, and the file it writes.

CLI `bench` -> **report** -> scale (the measurements), then the quick scripts of `benchmarks/`
in subprocesses. Every figure is printed as it is measured, next to its target, and the whole
report goes to `docs/benchmarks.md` (or `--out`) with the machine it ran on: CPUs, memory,
Python, DuckDB and pyarrow versions, the date, and the load average before and after (the
figures of a busy machine say so).
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from agentrl.bench.scale import Figure, checkpoint_stalls, compaction, ingest_at_scale, live_tick, page_queries
from agentrl.bench.synth import Shape, run_id_of
from agentrl.paths import PROJECT_ROOT

BENCHMARKS_DIR = PROJECT_ROOT / "benchmarks"


@dataclass
class Plan:
    """How big each measurement is (`quick()`: a few seconds each, for a test)."""

    shape: Shape = field(default_factory=Shape)
    tick_sizes: tuple[int, ...] = (1_000, 15_625)
    repeat: int = 20  # samples per query for its p95
    checkpoint_ticks: int = 120
    scripts: dict[str, list[str]] = field(default_factory=lambda: {
        "ingest_rate.py": [], "write_path.py": [], "fleet.py": []})

    @classmethod
    def quick(cls) -> Plan:
        return cls(Shape(runs=4, steps=200, per_step=32, steps_per_commit=25), (100, 1_000), 5, 10, {
            "ingest_rate.py": ["--chunks", "10", "--rows", "500", "--sample", "200"],
            "write_path.py": ["--steps", "10", "--fresh-steps", "4", "--new-runs", "2"],
            "fleet.py": ["--rounds", "1", "--workers", "1", "2"]})


def machine() -> dict[str, str]:
    import duckdb
    import psutil
    import pyarrow

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "CPUs": str(os.cpu_count()),
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "Python": platform.python_version(),
        "DuckDB": duckdb.__version__,
        "pyarrow": pyarrow.__version__,
        "platform": platform.platform(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load average at start": " / ".join(f"{x:.2f}" for x in load),
    }


def _line(figure: Figure) -> str:
    target = f"   [target: {figure.target}]" if figure.target else ""
    verdict = f"  {figure.verdict}" if figure.verdict else ""
    return f"{figure.what}: {figure.value}{target}{verdict}"


def _table(figures: list[Figure]) -> list[str]:
    rows = ["| measured | figure | target | |", "| --- | --- | --- | --- |"]
    rows += [f"| {f.what} | {f.value} | {f.target} | {f.verdict} |" for f in figures]
    return rows


def run(plan: Plan, out: Path, work: Path | None = None, keep: bool = False, command: str = "",
        log=print) -> list[Figure]:
    """Every measurement of `plan`, printed as it goes and written to `out` (markdown)."""
    started = time.perf_counter()
    about = machine()
    root = Path(work) if work else Path(tempfile.mkdtemp(prefix="agentrl-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    sections: list[tuple[str, list[Figure], str]] = []

    def section(title: str, figures: list[Figure], note: str = "") -> None:
        sections.append((title, figures, note))
        log(f"\n{title}")
        for figure in figures:
            log(f"  {_line(figure)}")

    try:
        runs_dir = root / "runs"
        log(f"agentrl bench: {plan.shape.describe()} in {root}")
        figures, con, ingestor, maintenance = ingest_at_scale(runs_dir, plan.shape, log)
        try:
            section("Ingest at scale", figures, "Finished runs written as chunks (synthetic rows shaped like the tabular "
                    "engine's), then ingested by the dashboard's Ingestor with its checkpoint settings.")
            run_ids = [run_id_of(i) for i in range(plan.shape.runs)]
            section(f"Page queries, {len(run_ids)} runs picked on Compare (p95 of {plan.repeat})",
                    page_queries(con, runs_dir, run_ids, plan.repeat, plan.shape.steps),
                    "Compare's queries take every run; Review's one run. In parentheses, the same query with 2 runs.")
            section("Checkpoints off the ingest path",
                    checkpoint_stalls(con, ingestor, maintenance, runs_dir, plan.checkpoint_ticks),
                    "Live-sized commits on the big store; a tick's log shrinking means a checkpoint ran inside it.")
            section("Compaction", compaction(con, ingestor, runs_dir, run_ids, log),
                    "The runs of the ingest above, each compacted once the store holds all of it.")
        finally:
            con.close()
        section("The live tick as a run grows", live_tick(root, plan.tick_sizes),
                "One running run, every commit but the last already taken; medians of 30 ticks.")
    finally:
        if keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    scripts = run_scripts(plan.scripts, log)
    about["load average at the end"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    about["bench wall time"] = f"{time.perf_counter() - started:.0f} s"
    write_report(out, about, sections, scripts, command)
    log(f"\nwrote {out} ({about['bench wall time']})")
    return [f for _, figures, _ in sections for f in figures]


def run_scripts(scripts: dict[str, list[str]], log) -> list[tuple[str, str]]:
    """The quick benchmark scripts of the checkout, each as it prints itself."""
    done = []
    for name, args in scripts.items():
        path = BENCHMARKS_DIR / name
        if not path.is_file():
            done.append((f"benchmarks/{name}", "not run: this installation has no benchmarks/ folder"))
            continue
        command = [sys.executable, str(path), *args]
        shown = shlex.join(["python", f"benchmarks/{name}", *args])
        log(f"\n$ {shown}")
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        try:
            proc = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env=env)
            output = (proc.stdout + (f"\n(exit {proc.returncode}) {proc.stderr[-2000:]}" if proc.returncode else "")).strip()
        except subprocess.TimeoutExpired:
            output = "timed out after 600 s"
        log(output)
        done.append((shown, output))
    return done


def write_report(out: Path, about: dict[str, str], sections, scripts, command: str) -> None:
    lines = ["# agentrl benchmarks", "",
             f"Written by `{command or 'python -m agentrl bench'}`; every figure is next to its target "
             "(\"before\" figures are issue 15's, measured before these changes).", "", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in about.items()]
    for title, figures, note in sections:
        lines += ["", f"## {title}", ""]
        if note:
            lines += [note, ""]
        lines += _table(figures)
    if scripts:
        lines += ["", "## The quick benchmarks of benchmarks/", ""]
        for shown, output in scripts:
            lines += [f"`{shown}`", "", "```", output, "```", ""]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines).rstrip() + "\n")
