"""Scanner results (`schemas/scans.sql`): the rows a scanner reads, its stored results, the labels
review decisions give, and hit rates per step.

agentrl.scan -> **queries.scans** -> store. Results are written in bulk from an Arrow table and
replace an earlier scan of the same (run, trajectory, scanner, version). A trajectory's label is
its latest verdict (reject: positive, approve: negative), and any exploit fixture made from it is
a positive whatever came after.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from agentrl.store.db import Con

SCAN_COLUMNS = ("run_id", "step", "traj_idx", "scanner", "version", "value", "explanation", "refs", "spec", "scanned_at")


def scan_inputs(con: Con, run_id: str, keys: list[tuple[int, int]] | None = None) -> pd.DataFrame:
    """A run's trajectories as scanners read them, with each one's step rewards (`keys`: only those
    (step, traj_idx))."""
    wanted = [f"{int(s)}/{int(i)}" for s, i in keys] if keys is not None else []
    return con.execute(
        """
        SELECT t.run_id, t.step, t.traj_idx, t.task_id, t.states, t.actions, t.reward, t.components, t.prompt,
               t.completion, t.behaviour, list(t.reward) OVER (PARTITION BY t.step) AS step_rewards
        FROM trajectories t WHERE t.run_id = ?
        QUALIFY ?::BOOLEAN OR list_contains(?, t.step::VARCHAR || '/' || t.traj_idx::VARCHAR)
        ORDER BY t.step, t.traj_idx
        """,
        [run_id, keys is None, wanted],
    ).df()


def insert_scan_results(con: Con, table: pa.Table) -> int:
    """Write results in bulk (Arrow); a row whose key exists replaces it. Returns the rows written."""
    con.register("scan_rows", table)
    try:
        con.execute(f"INSERT OR REPLACE INTO scan_results ({', '.join(SCAN_COLUMNS)}) "
                    f"SELECT {', '.join(SCAN_COLUMNS)} FROM scan_rows")
    finally:
        con.unregister("scan_rows")
    return table.num_rows


def scanned_keys(con: Con, run_id: str, scanner: str, version: str) -> set[tuple[int, int]]:
    rows = con.execute("SELECT step, traj_idx FROM scan_results WHERE run_id = ? AND scanner = ? AND version = ?",
                       [run_id, scanner, version]).fetchall()
    return {(int(s), int(i)) for s, i in rows}


def scan_results(con: Con, run_id: str, scanner: str | None = None, version: str | None = None) -> pd.DataFrame:
    """A run's stored results (one scanner, one version, or all), by step and trajectory."""
    return con.execute(
        """
        SELECT run_id, step, traj_idx, scanner, version, value, value > 0 AS hit, explanation, refs, spec, scanned_at
        FROM scan_results
        WHERE run_id = ? AND (? IS NULL OR scanner = ?) AND (? IS NULL OR version = ?)
        ORDER BY scanner, version, step, traj_idx
        """, [run_id, scanner, scanner, version, version]).df()


def latest_scanners(con: Con, run_id: str) -> pd.DataFrame:
    """Each scanner run over `run_id` at its most recently scanned version: scanner, version, spec,
    trajectories scanned, hits."""
    return con.execute(
        """
        WITH latest AS (
            SELECT scanner, arg_max(version, scanned_at) AS version FROM scan_results WHERE run_id = ? GROUP BY scanner)
        SELECT r.scanner, r.version, any_value(r.spec) AS spec, count(*) AS scanned, count(*) FILTER (WHERE r.value > 0) AS hits
        FROM scan_results r JOIN latest l USING (scanner, version)
        WHERE r.run_id = ? GROUP BY r.scanner, r.version ORDER BY r.scanner
        """, [run_id, run_id]).df()


def trajectory_scan_hits(con: Con, run_id: str, step: int, traj_idx: int) -> pd.DataFrame:
    """What every scanner's latest version said about one trajectory (hits first)."""
    return con.execute(
        """
        WITH latest AS (
            SELECT scanner, arg_max(version, scanned_at) AS version FROM scan_results WHERE run_id = ? GROUP BY scanner)
        SELECT r.scanner, r.version, r.value > 0 AS hit, r.value, r.explanation, r.refs
        FROM scan_results r JOIN latest l USING (scanner, version)
        WHERE r.run_id = ? AND r.step = ? AND r.traj_idx = ?
        ORDER BY hit DESC, r.scanner
        """, [run_id, run_id, int(step), int(traj_idx)]).df()


def scanner_hit_keys(con: Con, run_id: str, scanner: str) -> pd.DataFrame:
    """The trajectories the latest version of `scanner` hit in `run_id` (step, traj_idx, explanation, refs)."""
    return con.execute(
        """
        WITH latest AS (SELECT arg_max(version, scanned_at) AS version FROM scan_results WHERE run_id = ? AND scanner = ?)
        SELECT r.step, r.traj_idx, r.explanation, r.refs FROM scan_results r, latest l
        WHERE r.run_id = ? AND r.scanner = ? AND r.version = l.version AND r.value > 0
        ORDER BY r.step, r.traj_idx
        """, [run_id, scanner, run_id, scanner]).df()


