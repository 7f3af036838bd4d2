"""How long a finished step takes to reach the store: run -> chunk -> DuckDB, measured end to end.

Run process -> **chunks** -> **store**: starts `python -m agentrl train --preset refund-outcome
--step-delay 0.2` as a child process (through `agentrl.cli.main`, with its ChunkWriter wrapped
only to report its write timings at exit), while this process holds the store as the dashboard
does and ingests every 0.25 s with `BackgroundIngest`, the dashboard's own loop. Reports
  (a) the chunk write latency: each file's write + fsync + rename, and each whole flush;
  (b) the delay from a step finishing (its `steps.ts`) to its row being visible in DuckDB,
      split at the moment its chunk appeared on disk.

    .venv/bin/python benchmarks/flush_latency.py [--step-delay 0.2] [--rounds 30] [--interval 0.25]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from agentrl.record.chunks import chunk_files  # noqa: E402
from agentrl.config import load_preset  # noqa: E402
from agentrl.record.rundir import list_run_dirs, utc_now  # noqa: E402
from agentrl.store.ingest import BackgroundIngest, Ingestor, connect  # noqa: E402

LIVE_PAGE_REFRESH_S = 1.0  # the Live page's fragment reruns every second

# The child: the real CLI, with ChunkWriter timings written to argv[1] when the run ends.
CHILD = """
import json, sys, time
import agentrl.record.run as record_run
from agentrl.record.chunks import ChunkWriter
from agentrl.cli import main

flushes = []

class TimedWriter(ChunkWriter):
    def flush(self, *args, **kwargs):
        started = time.perf_counter()
        written = super().flush(*args, **kwargs)
        if written:
            flushes.append((time.perf_counter() - started, 1))
        return written

    def close(self):
        super().close()
        with open(sys.argv[1], "w") as out:
            json.dump({"files": self.flush_latencies_s, "flushes": flushes}, out)

record_run.ChunkWriter = TimedWriter
sys.exit(main(sys.argv[2:]))
"""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def row(label: str, seconds: list[float]) -> tuple[str, ...]:
    if not seconds:
        return (label, "0", "-", "-", "-")
    ms = [s * 1000 for s in seconds]
    return (label, str(len(ms)), f"{percentile(ms, 50):.0f}", f"{percentile(ms, 95):.0f}", f"{max(ms):.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="refund-outcome")
    parser.add_argument("--step-delay", type=float, default=0.2, help="seconds the run pauses after each round")
    parser.add_argument("--rounds", type=int, help="override the preset's rounds (passed as a config file)")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between ingest ticks (the dashboard's 0.25)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="agentrl-flush-bench-"))
    runs_dir = root / "runs"
    runs_dir.mkdir()
    timings_path = root / "writer-timings.json"
    source = ["--preset", args.preset]
    if args.rounds:
        config_path = root / "config.json"
        config_path.write_text(load_preset(args.preset, rounds=args.rounds).to_json())
        source = ["--config", str(config_path)]
    command = [sys.executable, "-c", CHILD, str(timings_path), "train", *source,
               "--step-delay", str(args.step_delay), "--runs-dir", str(runs_dir), "--quiet"]

    con = connect(runs_dir)  # held for the whole run, as the dashboard holds it
    first_seen: dict[int, datetime] = {}
    try:
        ingestor = Ingestor(con, runs_dir, log=lambda message: print(message, file=sys.stderr))
        cursor = con.cursor()

        def tick() -> None:
            ingestor.ingest()
            seen_at = utc_now()
            for (step,) in cursor.execute("SELECT step FROM steps").fetchall():
                first_seen.setdefault(step, seen_at)

        proc = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        loop = BackgroundIngest(tick, interval=args.interval)
        try:
            output, _ = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            # One more tick after the run ended, so its last flush is measured the same way.
            time.sleep(args.interval)
            loop.stop()
        if proc.returncode != 0:
            print(output, file=sys.stderr)
            print(f"the run exited with {proc.returncode}", file=sys.stderr)
            return 1
        if loop.last_error:
            print(f"ingest loop error: {loop.last_error}", file=sys.stderr)
            return 1
        tick()
        (run,) = list_run_dirs(runs_dir)
        step_ts = dict(con.execute("SELECT step, ts FROM steps WHERE run_id = ?", [run.run_id]).fetchall())
        timings = json.loads(timings_path.read_text())
        # When each step's chunk appeared: the steps file's mtime (set by its write, kept by the rename).
        on_disk: dict[int, datetime] = {}
        for path in chunk_files(run.root, "steps"):
            appeared = datetime.fromtimestamp(os.stat(path).st_mtime, timezone.utc).replace(tzinfo=None)
            for step in pq.read_table(path, columns=["step"]).column("step").to_pylist():
                on_disk[step] = appeared
    finally:
        con.close()
        shutil.rmtree(root, ignore_errors=True)

    steps = sorted(step_ts)
    to_disk = [(on_disk[s] - step_ts[s]).total_seconds() for s in steps]
    to_db = [(first_seen[s] - on_disk[s]).total_seconds() for s in steps]
    end_to_end = [(first_seen[s] - step_ts[s]).total_seconds() for s in steps]
    flush_s = [seconds for seconds, _ in timings["flushes"]]

    print(f"agentrl run -> store latency: {args.preset}, {len(steps)} steps, --step-delay {args.step_delay}, "
          f"chunk flush every 1 s, ingest tick every {args.interval} s")
    print()
    header = ("measure", "n", "median ms", "p95 ms", "max ms")
    table = [
        row("(a) chunk file write + fsync + rename", timings["files"]),
        row("(a) whole flush (every table with rows)", flush_s),
        row("(b) step finished -> chunk on disk", to_disk),
        row("(b) chunk on disk -> row in DuckDB", to_db),
        row("(b) step finished -> row in DuckDB", end_to_end),
    ]
    widths = [max(len(r[i]) for r in table + [header]) for i in range(len(header))]
    line = "  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header))
    print(line)
    print("-" * len(line))
    for r in table:
        print("  ".join(v.ljust(widths[0]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(r)))
    print()
    worst = max(end_to_end)
    print(f"The Live page reruns every {LIVE_PAGE_REFRESH_S:.0f} s, which adds up to {LIVE_PAGE_REFRESH_S:.0f} s more: "
          f"a step is on screen at most about {worst + LIVE_PAGE_REFRESH_S:.1f} s after it finished in this run "
          f"(median about {percentile(end_to_end, 50) + LIVE_PAGE_REFRESH_S / 2:.1f} s with the refresh's average 0.5 s).")
    print("Disk timestamps are file mtimes (written just before the rename); all times are one machine's UTC clock.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
