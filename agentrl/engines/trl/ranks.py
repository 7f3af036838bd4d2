"""How the processes of one `trl` run agree, and what a process other than the main one records (nothing).

Inside the run's training processes (launch -> run process -> accelerate launch -> **ranks** ->
chunks). `agentrl.engines.trl.engine._train` is the same code in every process; where the
processes must act together it asks a `Ranks`:

- `whole_step`: every process holds its slice of a step's rollouts (TRL splits the generation
  batch by process, in rank order); the slices are gathered, on every process at the same point
  of the step, into the whole batch, renumbered 0..N-1 in TRL's global order. So a step's
  trajectories are the whole batch, recorded once, by the main process.
- `agree`: a decision only the main process can take (Cancel, the onset monitor's stop) is
  broadcast from it, so every process stops after the same step; one process stopping alone
  would leave the others waiting in the next step's collective.
- `sums`, `save_adapter`: run totals over every process; the adapter saved the way the chosen
  sharding needs (every process takes part, the main one writes).

One process (`Ranks()`, the default): every call returns what it is given, and the run is what
it always was. `SilentRun` stands in for the `Run` writer on the other processes: they compute
what the main one computes (so sharded weights gather in step) and write nothing, never the run
folder's chunks or status. Collectives come from accelerate (`accelerate.utils`), loaded only
when there are several processes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from agentrl.record.rundir import RunDir


class Ranks:
    """The processes of one run: this one's index (0 is the main process, the one that records) and their count."""

    def __init__(self, index: int = 0, count: int = 1, sharded_weights: bool = False):
        if not 0 <= index < count:
            raise ValueError(f"process index {index} is not among {count} processes")
        self.index, self.count = index, count
        self.sharded_weights = sharded_weights  # ZeRO-3 / FSDP: no process holds the whole adapter

    @property
    def main(self) -> bool:
        return self.index == 0

    @property
    def many(self) -> bool:
        return self.count > 1

    def whole_step(self, records: list, batch: Any) -> tuple[list, Any]:
        """This process's trajectory records and `VetoBatch` -> the whole step's, in TRL's global
        order (process 0's slice first). Called by every process at the same point of a step."""
        if not self.many:
            return records, batch
        from accelerate.utils import gather_object

        from agentrl.engines.trl.veto import VetoBatch

        # Environments stay where they are: TRL reuses them, and they need not pickle.
        parts = gather_object([(records, dataclasses.replace(batch, environments=[]))])
        whole = [dataclasses.replace(record, traj_idx=i) for i, record in enumerate(r for rows, _ in parts for r in rows)]
        merged = VetoBatch(
            vetoed=[v for _, b in parts for v in b.vetoed], advantages=[a for _, b in parts for a in b.advantages],
            prompts=[p for _, b in parts for p in b.prompts], completions=[c for _, b in parts for c in b.completions],
            loss_tokens=parts[0][1].loss_tokens,  # TRL's num_items_in_batch is summed over every process already
            updated=[u for _, b in parts for u in b.updated], in_loss_mask=[m for _, b in parts for m in b.in_loss_mask],
        )
        return whole, merged

    def agree(self, flag: bool) -> bool:
        """The main process's `flag`, on every process (each must call it at the same point)."""
        if not self.many:
            return flag
        from accelerate.utils import broadcast_object_list

        return bool(broadcast_object_list([bool(flag)], from_process=0)[0])

    def sums(self, values: list[int]) -> list[int]:
        """`values` summed over every process (run totals such as vetoed rollouts)."""
        if not self.many:
            return values
        from accelerate.utils import gather_object

        per_process = gather_object([list(values)])
        return [sum(column) for column in zip(*per_process)]

    def gather(self, value: Any) -> list:
        """`value` of every process, in rank order, on every process (each must call it at the same point)."""
        if not self.many:
            return [value]
        from accelerate.utils import gather_object

        return list(gather_object([value]))

    def save_adapter(self, trainer: Any, path: Path) -> None:
        """The trained LoRA adapter into `path`: PEFT's `save_pretrained` by the main process (every
        process holds the whole adapter). Weights sharded by ZeRO-3 or FSDP: the Trainer's
        `save_model`, which every process calls (it gathers them) and the main one writes."""
        if self.sharded_weights and self.many:
            trainer.save_model(str(path))
        elif self.main:
            trainer.model.save_pretrained(str(path))


class SilentRun:
    """The `Run` writer's face on a process other than the main one: it takes every call and writes
    nothing. Stop requests are the main process's to see (`Ranks.agree`), so `stop()` is False."""

    def __init__(self, run_dir: RunDir):
        self.dir = run_dir
        self.run_id = run_dir.run_id
        self.writer = self  # `run.writer.flush_soon()`
        self.error: str | None = None
        self.peak_rss_bytes = 0
        self.gpu_peak_bytes: int | None = None
        self.closed = False

    def stop(self) -> bool:
        return False

    stop_requested = stop

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    log = log_trajectories = log_step = log_evals = log_action_probs = log_budget = _nothing
    step_done = start_clock = flush_soon = _nothing
