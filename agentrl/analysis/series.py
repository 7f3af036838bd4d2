"""Per-step series made fit to draw: smoothing a noisy curve and thinning a long one.

queries -> **analysis.series** -> charts. `smooth` is TensorBoard's and W&B's debiased exponential
moving average (weight 0 leaves a curve as it is, 0.99 smooths it hard); `downsample` keeps at most
`max_points` rows per series, always with the first and the last, so a 100,000-step run costs the
browser no more than a 1,000-step one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MAX_POINTS = 1000


def ema(values, weight: float) -> np.ndarray:
    """Debiased exponential moving average of `values` (NaN values are skipped, not spread)."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), not {weight}")
    values = np.asarray(values, dtype=float)
    out = np.full(values.shape, np.nan)
    last, debias = 0.0, 0.0
    for i, value in enumerate(values):
        if np.isnan(value):
            continue
        last = last * weight + (1 - weight) * value
        debias = debias * weight + (1 - weight)
        out[i] = last / debias
    return out


def smooth(frame: pd.DataFrame, column: str, weight: float, by: str | None = None) -> pd.DataFrame:
    """`frame` with `column` smoothed (per group of `by`, in row order); the raw values stay in
    `<column>_raw`. Weight 0 returns the frame with an identical raw column."""
    out = frame.copy()
    out[f"{column}_raw"] = out[column]
    if weight <= 0 or out.empty:
        return out
    if by is None:
        out[column] = ema(out[column], weight)
    else:
        for _, index in out.groupby(by, sort=False).groups.items():
            out.loc[index, column] = ema(out.loc[index, column], weight)
    return out


def downsample(frame: pd.DataFrame, max_points: int = MAX_POINTS, by: str | None = None) -> pd.DataFrame:
    """At most `max_points` evenly spaced rows per group of `by` (first and last always kept)."""
    if max_points < 2:
        raise ValueError("max_points must be at least 2")
    groups = [frame] if by is None else [part for _, part in frame.groupby(by, sort=False)]
    kept = []
    for part in groups:
        if len(part) <= max_points:
            kept.append(part)
            continue
        positions = np.unique(np.linspace(0, len(part) - 1, max_points).round().astype(int))
        kept.append(part.iloc[positions])
    if not kept:
        return frame
    return pd.concat(kept) if len(kept) > 1 else kept[0]
