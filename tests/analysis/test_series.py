"""Smoothing and thinning of per-step series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentrl.analysis.series import downsample, ema, smooth


def test_ema_is_debiased_so_the_first_point_is_kept():
    assert ema([1.0, 1.0, 1.0], 0.9).tolist() == pytest.approx([1.0, 1.0, 1.0])
    smoothed = ema([0.0, 1.0], 0.5)
    assert smoothed.tolist() == pytest.approx([0.0, 2 / 3])
    assert ema([1.0, 2.0], 0.0).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError):
        ema([1.0], 1.0)


def test_smooth_keeps_the_raw_values_and_smooths_each_run_on_its_own():
    frame = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "v": [0.0, 1.0, 10.0, 10.0]})
    out = smooth(frame, "v", 0.5, by="run_id")
    assert out["v_raw"].tolist() == [0.0, 1.0, 10.0, 10.0]
    assert out["v"].tolist() == pytest.approx([0.0, 2 / 3, 10.0, 10.0])
    assert smooth(frame, "v", 0.0)["v"].tolist() == frame["v"].tolist()


def test_downsample_keeps_first_and_last_and_at_most_max_points_per_series():
    frame = pd.DataFrame({"run_id": ["a"] * 5000 + ["b"] * 10, "step": np.r_[np.arange(5000), np.arange(10)]})
    thin = downsample(frame, 100, by="run_id")
    a = thin[thin["run_id"] == "a"]["step"]
    assert len(a) == 100 and a.iloc[0] == 0 and a.iloc[-1] == 4999
    assert thin[thin["run_id"] == "b"]["step"].tolist() == list(range(10))
    assert len(downsample(frame.iloc[:50], 100)) == 50
