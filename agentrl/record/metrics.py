"""A step's metrics as wandb and Trackio users log them, made into what the `steps` table holds.

A user's script -> `Run.log(metrics)` / `Run.log_step(step, metrics)` -> **metrics** -> the step
row. Nested dicts are flattened with "/" (`{"train": {"loss": x}}` is `train/loss`); bools count
as 0/1; numpy scalars and 0-d tensors become floats; None and NaN are left out (TRL logs None for
a metric with no value). A name that is a column of `steps` fills that column; one of the usual TRL/wandb names of one
(`NAME_TO_COLUMN`: `reward` for `mean_reward`) fills it and stays in the metrics map under its own
name; every other name goes to the metrics map.
A value that is none of these (a string, a list) is left out and named, and the step keeps the rest.
"""

from __future__ import annotations

import math

from agentrl.record.checks import as_number

STEP_COLUMNS = ("success_rate", "violation_rate", "duplicate_rate", "mean_reward", "vetoed", "vetoed_updates",
                "updates", "clipped", "transitions")
INT_COLUMNS = frozenset({"vetoed", "vetoed_updates", "updates", "clipped", "transitions"})

NAME_TO_COLUMN = {
    "reward": "mean_reward",  # TRL's GRPO logs the batch's mean reward as `reward`
    "reward_mean": "mean_reward",
    "rewards/mean": "mean_reward",
    "success": "success_rate",
    "violation": "violation_rate",
    **{f"train/{name}": column for name, column in (("reward", "mean_reward"), ("reward_mean", "mean_reward"),
                                                   *((c, c) for c in STEP_COLUMNS))},  # TRL's wandb callback's prefix
}
"""Logged names that fill a column of `steps` (a column's own name does too). README, "Record your own script"."""


def column_of(name: str) -> str | None:
    """The `steps` column a logged name fills, or None (it goes to the metrics map)."""
    if name in STEP_COLUMNS:
        return name
    return NAME_TO_COLUMN.get(name)


def flat_metrics(metrics, prefix: str = "") -> tuple[dict, list[str]]:
    """(the metrics as the step row takes them, what was left out and why). Column names map to
    their column (an integral count as an int); every other value is a float."""
    if not isinstance(metrics, dict):
        if metrics is None:
            return {}, []
        if not hasattr(metrics, "items"):
            return {}, [f"metrics must be a dict of numbers by name, not {type(metrics).__name__}"]
    out: dict = {}
    bad: list[str] = []
    for key, value in metrics.items():
        if key.__class__ is not str:
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                bad.append(f"metric names must be str, not {key!r:.80}")
                continue
            key = str(key)
        name = prefix + key if prefix else key
        cls = value.__class__
        if cls is float:
            if value - value != 0:  # NaN or an infinity
                continue
        elif cls is int:
            pass
        elif value is None:
            continue
        elif cls is bool:
            value = int(value)
        elif isinstance(value, dict) or (hasattr(value, "items") and not hasattr(value, "ndim")):
            nested, nested_bad = flat_metrics(value, name + "/")
            out.update(nested)
            bad += nested_bad
            continue
        else:
            try:
                value = as_number(value) if not _is_bool(value) else int(bool(value))
            except (ValueError, TypeError):
                bad.append(f"metric {name!r} must be a number or bool, not {value!r:.80}; it was left out")
                continue
            if value - value != 0:
                continue
        column = NAME_TO_COLUMN.get(name, name)
        if column in INT_COLUMNS:
            if value.__class__ is float:
                if not (math.isfinite(value) and value.is_integer()):
                    bad.append(f"metric {name!r} counts {column} and must be a whole number, not {value!r}; it was left out")
                    continue
                value = int(value)
        out[column] = value
        if column != name:  # an alias fills its column and keeps its own name too (as wandb's history shows it)
            out[name] = value
    return out, bad


def _is_bool(value) -> bool:
    """numpy's bool_ (not a bool subclass), or a 0-d bool array or tensor."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and str(dtype) in ("bool", "torch.bool")
