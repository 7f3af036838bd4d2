"""The runs table of the home page: filtering the run list and laying it out with each run's final
figures, the config values that tell its runs apart (the fields each engine names in its
`table_fields`), and links to its pages; or, grouped, one row per seed group with the mean ± std of
its runs' final figures.

queries.list_runs -> **analysis.runs** -> home page. Pure functions on the `list_runs` frame.
"""

from __future__ import annotations

import json
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


# Column names of config fields where the field's own name would not read as one.
CONFIG_HEADERS = {"lr": "learning rate", "group_size": "group size", "lm.model": "model"}


def _field(config: dict, path: str):
    value = config
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def config_columns(runs: pd.DataFrame, configs: dict[str, str]) -> pd.DataFrame:
    """One column per config field that the engines of `runs` show (their `table_fields`, in the
    order first named), one row per run: that run's value, blank where its engine has no such
    field. `configs`: each run's config JSON (`queries.config_texts`)."""
    from agentrl.engines.registry import UnknownEngineError, get_engine

    fields: list[str] = []
    for kind in runs["kind"].unique():
        try:
            named = get_engine(kind).table_fields
        except UnknownEngineError:
            named = ("seed",)
        fields += [f for f in named if f not in fields]
    parsed = {}
    for run_id, text in configs.items():
        try:
            parsed[run_id] = json.loads(text) if text else {}
        except (TypeError, ValueError):
            parsed[run_id] = {}
    columns = {}
    for name in fields:
        values = []
        for run_id, kind in zip(runs["run_id"], runs["kind"]):
            try:
                shown = name in get_engine(kind).table_fields
            except UnknownEngineError:
                shown = name == "seed"
            values.append(_field(parsed.get(run_id, {}), name) if shown else None)
        columns[CONFIG_HEADERS.get(name, name.replace("_", " "))] = values
    return pd.DataFrame(columns, index=runs.index)


def runs_table(runs: pd.DataFrame, onsets: dict | None = None, configs: dict[str, str] | None = None) -> pd.DataFrame:
    """The runs as the home page lists them: identity (name, status, when created), progress,
    final figures, the hacking onset (`agentrl.monitor.store_onset` of each run, when given), the
    config values its engine shows (when `configs` are given), the run id, links to each page of
    the run, tags and note."""
    onsets = onsets or {}
    table = pd.DataFrame({
        "run": "●",
        "name": runs["name"],
        "status": runs["status"],
        "created_at": runs["created_at"],
        "steps": [f"{int(d)}/{int(t) if pd.notna(t) else '?'}" for d, t in zip(runs["steps_done"], runs["total_steps"])],
        "final success": runs["final_success"],
        "final violation": runs["final_violation"],
        "held-out success": runs["held_out_success"],
        "onset": [onset_cell(onsets.get(r)) for r in runs["run_id"]],
    })
    if configs is not None:
        table = pd.concat([table, config_columns(runs, configs)], axis=1)
    table = table.assign(**{
        "run_id": runs["run_id"],
        "live": [page_url("Live", [r]) for r in runs["run_id"]],
        "review": [page_url("Review", [r]) for r in runs["run_id"]],
        "tags": [", ".join(list(t) if t is not None else []) for t in runs["tags"]],
        "note": runs["note"].fillna(""),
        "final reward": runs["final_reward"],
        "scorer": runs["scorer"],
        "kind": runs["kind"],
        "hardware": [page_url("Hardware", [r]) for r in runs["run_id"]],
        "error": runs["error"],
    })
    return table.reset_index(drop=True)



def _mean_std(mean: float, std: float, runs: int, percent: bool) -> str:
    """'81.2% ± 3.1%' (or '0.812 ± 0.031'); the mean alone for one run; '' for none."""
    if pd.isna(mean):
        return ""
    shown = (lambda v: f"{v:.1%}") if percent else (lambda v: f"{v:.3f}")
    return shown(mean) if runs < 2 or pd.isna(std) else f"{shown(mean)} ± {shown(std)}"


# The grouped table's figure columns: (column of `collapse_runs`, header, a rate in percent).
GROUPED_FIGURES = (("final_success", "final success", True), ("final_violation", "final violation", True),
                   ("held_out_success", "held-out success", True), ("final_reward", "final reward", False))


def grouped_table(runs: pd.DataFrame, groups: list) -> pd.DataFrame:
    """The runs table with each seed group (`analysis.seed_groups.seed_groups` of `runs`) as one
    row: its label, how many runs and which seeds, their statuses and steps, the mean ± std of each
    final figure over its runs, and a link to Compare with all of them. `run_ids` lists the
    group's runs (the page selects them all when the row is selected)."""
    from agentrl.analysis.seed_groups import collapse_runs

    collapsed = collapse_runs(runs, groups)
    by_id = runs.set_index("run_id")
    members = [[r for r in g.run_ids if r in by_id.index] for g in groups]
    members = [m for m in members if m]
    table = pd.DataFrame({
        "run": "●",
        "group": collapsed["group"],
        "runs": collapsed["runs"],
        "seeds": [", ".join(str(v) for v in sorted((v for r, v in zip(g.run_ids, g.values) if r in by_id.index),
                                                   key=lambda v: (not isinstance(v, (int, float)), v if isinstance(v, (int, float)) else str(v))))
                  for g in groups if any(r in by_id.index for r in g.run_ids)],
        "status": [", ".join(dict.fromkeys(str(s) for s in by_id.loc[m, "status"])) for m in members],
        "steps": [f"{int(by_id.loc[m, 'steps_done'].min())}/"
                  f"{int(t) if pd.notna(t := by_id.loc[m, 'total_steps'].max()) else '?'}" for m in members],
    })
    for column, header, percent in GROUPED_FIGURES:
        if f"{column}_mean" in collapsed:
            table[header] = [_mean_std(mean, std, n, percent) for mean, std, n in
                             zip(collapsed[f"{column}_mean"], collapsed[f"{column}_std"], collapsed["runs"])]
    table["compare"] = [page_url("Compare", m) for m in members]
    table["run_id"] = collapsed["group_id"]
    table["run_ids"] = [", ".join(m) for m in members]
    return table.reset_index(drop=True)
