"""Hardware samples of a run's process tree: resident memory and CPU via psutil, and GPU memory
when torch is already loaded and sees a GPU.

Called by the run process (from its chunk flusher, about once a second) and by the Hardware view
of the dashboard. It never imports torch itself: a tabular run must not pay for it.
"""

from __future__ import annotations

import os
import sys

import psutil


class ProcessTreeSampler:
    """Samples one process and its descendants; keeps Process objects so cpu_percent has a baseline."""

    def __init__(self, pid: int | None = None):
        self.root = psutil.Process(pid or os.getpid())
        self._known: dict[int, psutil.Process] = {}

    def _tree(self) -> list[psutil.Process]:
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            return []
        current = {}
        for proc in procs:
            current[proc.pid] = self._known.get(proc.pid, proc)
        self._known = current
        return list(current.values())

    def sample(self) -> dict:
        rss = 0
        cpu = 0.0
        for proc in self._tree():
            try:
                rss += proc.memory_info().rss
                cpu += proc.cpu_percent(None)  # since this object's previous call; 0.0 the first time
            except psutil.Error:
                continue  # a child that exited between listing and reading
        sample = {
            "rss_bytes": rss,
            "cpu_percent": cpu,
            "sys_available_bytes": psutil.virtual_memory().available,
            "gpu_allocated_bytes": None,
            "gpu_reserved_bytes": None,
            "gpu_total_bytes": None,
        }
        sample.update(gpu_memory())
        return sample


def gpu_memory() -> dict:
    """torch.cuda memory statistics, only if this process already imported torch and has a GPU."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        if not torch.cuda.is_available():
            return {}
        device = torch.cuda.current_device()
        return {
            "gpu_allocated_bytes": int(torch.cuda.memory_allocated(device)),
            "gpu_reserved_bytes": int(torch.cuda.memory_reserved(device)),
            "gpu_total_bytes": int(torch.cuda.get_device_properties(device).total_memory),
        }
    except Exception:
        return {}


def machine_memory() -> dict:
    memory = psutil.virtual_memory()
    return {"total_bytes": memory.total, "available_bytes": memory.available, "cpu_count": psutil.cpu_count()}
