"""The machine's CPU figure is measured over a window, so consecutive views agree."""

from __future__ import annotations

from collections import namedtuple

import pandas as pd

from agentrl.analysis import hardware as hw

Times = namedtuple("Times", "user system idle iowait")


def test_cpu_meter_reads_the_busy_share_over_its_window_not_since_the_last_call():
    meter = hw.CpuMeter(window_s=5.0)
    assert meter.busy_percent() is None
    meter.sample(now=0.0, times=Times(0.0, 0.0, 0.0, 0.0))
    meter.sample(now=0.2, times=Times(0.1, 0.0, 0.1, 0.0))
    assert meter.busy_percent() is None  # under half a second: not measured yet
    meter.sample(now=2.0, times=Times(1.0, 0.0, 3.0, 0.0))
    assert meter.busy_percent() == 25.0
    # A burst between two views moves the figure by its share of the window, not to 0% or 100%.
    meter.sample(now=2.25, times=Times(1.5, 0.0, 3.0, 0.0))
    first = meter.busy_percent()
    meter.sample(now=2.5, times=Times(1.5, 0.0, 3.5, 0.0))
    assert 25.0 < first and abs(meter.busy_percent() - first) < 15


def test_readable_bytes_and_run_memory():
    assert hw.readable(3_441_149_952) == "3.4 GB" and hw.readable(524_288) == "0.5 MB" and hw.readable(None) == "–"
    samples = pd.DataFrame({"rss_bytes": [50e6, 80e6], "gpu_allocated_bytes": [None, None]})
    budget = pd.DataFrame({"component": ["weights", "total"], "estimate_bytes": [1e6, 9e8], "measured_bytes": [None, 8e8]})
    memory = hw.run_memory(samples, budget)
    assert (memory.peak_rss, memory.estimate, memory.peak_gpu, memory.samples) == ("80.0 MB", "0.9 GB", "no GPU", 2)
    assert hw.budget_table(budget)["measured"].tolist() == ["–", "0.8 GB"]
