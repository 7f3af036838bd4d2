"""Hardware samples of a run's process tree: resident memory and CPU via psutil, and GPU memory
when torch is already loaded and sees a GPU; the GPU peak of a training step (torch's peak
counters, reset each step) and the device totals NVML reports, a MIG device counted as itself.

Called by the run process (from its chunk flusher, about once a second), by each training process
once a step (`cuda_peak`, `GpuPeaks`), and by the Hardware view of the dashboard. It never imports
torch itself: a tabular run must not pay for it. NVML (`nvidia-ml-py`, imported as `pynvml`) is
optional and only asked where CUDA is. Both take their library as a parameter, the seam the tests
use; neither has run on a GPU here.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

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


def _torch_cuda():
    torch = sys.modules.get("torch")
    return getattr(torch, "cuda", None) if torch is not None else None


def cuda_peak(cuda=None, reset: bool = True) -> dict:
    """This process's GPU peak since the last reset: {'allocated_bytes', 'reserved_bytes'} from
    `torch.cuda.max_memory_allocated` / `max_memory_reserved` on its current device, then the peak
    counters reset (so each call measures one step). {} without torch loaded or without a GPU.
    `cuda`: torch.cuda or an object with the same functions (the tests' seam)."""
    cuda = _torch_cuda() if cuda is None else cuda
    try:
        if cuda is None or not cuda.is_available():
            return {}
        device = cuda.current_device()
        peak = {"allocated_bytes": int(cuda.max_memory_allocated(device)), "reserved_bytes": int(cuda.max_memory_reserved(device))}
        if reset:
            cuda.reset_peak_memory_stats(device)
        return peak
    except Exception:  # telemetry never stops a step
        return {}


def load_nvml():
    """The initialised `pynvml` module, or None (not installed, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def nvml_device_memory(nvml, visible: str | None = None, index: int = 0) -> dict:
    """NVML's memory of one CUDA device this process sees: {'total_bytes', 'used_bytes', 'mig'}.

    `visible`: CUDA_VISIBLE_DEVICES (indices, GPU-/MIG- UUIDs, or None for all); `index`: the
    position in it (the process's CUDA device). A MIG device is counted as itself: a MIG UUID is
    looked up as such, and a GPU in MIG mode is read through its first MIG instance (what CUDA
    exposes to a process that names the GPU), never as the whole GPU. {} when NVML cannot tell.
    """
    try:
        ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
        wanted = ids[index] if index < len(ids) else None
        if wanted is not None and not wanted.isdigit():
            handle = nvml.nvmlDeviceGetHandleByUUID(wanted)
            mig = wanted.startswith("MIG-")
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(int(wanted) if wanted is not None else index)
            mig = False
            current, _pending = nvml.nvmlDeviceGetMigMode(handle) if hasattr(nvml, "nvmlDeviceGetMigMode") else (0, 0)
            if current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
                handle, mig = _first_mig_instance(nvml, handle), True
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        return {"total_bytes": int(memory.total), "used_bytes": int(memory.used), "mig": mig}
    except Exception:
        return {}


def _first_mig_instance(nvml, handle):
    for position in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            return nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, position)
        except Exception:
            continue  # an empty slot
    raise LookupError("MIG mode is on but the GPU has no MIG instance")


@dataclass
class GpuPeaks:
    """One training process's GPU peaks: the last step's and the run's, in bytes, with its device's
    memory from NVML. `step()` after every optimiser step; {} / None throughout without a GPU."""

    cuda: object = None
    nvml: object = None
    run_allocated: int = 0
    run_reserved: int = 0
    device: dict = field(default_factory=dict)
    measured: bool = False

    def step(self) -> dict:
        """The step's peak (and the counters reset), folded into the run's."""
        peak = cuda_peak(self.cuda)
        if peak:
            self.measured = True
            self.run_allocated = max(self.run_allocated, peak["allocated_bytes"])
            self.run_reserved = max(self.run_reserved, peak["reserved_bytes"])
            if not self.device and self.nvml is not None:
                cuda = _torch_cuda() if self.cuda is None else self.cuda
                self.device = nvml_device_memory(self.nvml, os.environ.get("CUDA_VISIBLE_DEVICES"), int(cuda.current_device()))
        return peak

    def run_peak(self) -> dict:
        """{'allocated_bytes', 'reserved_bytes', 'device_total_bytes'} over the whole run; {} without a GPU."""
        self.step()  # what came after the last step (the final evaluation, the adapter's save)
        if not self.measured:
            return {}
        return {"allocated_bytes": self.run_allocated, "reserved_bytes": self.run_reserved,
                "device_total_bytes": self.device.get("total_bytes")}


def gpu_rank_rows(run_id: str, peaks: list[dict], estimate_bytes: int | None = None) -> list[dict]:
    """`budgets` rows of every training process's GPU (`peaks[i]` from rank i's `GpuPeaks.run_peak`):
    measured 'gpu_peak/rank i' (allocated), 'gpu_reserved_peak/rank i' and 'gpu_memory/rank i' (the
    device's memory per NVML), and, when given, the budget's 'gpu_peak/rank i' estimate (what one
    process puts on its GPU), so the Hardware page sets them side by side."""
    rows = []
    for rank, peak in enumerate(peaks):
        if not peak:
            continue
        figures = [("gpu_peak", peak.get("allocated_bytes"), "measured"), ("gpu_reserved_peak", peak.get("reserved_bytes"), "measured"),
                   ("gpu_memory", peak.get("device_total_bytes"), "measured"), ("gpu_peak", estimate_bytes, "estimate")]
        rows += [{"run_id": run_id, "component": f"{name}/rank {rank}", "bytes": int(n), "source": source}
                 for name, n, source in figures if n is not None]
    return rows
