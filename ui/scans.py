"""Scanner results on the pages: Review's scanner filter and column, one trajectory's results with
the cited items highlighted, and the hit rate per step Live and Compare draw beside the violation rate.

pages -> **ui.scans** -> agentrl.store.queries (scans), agentrl.scan, agentrl.charts. Results come
from `agentrl scan RUN_ID --scanner PATH:NAME` (or a guarded run's enforcement, flagged on its rows);
each scanner is shown at its latest version in the run.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui
from agentrl import behaviour_charts
from agentrl.scan.trajectory import Trajectory
from agentrl.store import queries

ANY = "any"


def scanner_choice(con, run_id: str, where=None) -> str | None:
    """A filter: only the trajectories one scanner hit (None: no filter, or no scanner ran)."""
    scanners = queries.latest_scanners(con, run_id)
    if scanners.empty:
        return None
    labels = {r.scanner: f"{r.scanner} v{r.version} ({int(r.hits)} hits)" for r in scanners.itertuples()}
    picked = (where or st).selectbox("scanner hit", [ANY, *labels], key=f"scanner-{run_id}",
                                     format_func=lambda s: labels.get(s, s),
                                     help="Only trajectories this scanner hit (agentrl scan RUN_ID --scanner PATH:NAME).")
    return None if picked == ANY else picked


def keep_hits(con, run_id: str, found: pd.DataFrame, scanner: str | None, limit: int) -> pd.DataFrame:
    """`found` narrowed to the trajectories `scanner` hit, at most `limit` of them."""
    if scanner is None:
        return found
    hits = queries.scanner_hit_keys(con, run_id, scanner)
    keys = set(zip(hits["step"].astype(int), hits["traj_idx"].astype(int)))
    kept = found[[(int(s), int(i)) in keys for s, i in zip(found["step"], found["traj_idx"])]] if len(found) else found
    return kept.head(limit)


def with_scanner_column(con, run_id: str, table: pd.DataFrame) -> pd.DataFrame:
    """The Review table with a `scanners` column: which scanners hit each trajectory."""
    names = queries.trajectory_scanner_names(con, run_id)
    if names.empty or table.empty:
        return table
    merged = table.merge(names.astype({"step": table["step"].dtype, "traj_idx": table["traj_idx"].dtype}),
                         on=["step", "traj_idx"], how="left")
    merged["scanners"] = merged["scanners"].fillna("")
    front = [c for c in merged.columns if c != "scanners"]
    return merged[front[:5] + ["scanners"] + front[5:]]


def _item_line(item, cited_by: list[str]) -> str:
    text = ui.plain(f"{item.role} {item.part} {item.index}: {item.searchable()}")
    if not cited_by:
        return text
    return f":orange-background[{text}] ◀ cited by {ui.plain(', '.join(cited_by))}"


def show_results(con, run_id: str, step: int, traj_idx: int, record: dict) -> None:
    """What each scanner said about this trajectory; for a hit, the trajectory's items with the ones
    it cited highlighted."""
    results = queries.trajectory_scan_hits(con, run_id, step, traj_idx)
    if results.empty:
        return
    st.markdown("**Scanners**")
    st.dataframe(results.assign(refs=results["refs"].map(lambda r: ", ".join(str(int(x)) for x in r) if r is not None else "")),
                 hide_index=True, key=f"scans-{run_id}-{step}-{traj_idx}")
    hits = results[results["hit"]]
    if hits.empty:
        return
    cited: dict[int, list[str]] = {}
    for row in hits.itertuples():
        for ref in (row.refs if row.refs is not None else []):
            cited.setdefault(int(ref), []).append(f"{row.scanner} v{row.version}")
    items = Trajectory.of_row(record).items
    st.markdown("  \n".join(_item_line(item, cited.get(item.index, [])) for item in items))


def draw_hit_rates(con, run_ids: list[str], labels: dict[str, str], colors: dict[str, str] | None, key: str,
                   where=None, quiet: bool = False) -> None:
    """Each scanner's hit rate per step beside the violation rate, for the runs any scanner read or
    enforced (an enforced one from the reasons its run recorded, while it trains; `quiet`: nothing at
    all when there is none)."""
    frames = [f for f in (queries.scan_hit_rates(con, list(run_ids)), queries.enforced_hit_rates(con, list(run_ids))) if not f.empty]
    if not frames:
        if not quiet:
            (where or st).caption("No scanner has read these runs yet (agentrl scan RUN_ID --scanner PATH:NAME).")
        return
    ui.chart(behaviour_charts.scanner_hit_rates(pd.concat(frames, ignore_index=True), labels, colors), key, where)