def scan_hit_rates(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Per run, step and scanner (its latest version in that run): the share of the step's scanned
    trajectories it hit, beside the step's violation rate."""
    return con.execute(
        """
        WITH latest AS (
            SELECT run_id, scanner, arg_max(version, scanned_at) AS version FROM scan_results
            WHERE list_contains(?, run_id) GROUP BY run_id, scanner)
        SELECT r.run_id, r.step, r.scanner, r.version, avg(CASE WHEN r.value > 0 THEN 1.0 ELSE 0.0 END) AS hit_rate,
               count(*) AS scanned, any_value(s.violation_rate) AS violation_rate
        FROM scan_results r JOIN latest l USING (run_id, scanner, version)
        LEFT JOIN steps s ON s.run_id = r.run_id AND s.step = r.step
        GROUP BY r.run_id, r.step, r.scanner, r.version ORDER BY r.run_id, r.scanner, r.step
        """, [list(run_ids)]).df()


def review_labels(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Every decided trajectory of the runs: run_id, step, traj_idx, label (True: a reject or an
    exploit fixture; False: an approve), source ('reject', 'fixture' or 'approve')."""
    return con.execute(
        """
        WITH verdicts AS (
            SELECT run_id, step, traj_idx, arg_max(verdict, review_id) AS verdict FROM reviews
            WHERE list_contains(?, run_id) GROUP BY run_id, step, traj_idx),
        fixed AS (
            SELECT DISTINCT source_run_id AS run_id, step, traj_idx FROM fixtures WHERE list_contains(?, source_run_id))
        SELECT coalesce(v.run_id, f.run_id) AS run_id, coalesce(v.step, f.step) AS step,
               coalesce(v.traj_idx, f.traj_idx) AS traj_idx,
               f.run_id IS NOT NULL OR v.verdict = 'reject' AS label,
               CASE WHEN f.run_id IS NOT NULL THEN 'fixture' ELSE v.verdict END AS source
        FROM verdicts v FULL OUTER JOIN fixed f ON v.run_id = f.run_id AND v.step = f.step AND v.traj_idx = f.traj_idx
        ORDER BY run_id, step, traj_idx
        """, [list(run_ids), list(run_ids)]).df()


def run_kinds_and_configs(con: Con) -> list[tuple[str, str, str]]:
    """(run_id, kind, config JSON) of every run, oldest first (a scanner is validated on the runs of its task)."""
    return [tuple(r) for r in con.execute("SELECT run_id, kind, config FROM runs ORDER BY created_at, run_id").fetchall()]


def trajectory_scanner_names(con: Con, run_id: str) -> pd.DataFrame:
    """Per trajectory of `run_id` some scanner's latest version hit: step, traj_idx, and the names
    of the scanners that hit it (comma-separated)."""
    return con.execute(
        """
        WITH latest AS (
            SELECT scanner, arg_max(version, scanned_at) AS version FROM scan_results WHERE run_id = ? GROUP BY scanner)
        SELECT r.step, r.traj_idx, string_agg(r.scanner, ', ' ORDER BY r.scanner) AS scanners
        FROM scan_results r JOIN latest l USING (scanner, version)
        WHERE r.run_id = ? AND r.value > 0 GROUP BY r.step, r.traj_idx
        """, [run_id, run_id]).df()


def enforced_hit_rates(con: Con, run_ids: list[str]) -> pd.DataFrame:
    """Per run, step and enforced scanner (`"scanners"` in a run's config): the share of the step's
    rollouts it hit, read from the reasons the run recorded ("scanner NAME vN: ..."), so a guarded
    run's hits show while it trains, before anyone runs `agentrl scan`. Columns as `scan_hit_rates`."""
    return con.execute(
        r"""
        WITH hits AS (
            SELECT run_id, step, traj_idx,
                   unnest(regexp_extract_all(verifier_reason, 'scanner (\S+) v\S+:', 1)) AS scanner
            FROM trajectories WHERE list_contains(?, run_id) AND verifier_reason LIKE '%scanner %'),
        names AS (SELECT DISTINCT run_id, scanner FROM hits),
        totals AS (SELECT run_id, step, count(*) AS n FROM trajectories WHERE list_contains(?, run_id) GROUP BY run_id, step)
        SELECT t.run_id, t.step, nm.scanner || ' (enforced)' AS scanner, NULL::VARCHAR AS version,
               count(DISTINCT h.traj_idx) / any_value(t.n) AS hit_rate, any_value(t.n) AS scanned,
               any_value(s.violation_rate) AS violation_rate
        FROM totals t JOIN names nm ON nm.run_id = t.run_id
        LEFT JOIN hits h ON h.run_id = t.run_id AND h.step = t.step AND h.scanner = nm.scanner
        LEFT JOIN steps s ON s.run_id = t.run_id AND s.step = t.step
        GROUP BY t.run_id, t.step, nm.scanner ORDER BY t.run_id, scanner, t.step
        """, [list(run_ids), list(run_ids)]).df()
