"""The machine as the Hardware page shows it: memory and cores now, how busy the CPUs have been
over the last few seconds, and a run's memory figures in readable units.

record.hardware (a run's own samples) -> store -> **analysis.hardware** -> Hardware and Live pages.
`gpu_by_rank` sets each training process's measured GPU peak against the budget's per-GPU estimate.
`CpuMeter` measures the machine from psutil's cumulative CPU times over a window of seconds, so
consecutive page views read the same load instead of psutil's since-the-last-call figure (which
read 0%, 97%, 0% on three loads a second apart).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass

import pandas as pd
import psutil

from agentrl.engines.trl.budget import format_bytes

WINDOW_S = 5.0  # the CPU figure is the busy share over about this many seconds
MIN_SPAN_S = 0.5  # ... and over at least this long, or it is not shown yet


def _busy_and_total(times) -> tuple[float, float]:
    total = sum(times)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


class CpuMeter:
    """The machine's CPU busy share over the last `window_s` seconds. `sample()` is cheap and
    thread-safe; call it every fraction of a second (the dashboard's ingest loop does)."""

    def __init__(self, window_s: float = WINDOW_S):
        self.window_s = window_s
        self._samples: deque[tuple[float, float, float]] = deque()
        self._lock = threading.Lock()

    def sample(self, now: float | None = None, times=None) -> None:
        now = time.monotonic() if now is None else now
        busy, total = _busy_and_total(psutil.cpu_times() if times is None else times)
        with self._lock:
            self._samples.append((now, busy, total))
            # Keep one sample older than the window, so the span always covers the whole window.
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()

    def busy_percent(self) -> float | None:
        """Percent of all cores busy over the window; None until the meter has MIN_SPAN_S of samples."""
        with self._lock:
            if len(self._samples) < 2:
                return None
            (t0, busy0, total0), (t1, busy1, total1) = self._samples[0], self._samples[-1]
        if t1 - t0 < MIN_SPAN_S or total1 <= total0:
            return None
        return 100.0 * (busy1 - busy0) / (total1 - total0)


@dataclass(frozen=True)
class MachineSnapshot:
    total_bytes: int
    available_bytes: int
    cores: int | None
    busy_percent: float | None  # of all cores, over the meter's window; None while measuring


def cores() -> int | None:
    return os.cpu_count()


def machine_snapshot(meter: CpuMeter | None = None) -> MachineSnapshot:
    memory = psutil.virtual_memory()
    return MachineSnapshot(memory.total, memory.available, cores(),
                           meter.busy_percent() if meter is not None else None)


def readable(n_bytes) -> str:
    """Bytes for a table cell: '52.4 MB', '3.4 GB', or '–' when unknown."""
    return "–" if n_bytes is None or pd.isna(n_bytes) else format_bytes(float(n_bytes))


def estimate_total(budget: pd.DataFrame) -> float | None:
    """The run's total memory estimate from its budget rows (columns: component, estimate_bytes)."""
    total = budget.loc[budget["component"] == "total", "estimate_bytes"].dropna()
    return float(total.iloc[0]) if len(total) else None


def budget_table(budget: pd.DataFrame) -> pd.DataFrame:
    """The budget's components with readable estimate and measured columns beside the bytes (a
    training process's GPU rows are `gpu_by_rank`'s)."""
    if not budget.empty:
        budget = budget[~budget["component"].str.contains("/rank ", regex=False)]
    return budget.assign(estimate=budget["estimate_bytes"].map(readable),
                         measured=budget["measured_bytes"].map(readable))[
        ["component", "estimate", "measured", "estimate_bytes", "measured_bytes"]]


def peaks_table(peaks: pd.DataFrame) -> pd.DataFrame:
    """Every run's peaks with readable peak RSS and estimate columns after the run's identity."""
    out = peaks.copy()
    at = min(5, len(out.columns))
    out.insert(at, "peak RSS", out["peak_rss_bytes"].map(readable))
    out.insert(at + 1, "estimate", out["estimate_total_bytes"].map(readable))
    return out


def gpu_by_rank(budget: pd.DataFrame) -> pd.DataFrame:
    """Each training process's GPU: the budget's estimate for one GPU against the measured peaks
    (allocated, reserved) and the device's memory, from the 'gpu_peak/rank N', 'gpu_reserved_peak/rank N'
    and 'gpu_memory/rank N' rows; empty when the run used no GPU."""
    columns = ["rank", "estimate", "peak allocated", "peak reserved", "GPU memory"]
    per_rank = budget[budget["component"].str.contains("/rank ", regex=False)] if not budget.empty else budget
    if per_rank.empty:
        return pd.DataFrame(columns=columns)
    parts = per_rank["component"].str.split("/rank ", n=1, regex=False)
    frame = per_rank.assign(name=parts.str[0], rank=parts.str[1].astype(int))
    out = []
    for rank, rows in frame.groupby("rank", sort=True):
        figure = {name: row for name, row in zip(rows["name"], rows.itertuples())}
        peak = figure.get("gpu_peak")
        out.append({"rank": rank,
                    "estimate": readable(peak.estimate_bytes if peak is not None else None),
                    "peak allocated": readable(peak.measured_bytes if peak is not None else None),
                    "peak reserved": readable(figure["gpu_reserved_peak"].measured_bytes if "gpu_reserved_peak" in figure else None),
                    "GPU memory": readable(figure["gpu_memory"].measured_bytes if "gpu_memory" in figure else None)})
    return pd.DataFrame(out, columns=columns)


@dataclass(frozen=True)
class RunMemory:
    peak_rss: str
    estimate: str
    peak_gpu: str
    samples: int


def run_memory(hardware: pd.DataFrame, budget: pd.DataFrame) -> RunMemory:
    """A run's headline memory figures from its samples and budget."""
    gpu = hardware["gpu_allocated_bytes"].dropna() if not hardware.empty else pd.Series(dtype=float)
    return RunMemory(
        peak_rss=readable(hardware["rss_bytes"].max()) if not hardware.empty else "–",
        estimate=readable(estimate_total(budget)),
        peak_gpu=readable(gpu.max()) if len(gpu) else "no GPU",
        samples=len(hardware),
    )
