"""The memory budget of a run on several processes: each one's share under the sharding chosen, and all of them together.

Launch (preflight) -> `agentrl.engines.trl.budget` (SPEC section 11, one process) -> **sharding**
-> the preflight table and refusal, and the run's `budgets` rows. A run of one process never
comes here: its budget is `budget.Budget`, unchanged.

What each process holds, per strategy (`agentrl.engines.trl.config.STRATEGIES`), with N processes
and the LoRA adapter's 16 bytes per trainable parameter split as 4 (weight) + 4 (gradient) + 8
(Adam's two moments):

| strategy | base weights | adapter weight | gradients | optimiser state |
| --- | --- | --- | --- | --- |
| ddp | all | all | all | all |
| zero1 | all | all | all | 1/N |
| zero2 | all | all | 1/N | 1/N |
| zero3, fsdp | 1/N | 1/N | 1/N | 1/N |

Each process generates its own share of the step's rollouts (1/N of the KV cache), runs its own
loss pass (the same activations and logits as one process) and its own Python + torch runtime,
and scores its rollouts (its own sandbox room). With LoRA the gradients and optimiser state are
small, so ZeRO-1 and -2 change little; only ZeRO-3 and FSDP split the weights, which dominate.
Shares are rounded up to whole bytes. A gathered layer under ZeRO-3/FSDP (one layer's weights at
a time) is not counted.

Where the memory is: on CPU every process shares the machine's memory, so all N processes, the
`accelerate launch` process and the OS reserve must fit in it. On GPUs each process has its own
device: one process's weights, adapter, KV cache and activations must fit in one GPU, and the
host holds N runtimes and sandboxes, the launcher and the OS reserve.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agentrl.engines.trl.budget import _LABELS, _REMEDIES, Budget, format_bytes
from agentrl.engines.trl.config import STRATEGIES

WEIGHT_BYTES, GRADIENT_BYTES, OPTIMIZER_BYTES = 4, 4, 8  # of a trainable fp32 parameter under Adam (16 in all)
DEVICE_PARTS = ("weights", "adapter", "kv_cache", "activations_logits")  # what lives on a GPU
LABELS = {**_LABELS, "launcher": "accelerate launch"}
_SPLITS = {
    "ddp": "every process holds all weights, gradients and optimiser state",
    "zero1": "the optimiser state is split across the processes",
    "zero2": "the optimiser state and gradients are split across the processes",
    "zero3": "weights, gradients and optimiser state are split across the processes",
    "fsdp": "weights, gradients and optimiser state are split across the processes",
}


def _share(n_bytes: int, processes: int, sharded: bool) -> int:
    return -(-n_bytes // processes) if sharded else n_bytes  # rounded up: a share is never under-counted


def shard_state(strategy: str, processes: int, weights_bytes: int, trainable_parameters: int) -> tuple[int, int]:
    """(base weights, adapter with its gradients and optimiser state) held by one process, in bytes."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown sharding strategy {strategy!r}; use one of {list(STRATEGIES)}")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be a positive integer, not {processes!r}")
    split = set(STRATEGIES[strategy])
    weights = _share(weights_bytes, processes, "parameters" in split)
    adapter = (_share(trainable_parameters * WEIGHT_BYTES, processes, "parameters" in split)
               + _share(trainable_parameters * GRADIENT_BYTES, processes, "gradients" in split)
               + _share(trainable_parameters * OPTIMIZER_BYTES, processes, "optimizer" in split))
    return weights, adapter


