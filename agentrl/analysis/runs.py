"""The runs table of the home page: filtering the run list and laying it out with each run's final
figures and links to its pages.

queries.list_runs -> **analysis.runs** -> home page. Pure functions on the `list_runs` frame.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pandas as pd


def all_tags(runs: pd.DataFrame) -> list[str]:
    """Every tag any of the runs carries, sorted."""
    return sorted({tag for tags in runs["tags"] for tag in (list(tags) if tags is not None else [])})


def filter_runs(runs: pd.DataFrame, text: str = "", statuses: list[str] | None = None, kinds: list[str] | None = None,
                tags: list[str] | None = None, archived: bool = False) -> pd.DataFrame:
    """Runs matching every filter given: `text` in the name, id or note (any case); a status, kind
    and tag among those listed (empty lists match all); archived runs only when `archived`."""
    keep = pd.Series(True, index=runs.index)
    if not archived:
        keep &= ~runs["archived"].astype(bool)
    if text.strip():
        needle = text.strip().lower()
        haystack = runs["name"].str.lower() + " " + runs["run_id"].str.lower() + " " + runs["note"].fillna("").str.lower()
        keep &= haystack.str.contains(needle, regex=False)
    if statuses:
        keep &= runs["status"].isin(statuses)
    if kinds:
        keep &= runs["kind"].isin(kinds)
    if tags:
        keep &= runs["tags"].map(lambda have: bool(set(tags) & set(list(have) if have is not None else [])))
    return runs[keep]


def page_url(page: str, run_ids: list[str]) -> str:
    """A page's URL for some runs, relative to the dashboard's root: 'Compare?run=A&run=B'."""
    return f"{page}?{urlencode([('run', r) for r in run_ids])}"


def onset_cell(onset) -> str:
    """How the runs table shows a run's hacking onset: 'step 7 · hack_premium', or '' for none."""
    return "" if onset is None else f"step {onset.step} · {onset.signal}"


def runs_table(runs: pd.DataFrame, onsets: dict | None = None) -> pd.DataFrame:
    """The runs as the home page lists them: identity, progress, final figures, the hacking onset
    (`agentrl.monitor.store_onset` of each run, when given), tags, note and a link to each page
    of the run."""
    onsets = onsets or {}
    table = pd.DataFrame({
        "run": "●",
        "name": runs["name"],
        "status": runs["status"],
        "steps": [f"{int(d)}/{int(t) if pd.notna(t) else '?'}" for d, t in zip(runs["steps_done"], runs["total_steps"])],
        "final success": runs["final_success"],
        "final violation": runs["final_violation"],
        "held-out success": runs["held_out_success"],
        "onset": [onset_cell(onsets.get(r)) for r in runs["run_id"]],
        "live": [page_url("Live", [r]) for r in runs["run_id"]],
        "review": [page_url("Review", [r]) for r in runs["run_id"]],
        "tags": [", ".join(list(t) if t is not None else []) for t in runs["tags"]],
        "note": runs["note"].fillna(""),
        "final reward": runs["final_reward"],
        "scorer": runs["scorer"],
        "kind": runs["kind"],
        "hardware": [page_url("Hardware", [r]) for r in runs["run_id"]],
        "created_at": runs["created_at"],
        "run_id": runs["run_id"],
        "error": runs["error"],
    })
    return table.reset_index(drop=True)

