"""Seed groups: runs whose configs differ only in their seed (or another key a person picks) are
one experiment, read as one line with a band, since an RL result on one seed means little.

queries.runs.run_configs -> **analysis.seed_groups** -> charts (`seed_band_overlay`) -> Compare
and Live; and the run table's collapsed rows (`collapse_runs`). Pure functions on DataFrames;
nothing here reads the store or draws. A run's name never splits a group (Launch names seeds
`<name>-seed<N>`), nor does the group key; everything else in the config, and the engine, must
be equal.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import pandas as pd

SEED = "seed"
NEVER_SPLITS = ("name",)  # says which member a run is, not what was run
BANDS = ("min–max", "±1 std")
FINAL_METRICS = ("final_success", "final_violation", "final_reward", "held_out_success")


@dataclass(frozen=True)
class SeedGroup:
    """Runs that differ only in `key`: the first member's id names the group (and lends it its
    colour), `label` reads on charts, `values` is each member's value of the key."""

    group_id: str
    label: str
    run_ids: tuple[str, ...]
    values: tuple

    @property
    def size(self) -> int:
        return len(self.run_ids)


def _config(value) -> dict:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value) if isinstance(value, str) else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def group_keys(runs: pd.DataFrame) -> list[str]:
    """The config keys a person may group by: `seed` first, then every other top-level key whose
    value differs among `runs` (columns: run_id, config), the name left out."""
    configs = [_config(c) for c in runs["config"]] if "config" in runs else []
    keys = sorted({k for c in configs for k in c} - {SEED, *NEVER_SPLITS})
    differing = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True, default=str) for c in configs}) > 1]
    return [SEED, *differing]


def _base_name(names: list[str]) -> str:
    """What the members' names share: `refund-outcome` of `refund-outcome-seed7` and `-seed8`."""
    if len(set(names)) == 1:
        return names[0]
    stripped = {re.sub(r"[-_ ]?seed\d+$", "", n) for n in names}
    if len(stripped) == 1:
        return stripped.pop()
    common = os.path.commonprefix(names).rstrip("-_ ")
    return common or names[0]


def seed_groups(runs: pd.DataFrame, key: str = SEED) -> list[SeedGroup]:
    """The runs of `runs` (columns: run_id, name, kind, scorer, config as JSON text or dict) in
    groups equal in everything but `key` and the name, in the order their first members appear.
    Members differ in `key`: a run without it, or repeating a member's value (a rerun of the same
    seed), is not another seed, so it starts a group of its own."""
    found: dict[str, list[list]] = {}
    for row in runs.itertuples(index=False):
        config = _config(row.config)
        rest = {k: v for k, v in config.items() if k != key and k not in NEVER_SPLITS}
        identity = json.dumps([row.kind, rest], sort_keys=True, default=str)
        member = (row.run_id, row.name, row.scorer, config.get(key))
        candidates = found.setdefault(identity, [])
        home = next((g for g in candidates if member[3] is not None and member[3] not in [m[3] for m in g]), None)
        if home is None:
            candidates.append([member])
        else:
            home.append(member)
    groups = []
    for members in sorted((g for gs in found.values() for g in gs), key=lambda g: list(runs["run_id"]).index(g[0][0])):
        ids, names, scorers, values = zip(*members)
        label = f"{_base_name(list(names))} ({scorers[0]})"
        if len(ids) > 1:
            label += f" · {len(ids)} {'seeds' if key == SEED else f'values of {key}'}"
        groups.append(SeedGroup(ids[0], label, tuple(ids), tuple(values)))
    return groups


def singles(runs: pd.DataFrame) -> list[SeedGroup]:
    """Every run of `runs` (column run_id) a group of its own: grouping turned off."""
    return [SeedGroup(r, r, (r,), (None,)) for r in runs["run_id"]]


def group_containing(groups: list[SeedGroup], run_id: str) -> SeedGroup | None:
    """The group `run_id` is in (Live draws a run beside its seed siblings), None if none."""
    return next((g for g in groups if run_id in g.run_ids), None)


def has_groups(groups: list[SeedGroup]) -> bool:
    """Whether any group holds more than one run (else grouping changes nothing)."""
    return any(g.size > 1 for g in groups)


def group_curves(steps: pd.DataFrame, groups: list[SeedGroup], column: str, band: str = BANDS[0]) -> pd.DataFrame:
    """Per group and step, the mean of `column` over the group's runs at that step and its band:
    `min–max` (lo, hi the least and greatest) or `±1 std` (mean ∓ the standard deviation, 0 for
    one run). Columns: group_id, step, mean, lo, hi, runs (how many runs reached the step).
    `steps` is long by run: run_id, step, column."""
    if band not in BANDS:
        raise ValueError(f"band must be one of {', '.join(BANDS)}, not {band!r}")
    of = {run_id: g.group_id for g in groups for run_id in g.run_ids}
    part = steps[steps["run_id"].isin(list(of))].dropna(subset=[column])
    columns = ["group_id", "step", "mean", "lo", "hi", "runs"]
    if part.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "group_id" else float) for c in columns})
    part = part.assign(group_id=part["run_id"].map(of))
    stats = part.groupby(["group_id", "step"], sort=True)[column].agg(["mean", "min", "max", "std", "count"]).reset_index()
    std = stats["std"].fillna(0.0)
    if band == BANDS[0]:
        stats["lo"], stats["hi"] = stats["min"], stats["max"]
    else:
        stats["lo"], stats["hi"] = stats["mean"] - std, stats["mean"] + std
    stats = stats.rename(columns={"count": "runs"})
    order = {g.group_id: i for i, g in enumerate(groups)}
    stats = stats.sort_values(["group_id", "step"], key=lambda s: s.map(order) if s.name == "group_id" else s)
    return stats[columns].reset_index(drop=True)


def collapse_runs(runs: pd.DataFrame, groups: list[SeedGroup], metrics: tuple[str, ...] = FINAL_METRICS) -> pd.DataFrame:
    """The run table with each seed group as one row: group (its label), runs, the key's values,
    and per metric of `metrics` present in `runs` (one row per run, with run_id) its mean and std
    over the group's runs (`<metric>_mean`, `<metric>_std`; std 0 for one run) and `<metric>` as
    text, "0.812 ± 0.031"."""
    by_id = runs.set_index("run_id")
    present = [m for m in metrics if m in by_id.columns]
    rows = []
    for group in groups:
        members = [r for r in group.run_ids if r in by_id.index]
        if not members:
            continue
        row = {"group": group.label, "group_id": group.group_id, "runs": len(members),
               "values": ", ".join(str(v) for r, v in zip(group.run_ids, group.values) if r in by_id.index)}
        for metric in present:
            values = pd.to_numeric(by_id.loc[members, metric], errors="coerce").dropna()
            mean = float(values.mean()) if len(values) else float("nan")
            std = float(values.std(ddof=1)) if len(values) > 1 else (0.0 if len(values) else float("nan"))
            row[f"{metric}_mean"], row[f"{metric}_std"] = mean, std
            row[metric] = "—" if pd.isna(mean) else (f"{mean:.3f} ± {std:.3f}" if len(values) > 1 else f"{mean:.3f}")
        rows.append(row)
    columns = ["group", "group_id", "runs", "values", *[c for m in present for c in (m, f"{m}_mean", f"{m}_std")]]
    return pd.DataFrame(rows, columns=columns)