def shard_budget(one: Budget, processes: int, strategy: str, launcher_bytes: int = 0, device_bytes: int | None = None) -> ShardedBudget:
    """The budget of `processes` processes from `one`, the budget of one process that runs the
    whole step (SPEC 11's arithmetic): its weights and adapter are shared out by `strategy`, its KV
    cache split by process. `device_bytes`: memory of one GPU (each process has its own); None:
    the processes share `one.machine_bytes` (CPU)."""
    weights, adapter = shard_state(strategy, processes, one.weights, one.trainable_parameters)
    process = dataclasses.replace(one, weights=weights, adapter=adapter, kv_cache=-(-one.kv_cache // processes))
    return ShardedBudget(process=process, processes=processes, strategy=strategy, launcher=int(launcher_bytes),
                         device_bytes=None if device_bytes is None else int(device_bytes))


@dataclass(frozen=True)
class ShardedBudget:
    """A run's memory budget on several processes: `process` is one process's share (its
    `machine_bytes` the machine's), with the same reading as `Budget` (components, used, free,
    run_total, fits, rows, table_text, refusal) for the whole run."""

    process: Budget
    processes: int
    strategy: str
    launcher: int = 0
    """The `accelerate launch` process (it imports torch), once."""
    device_bytes: int | None = None
    """Memory of one GPU, when every process has its own; None: they share the machine's memory (CPU)."""

    @property
    def machine_bytes(self) -> int:
        return self.process.machine_bytes

    @property
    def per_process(self) -> int:
        """One process's memory: its components but the OS reserve."""
        return self.process.run_total

    @property
    def per_device(self) -> int:
        """What one process puts on its GPU."""
        return sum(getattr(self.process, name) for name in DEVICE_PARTS)

    def components(self) -> list[tuple[str, int]]:
        """(component, bytes) of everything the run sets aside: each process's parts times N, the launcher once, the OS reserve."""
        parts = [(name, n * self.processes) for name, n in self.process.components() if name != "os_reserve"]
        return parts + [("launcher", self.launcher), ("os_reserve", self.process.os_reserve)]

    @property
    def run_total(self) -> int:
        """The run's own memory, all processes and the launcher: what its process tree should peak at."""
        return self.processes * self.per_process + self.launcher

    @property
    def used(self) -> int:
        return self.run_total + self.process.os_reserve

    @property
    def host_used(self) -> int:
        """Host memory: everything on CPU; on GPUs what stays on the host (runtimes, sandboxes, launcher, OS)."""
        if self.device_bytes is None:
            return self.used
        return self.used - self.processes * self.per_device

    @property
    def host_free(self) -> int:
        return self.machine_bytes - self.host_used

    @property
    def device_free(self) -> int | None:
        return None if self.device_bytes is None else self.device_bytes - self.per_device

    @property
    def free(self) -> int:
        """What is left where it is tightest (the machine on CPU; a GPU or the host on GPUs); negative: it does not fit."""
        return self.host_free if self.device_bytes is None else min(self.host_free, self.device_free)

    @property
    def fits(self) -> bool:
        return self.free >= 0

    def rows(self, run_id: str) -> list[dict]:
        """`budgets` rows (source 'estimate') for the whole run: 'total' lines up with the measured
        peak of the run's process tree (every process and the launcher)."""
        figures = [*self.components(), ("free", self.free), ("total", self.run_total)]
        return [{"run_id": run_id, "component": name, "bytes": int(n), "source": "estimate"} for name, n in figures]

    def where(self) -> str:
        on = f"{self.processes} GPUs, one per process" if self.device_bytes is not None else "CPU, sharing this machine's memory"
        return f"{self.processes} processes, {self.strategy}: {_SPLITS[self.strategy]}; on {on}"

    def table_text(self) -> str:
        """One process's share and the run's total, per component, for the preflight."""
        one, n = self.process, self.processes
        width = max(len(label) for label in LABELS.values())
        gpu = self.device_bytes is not None
        head = ("per GPU" if gpu else "per process", f"{n} processes")
        lines = [f"{'':<{width}}  {head[0]:>11}  {head[1]:>11}"]

        def line(label: str, each: int | None, total: int | None) -> None:
            cells = [format_bytes(v) if v is not None else "" for v in (each, total)]
            lines.append(f"{label:<{width}}  {cells[0]:>11}  {cells[1]:>11}")

        for name, each in one.components():
            if each and name != "os_reserve":
                line(LABELS[name] + (" (host)" if gpu and name not in DEVICE_PARTS else ""), each, each * n)
        if self.launcher:
            line(LABELS["launcher"] + (" (host)" if gpu else ""), None, self.launcher)
        line(LABELS["os_reserve"], None, one.os_reserve)
        if gpu:
            line("GPU free", self.device_free, None)
            line("GPU memory", self.device_bytes, None)
            line("host free", None, self.host_free)
        else:
            line("free", None, self.free)
        line("machine", None, self.machine_bytes)
        count = one.count_line()  # "(1.72B parameters, 17.4M trainable)"
        lines.append(f"{count[:-1]}; {self.where()})")
        if one.counted_by:
            lines.append(f"counted from {one.counted_by}")
        return "\n".join(lines)

    def refusal(self) -> str | None:
        """One line saying why the run cannot start and what to change; None when it fits."""
        if self.fits:
            return None
        driven = sorted(((name, n) for name, n in self.process.components() if name in _REMEDIES), key=lambda item: item[1], reverse=True)[:2]
        dominant = "; ".join(f"{_LABELS[name]} {format_bytes(n)} (use {_REMEDIES[name]})" for name, n in driven)
        shard = "" if STRATEGIES[self.strategy] == STRATEGIES["zero3"] else "; strategy 'zero3' or 'fsdp' splits the weights across GPUs"
        if self.device_bytes is not None and self.device_free < 0:
            return (f"memory budget does not fit on a GPU: each of the {self.processes} processes needs {format_bytes(self.per_device)} "
                    f"on its GPU but a GPU has {format_bytes(self.device_bytes)} ({format_bytes(-self.device_free)} short); "
                    f"largest per process: {dominant}{shard}")
        return (f"memory budget does not fit: {self.processes} processes x {format_bytes(self.per_process)} + the launcher "
                f"and OS reserve need {format_bytes(self.host_used)} but the machine has {format_bytes(self.machine_bytes)} "
                f"({format_bytes(-self.host_free)} short); use fewer processes, or shrink each: largest per process: {dominant}")
