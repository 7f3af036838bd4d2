"""The measurements behind `python -m agentrl bench` (issue 15, "ingest that stays fast as runs grow").

CLI `bench` -> **scale** -> synth, store. Each function measures one promise on real files and a
real DuckDB store and returns `Figure`s (the value next to its target):

- `ingest_at_scale`: 20 runs x 15,625 steps of chunks ingested as the dashboard does (checkpoints
  deferred), rows per second and the slowest transaction;
- `page_queries`: every Compare and Review query with 20 runs picked (and 2, to compare), p95;
- `compaction`: chunk bytes beside the store before and after compacting every run;
- `live_tick`: one running run at 1,000 and at 15,625 commits: an idle tick, a tick with one new
  commit, and what a full listing of its folder (every tick before) costs;
- `checkpoint_stalls`: small commits arriving tick after tick on the big store, with DuckDB's own
  checkpoints (inside a commit) and with ours (between ticks).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.bench.synth import Shape, chunk_bytes, percentile, run_id_of, write_runs
from agentrl.record.chunks import CHUNKS_DIR, marker_name, scan_commits
from agentrl.record.locations import LocalFolder
from agentrl.record.rows import to_arrow
from agentrl.record.rundir import DB_FILENAME, RunDir, create_run_dir, iso, utc_now
from agentrl.store.compact import compact_run
from agentrl.store.db import connect
from agentrl.store.ingest import Ingestor
from agentrl.store.maintenance import Maintenance, defer_checkpoints, wal_bytes

QUERY_BUDGET_MS = 100.0  # issue 30 (issue 15's was 300 ms)
INGEST_TARGET_ROWS_S = 150_000  # issue 30: the 10M-row backlog
MAX_POINTS = 1000  # what the Compare page asks for (agentrl.analysis.series.MAX_POINTS)


@dataclass
class Figure:
    what: str
    value: str
    target: str = ""
    ok: bool | None = None  # None: a figure without a target

    @property
    def verdict(self) -> str:
        return "" if self.ok is None else ("ok" if self.ok else "MISSED")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def store_bytes(runs_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(runs_dir).glob(f"{DB_FILENAME}*"))


def free_bytes(con) -> int:
    """Blocks of the database file DuckDB holds free (and reuses before it grows the file)."""
    row = con.execute("SELECT block_size * free_blocks FROM pragma_database_size()").fetchall()
    return int(row[0][0]) if row else 0


# --- 1. ingest at scale ---------------------------------------------------------------------------


def ingest_at_scale(runs_dir: Path, shape: Shape, log) -> tuple[list[Figure], object, Ingestor, Maintenance]:
    """Write `shape` as finished runs, then ingest all of it the way the dashboard does."""
    started = time.perf_counter()
    written = write_runs(runs_dir, shape)
    log(f"  wrote {shape.describe()}: {_mib(written)} of chunks in {time.perf_counter() - started:.0f}s")
    con = connect(runs_dir)
    ingestor = Ingestor(con, runs_dir, log=log)
    maintenance = Maintenance(ingestor, runs_dir, start=False, compact=False)  # defers DuckDB's own checkpoints
    started = time.perf_counter()
    files = rows = 0
    while True:
        report = ingestor.ingest()
        files, rows = files + report.files, rows + report.rows
        maintenance.maybe_checkpoint()
        if not report.files:
            break
    seconds = time.perf_counter() - started
    trajectories = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
    assert trajectories == shape.trajectories, (trajectories, shape.trajectories)
    log(f"  ingested {rows:,} rows from {files:,} commits in {seconds:.0f}s")
    checkpoints = maintenance.checkpoints
    figures = [
        Figure(f"ingest: {shape.describe()} ({rows:,} rows in all tables, {files:,} commits)",
               f"{rows / seconds:,.0f} rows/s ({trajectories / seconds:,.0f} trajectory rows/s; {seconds:.0f} s)",
               f">= {INGEST_TARGET_ROWS_S:,} rows/s (before: 95,800, issue 30)", rows / seconds >= INGEST_TARGET_ROWS_S),
        Figure(f"that backlog's {len(ingestor.transaction_seconds)} transactions (at most 2,000 commits or about "
               f"200,000 rows each), and its checkpoints between them",
               f"slowest transaction {_ms(max(ingestor.transaction_seconds))}; {len(checkpoints)} checkpoints, "
               f"{sum(c for c, _ in checkpoints):.1f} s in all", "before: up to 2,000 commits a transaction (one of 1.6M rows took 19 s at full size)"),
    ]
    return figures, con, ingestor, maintenance


# --- 2. page queries ------------------------------------------------------------------------------


def _p95(fn, repeat: int) -> float:
    started = time.perf_counter()
    fn()  # the first call pays for planning and cold pages
    if time.perf_counter() - started > 1.0:
        repeat = min(repeat, 3)  # seconds a call: a few samples say it as well
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return percentile(samples, 95)


def compare_page_queries(con, steps: int) -> dict:
    """Every query Compare makes, by name, each a function of the runs picked (as the page asks:
    long series thinned to the points a chart draws). `benchmarks/page_queries.py` times these too."""
    from agentrl.analysis import behaviours
    from agentrl.store import queries

    return {
        "steps_for_runs (thinned to 1,000 points, as the page asks)":
            lambda picked: queries.steps_for_runs(con, picked, max_points=MAX_POINTS),
        "sensitive_states_for_runs": lambda picked: queries.sensitive_states_for_runs(con, picked),
        "action_probs_for_runs (thinned to 1,000 steps, as the page asks)":
            lambda picked: queries.action_probs_for_runs(con, picked, "known_high", max_steps=MAX_POINTS),
        "action_probs_at_step": lambda picked: queries.action_probs_at_step(con, picked, "known_high", steps // 2),
        "clipped_by_epoch_for_runs": lambda picked: queries.clipped_by_epoch_for_runs(con, picked),
        "reward_components_for_runs (thinned to 1,000 steps, as the page asks)":
            lambda picked: queries.reward_components_for_runs(con, picked, max_steps=MAX_POINTS),
        "held_out_for_runs": lambda picked: queries.held_out_for_runs(con, picked),
        "totals_for_runs": lambda picked: queries.totals_for_runs(con, picked),
        "step_metric_names_for_runs": lambda picked: queries.step_metric_names_for_runs(con, picked),
        "step_metric_for_runs (thinned to 1,000 points, as the page asks)":
            lambda picked: queries.step_metric_for_runs(con, picked, "kl", max_points=MAX_POINTS),
        "Behaviours: behaviour_step_shares (thinned to 1,000 steps, 8 behaviours and the rest lumped, as the page asks)":
            lambda picked: queries.behaviour_step_shares(con, picked, max_steps=MAX_POINTS, keep=8),
        "Behaviours: behaviour_tables of the picked runs, read at once as the page does (last 5 steps)":
            lambda picked: behaviours.behaviour_tables(con, picked),
        "found divergence of the first two runs (last 5 steps)":
            lambda picked: behaviours.run_divergence(con, picked[0], picked[1 % len(picked)]),
    }


def review_page_queries(con, runs_dir: Path, one: str, steps: int) -> dict:
    """Every query Review makes for run `one` of `steps` steps, by name, the whole gate included."""
    from agentrl.review import gate
    from agentrl.store import queries

    return {
        "newest_pair": lambda: queries.newest_pair(con),
        "step_range": lambda: queries.step_range(con, one),
        "trajectory_task_ids": lambda: queries.trajectory_task_ids(con, one),
        "find_trajectories (default: top 10, last 3 steps)": lambda: queries.find_trajectories(
            con, one, step_min=steps - 2, step_max=steps, limit=10),
        "find_trajectories (whole run, violations, top 50)": lambda: queries.find_trajectories(
            con, one, flags={"violation": True}, limit=50),
        "find_trajectories (whole run, unreviewed, lowest first)": lambda: queries.find_trajectories(
            con, one, verdict="unreviewed", descending=False, limit=50),
        "trajectory": lambda: queries.trajectory(con, one, steps, 5),
        "review_history": lambda: queries.review_history(con, one, steps, 5),
        "top_trajectories (gate sample)": lambda: queries.top_trajectories(con, one, 5, 3),
        "reviews_for_run": lambda: queries.reviews_for_run(con, one),
        "promotions": lambda: queries.promotions(con, one),
        "evaluate_gate (all checks; the onset kept since the last change)": lambda: gate.evaluate_gate(con, runs_dir, one),
        "behaviour_representatives (grouped by behaviour, last 3 steps)": lambda: queries.behaviour_representatives(
            con, one, step_min=steps - 2, step_max=steps),
        "behaviour_members (one behaviour, last 3 steps)": lambda: queries.behaviour_members(
            con, one, "lookup > request_approval > refund > finish", since_step=steps - 3),
    }


def page_queries(con, runs_dir: Path, run_ids: list[str], repeat: int, steps: int) -> list[Figure]:
    """Every query Compare and Review make, with all of `run_ids` picked on Compare."""
    from agentrl.store import queries

    one = run_ids[1]
    pair = run_ids[:2]
    con.execute(
        """INSERT INTO reviews (run_id, step, traj_idx, verdict, note, reviewer, reviewed_at)
           SELECT ?, ? - (i % 3), i % 32, CASE WHEN i % 7 = 0 THEN 'reject' ELSE 'approve' END, 'bench', 'bench',
                  now()::TIMESTAMP FROM range(0, 200) t(i)""", [one, steps])
    compare = compare_page_queries(con, steps)
    review = review_page_queries(con, runs_dir, one, steps)
    target = f"<= {QUERY_BUDGET_MS:.0f} ms p95"
    figures = []
    for name, fn in compare.items():
        many = _p95(lambda: fn(run_ids), repeat)
        two = _p95(lambda: fn(pair), repeat)
        figures.append(Figure(f"Compare: {name}, {len(run_ids)} runs picked (2 runs: {_ms(two)})", _ms(many), target,
                              many * 1000 <= QUERY_BUDGET_MS))
    for name, fn in review.items():
        ms = _p95(fn, repeat)
        figures.append(Figure(f"Review: {name}", _ms(ms), target, ms * 1000 <= QUERY_BUDGET_MS))
    from agentrl.monitor import store_onset
    from agentrl.monitor.kept import forget, kept_onset
    from agentrl.review import gate

    ms = _p95(lambda: store_onset(con, one), repeat)
    figures.append(Figure(f"store_onset of one run of {steps:,} steps, computed (what a page or the gate pays once "
                          "after the run's rows, reviews or fixtures changed)", _ms(ms), target, ms * 1000 <= QUERY_BUDGET_MS))
    ms = _p95(lambda: kept_onset(con, one), repeat)
    figures.append(Figure("Compare, Runs, Live and the gate: kept_onset of that run, unchanged since "
                          "(agentrl.monitor.kept)", _ms(ms), target, ms * 1000 <= QUERY_BUDGET_MS))
    ms = _p95(lambda: (forget(), gate.evaluate_gate(con, runs_dir, one)), repeat)
    figures.append(Figure("Review: evaluate_gate, its onset computed (the first check after a change)", _ms(ms), target,
                          ms * 1000 <= QUERY_BUDGET_MS))
    # For reference, not on any page any more: the whole series of every picked run.
    full = _p95(lambda: queries.reward_components_for_runs(con, run_ids), max(1, repeat // 4))
    figures.append(Figure(f"(reference) reward_components_for_runs, every step of {len(run_ids)} runs",
                          _ms(full), "before: 2.0-2.7 s (issue 15)"))
    return figures


# --- 3. compaction --------------------------------------------------------------------------------


def compaction(con, ingestor: Ingestor, runs_dir: Path, run_ids: list[str], log) -> list[Figure]:
    while ingestor.ingest().files:  # the tick that finds nothing: every run drained
        pass
    folders = [Path(runs_dir) / run_id for run_id in run_ids]
    before = sum(chunk_bytes(folder) for folder in folders)
    rows_before = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
    started = time.perf_counter()
    reports = [compact_run(ingestor, RunDir(folder)) for folder in folders]
    seconds = time.perf_counter() - started
    skipped = [r.summary() for r in reports if r.number is None]
    assert not skipped, skipped
    after = sum(chunk_bytes(folder) for folder in folders)
    again = Ingestor(con, runs_dir, log=log).ingest()  # a fresh Ingestor takes nothing twice
    assert again.files == 0 and con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == rows_before
    con.execute("CHECKPOINT")
    log(f"  compacted {len(reports)} runs in {seconds:.0f}s")
    commits = sum(r.commits for r in reports)
    return [
        Figure(f"chunks beside the store, {len(reports)} finished runs ({commits:,} commits -> {len(reports)})",
               f"{_mib(before)} -> {_mib(after)} after compaction (the store: {_mib(store_bytes(runs_dir))}, of which "
               f"{_mib(free_bytes(con))} free blocks DuckDB reuses)",
               "before: 1.0 GB of chunks kept beside a 916 MB store (issue 15)"),
        Figure("compaction time", f"{seconds:.0f} s for {len(reports)} runs ({seconds / max(1, len(reports)):.1f} s a run)"),
    ]


# --- 4. the live tick -----------------------------------------------------------------------------


def _blobs(run_id: str, rows: int) -> dict[str, bytes]:
    tables = {
        "trajectories": to_arrow("trajectories", [{"run_id": run_id, "step": 1, "traj_idx": i, "task_id": "t",
                                                   "states": ["start", "known_high"], "actions": ["lookup", "refund"],
                                                   "reward": 1.0, "components": {"outcome": 1.0}} for i in range(rows)]),
        "steps": to_arrow("steps", [{"run_id": run_id, "step": 1, "ts": utc_now()}]),
        "action_probs": to_arrow("action_probs", [{"run_id": run_id, "step": 1, "state": "known_high", "action": a,
                                                   "prob": 0.25} for a in "abcd"]),
    }
    out = {}
    for table, data in tables.items():
        sink = pa.BufferOutputStream()
        pq.write_table(data, sink)
        out[f"{table}.parquet"] = sink.getvalue().to_pybytes()
    out["commit"] = ('{"tables": {"trajectories": %d, "steps": 1, "action_probs": 4}}' % rows).encode()
    return out


def _write_blobs(folder: Path, number: int, blobs: dict[str, bytes]) -> None:
    prefix = f"{number:08d}"
    for suffix, data in blobs.items():
        if suffix != "commit":
            (folder / f"{prefix}.{suffix}").write_bytes(data)
    (folder / marker_name(number)).write_bytes(blobs["commit"])  # last


def live_tick(work: Path, sizes: tuple[int, ...], ticks: int = 30) -> list[Figure]:
    """A running run with N one-step commits, all but the last taken: what each tick costs."""
    figures = []
    medians = {}
    for n in sizes:
        runs_dir = work / f"tick-{n}"
        run_id = run_id_of(900)
        run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": "live", "kind": "tabular", "scorer": "outcome",
                                                "created_at": iso(utc_now()), "total_steps": n, "config": {}})
        run.update_status(status="running", pid=os.getpid())
        folder = run.root / CHUNKS_DIR
        folder.mkdir()
        blobs = _blobs(run_id, 32)
        for number in range(n):
            _write_blobs(folder, number, blobs)
        con = connect(runs_dir)
        try:
            con.execute("""INSERT INTO ingested_files SELECT ? || '/chunks/' || lpad(i::VARCHAR, 8, '0') || '.commit',
                           'trajectories,steps,action_probs', ?, 37, now()::TIMESTAMP FROM range(0, ?) t(i)""",
                        [run_id, run_id, n - 1])  # as if the store had taken every commit but the last
            ingestor = Ingestor(con, runs_dir)
            assert ingestor.ingest().files == 1  # the first look lists the folder (once)
            idle = []
            for _ in range(ticks):
                started = time.perf_counter()
                assert ingestor.ingest().files == 0
                idle.append(time.perf_counter() - started)
            one = []
            for k in range(ticks):
                _write_blobs(folder, n + k, blobs)
                started = time.perf_counter()
                assert ingestor.ingest().files == 1
                one.append(time.perf_counter() - started)
            taken = ingestor.taken_markers(run_id)
            listing = []
            for _ in range(5):  # what every tick paid before: list the whole folder
                started = time.perf_counter()
                scan_commits(LocalFolder(folder), skip=taken)
                listing.append(time.perf_counter() - started)
        finally:
            con.close()
        medians[n] = (statistics.median(idle), statistics.median(one), statistics.median(listing))
    for n, (idle, one, listing) in medians.items():
        figures.append(Figure(f"live tick, a running run at {n:,} steps: idle / one new commit",
                              f"{_ms(idle)} / {_ms(one)} (a full listing of its folder: {_ms(listing)})",
                              "before: 45 ms at 1,000 steps, 677 ms at 15,625 (issue 15)"))
    small, large = medians[min(sizes)], medians[max(sizes)]
    figures.append(Figure(f"idle tick at {max(sizes):,} steps against {min(sizes):,}", f"{large[0] / small[0]:.1f}x",
                          "does not grow with the steps taken (< 3x)", large[0] / small[0] < 3 or large[0] < 0.005))
    return figures


# --- 5. checkpoints off the ingest path -------------------------------------------------------------


def checkpoint_stalls(con, ingestor: Ingestor, maintenance: Maintenance, runs_dir: Path, ticks: int,
                      per_tick: int = 10, rows: int = 200) -> list[Figure]:
    """Small commits of `per_tick` live runs landing between ticks, on the big store, first with
    DuckDB's own checkpoint (16 MiB, inside the commit that crosses it), then with ours."""
    results = {}
    for variant in ("DuckDB's own checkpoints", "deferred, checkpointed between ticks"):
        base = 1000 if variant.startswith("DuckDB") else 2000
        if variant.startswith("DuckDB"):
            con.execute("SET checkpoint_threshold = '16MiB'")  # DuckDB's default
        else:
            defer_checkpoints(con)
        con.execute("CHECKPOINT")
        folders = []
        for r in range(per_tick):
            run_id = run_id_of(base + r)
            run = create_run_dir(runs_dir, run_id, {"run_id": run_id, "name": "live", "kind": "tabular",
                                                    "scorer": "outcome", "created_at": iso(utc_now()), "config": {}})
            run.update_status(status="running", pid=os.getpid())
            (run.root / CHUNKS_DIR).mkdir()
            folders.append((run, _blobs(run_id, rows)))
        ingestor.ingest()
        seconds, shrinks, before = [], 0, wal_bytes(con)
        maintenance.checkpoints.clear()
        for tick in range(ticks):
            for run, blobs in folders:
                _write_blobs(run.root / CHUNKS_DIR, tick, blobs)
            started = time.perf_counter()
            assert ingestor.ingest().files == per_tick
            seconds.append(time.perf_counter() - started)
            now = wal_bytes(con)
            shrinks += now < before  # the log shrank inside the tick: a checkpoint ran in a commit
            before = now
            if not variant.startswith("DuckDB"):
                maintenance.maybe_checkpoint()
                before = wal_bytes(con)
        for run, _ in folders:
            run.update_status(status="succeeded", ended_at=iso(utc_now()))
        ingestor.ingest()
        results[variant] = (max(seconds), percentile(seconds, 50), shrinks, list(maintenance.checkpoints))
    figures = []
    for variant, (worst, median, shrinks, ours) in results.items():
        extra = f"; {len(ours)} checkpoints between ticks, longest {_ms(max(s for s, _ in ours))}" if ours else ""
        figures.append(Figure(f"{ticks} ticks of {per_tick} commits x {rows + 5} rows on the big store, {variant}",
                              f"slowest tick {_ms(worst)}, median {_ms(median)}; {shrinks} ticks checkpointed inside "
                              f"a commit{extra}", "no checkpoint inside a tick" if "deferred" in variant else
                              "before: one tick stalled 14.9 s (issue 15)",
                              shrinks == 0 if "deferred" in variant else None))
    return figures
