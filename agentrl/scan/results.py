"""A scanner over a stored run: every trajectory (or the ones asked for) read back from the store,
scanned, and the results written to `scan_results` in one bulk insert.

CLI `agentrl scan RUN_ID --scanner PATH:NAME` / validation -> **results** -> queries.scans -> store.
Results are kept per scanner version; a trajectory already scanned by the same version is not
scanned again unless asked (`rescan`), so a changed rule (a new version) reopens every result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from agentrl.record.rundir import utc_now
from agentrl.scan.scanner import ScanError, Scanner
from agentrl.scan.trajectory import Trajectory
from agentrl.store import queries


@dataclass(frozen=True)
class ScanSummary:
    scanner: str
    version: str
    scanned: int  # trajectories scanned now
    hits: int  # of them, hits
    kept: int  # already scanned by this version, not scanned again

    def as_dict(self) -> dict:
        return {"scanner": self.scanner, "version": self.version, "scanned": self.scanned, "hits": self.hits, "kept": self.kept}


def run_task(con, run_id: str):
    """The run's task through the contract, or None (a run of no task, or one that cannot be loaded)."""
    from agentrl.review.reviews import ReviewError, load_run_task

    run = queries.get_run(con, run_id)
    if run is None:
        return None
    try:
        return load_run_task(run)[1]
    except ReviewError:
        return None


def trajectories(con, run_id: str, task=None, keys: list[tuple[int, int]] | None = None) -> list[Trajectory]:
    """The run's stored trajectories as scanners read them."""
    frame = queries.scan_inputs(con, run_id, keys)
    out = []
    for row in frame.to_dict("records"):
        step_rewards = [float(r) for r in (row.pop("step_rewards") if row.get("step_rewards") is not None else []) if r is not None]
        out.append(Trajectory.of_row(row, task=task, step_rewards=step_rewards))
    return out


def scan_run(con, run_id: str, scanner: Scanner, task=None, keys: list[tuple[int, int]] | None = None,
             rescan: bool = False) -> ScanSummary:
    """Scan the run's trajectories (`keys`: only those) not yet scanned by this version; store them."""
    done = set() if rescan else queries.scanned_keys(con, run_id, scanner.name, scanner.version)
    every = trajectories(con, run_id, task, keys)
    todo = [t for t in every if (t.step, t.traj_idx) not in done]
    rows = {column: [] for column in queries.SCAN_COLUMNS}
    now = utc_now()
    hits = 0
    for trajectory in todo:
        try:
            result = scanner.scan(trajectory)
        except ScanError:
            raise
        except Exception as error:  # the user's rule: its failure is said in one line, with where
            raise ScanError(f"scanner {scanner.label} failed on step {trajectory.step} trajectory {trajectory.traj_idx}: "
                            f"{type(error).__name__}: {error}") from None
        hits += result.hit
        for column, value in zip(queries.SCAN_COLUMNS, (
                run_id, trajectory.step, trajectory.traj_idx, scanner.name, scanner.version,
                float(result.value), result.explanation or None, [int(r) for r in result.references],
                scanner.spec or None, now)):
            rows[column].append(value)
    if todo:
        queries.insert_scan_results(con, pa.table({
            "run_id": pa.array(rows["run_id"], pa.string()), "step": pa.array(rows["step"], pa.int32()),
            "traj_idx": pa.array(rows["traj_idx"], pa.int32()), "scanner": pa.array(rows["scanner"], pa.string()),
            "version": pa.array(rows["version"], pa.string()), "value": pa.array(rows["value"], pa.float64()),
            "explanation": pa.array(rows["explanation"], pa.string()), "refs": pa.array(rows["refs"], pa.list_(pa.int32())),
            "spec": pa.array(rows["spec"], pa.string()), "scanned_at": pa.array(rows["scanned_at"], pa.timestamp("us")),
        }))
    return ScanSummary(scanner.name, scanner.version, len(todo), hits, len(every) - len(todo))


def results_records(frame) -> list[dict]:
    """Stored results as JSON-ready dicts."""
    return json.loads(frame.assign(refs=frame["refs"].map(lambda r: [int(x) for x in r] if r is not None else []))
                      .to_json(orient="records", date_format="iso"))
