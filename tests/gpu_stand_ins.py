"""Stand-ins for torch.cuda's memory counters and for NVML (`pynvml`), for the GPU paths' tests on a
machine without a GPU: each stands in for the library's interface, never for a component of ours."""

from __future__ import annotations

from types import SimpleNamespace

GIB = 2**30


class FakeCuda:
    """torch.cuda's peak counters: `allocate` moves the current figure, the peak follows it until reset."""

    def __init__(self, available: bool = True):
        self.available = available
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self.resets = 0

    def allocate(self, allocated: int, reserved: int) -> None:
        self.allocated, self.reserved = allocated, reserved
        self.peak_allocated = max(self.peak_allocated, allocated)
        self.peak_reserved = max(self.peak_reserved, reserved)

    def is_available(self):
        return self.available

    def current_device(self):
        return 0

    def max_memory_allocated(self, device):
        return self.peak_allocated

    def max_memory_reserved(self, device):
        return self.peak_reserved

    def reset_peak_memory_stats(self, device):
        self.resets += 1
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


class FakeNvml:
    """pynvml over one H100 (80 GB) split into MIG instances of 10 GB, or not split."""

    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, mig: bool):
        self.mig = mig
        self.gpu = SimpleNamespace(uuid="GPU-aaaa", total=80 * GIB, used=30 * GIB)
        self.instances = [SimpleNamespace(uuid=f"MIG-{i}", total=10 * GIB, used=i * GIB) for i in range(7)]

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index != 0:
            raise ValueError("no such GPU")
        return self.gpu

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return next(h for h in [self.gpu, *self.instances] if h.uuid == uuid)

    def nvmlDeviceGetMigMode(self, handle):
        return (1, 1) if self.mig else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        return self.instances[index]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=handle.total, used=handle.used, free=handle.total - handle.used)
