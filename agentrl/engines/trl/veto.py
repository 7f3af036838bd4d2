"""The veto on the LM path: an ineligible trajectory contributes no gradient at all (SPEC section 6).

Sits inside the LM run process, in the update of each GRPO step. `VetoGRPOTrainer` is TRL's
`GRPOTrainer` with one change to how a batch is used: after the rewards and advantages are
computed (the vetoed trajectories' penalised rewards stay in their group's baseline), the
completion-mask rows of the vetoed trajectories are zeroed and the loss normaliser is
recomputed, the same move TRL makes for truncated completions. With `loss_type='dapo'` that
gives the gradient of the batch without those rows (tests/engines/trl/test_veto.py pins it). Zeroing
an advantage or returning NaN/None from a reward is not a veto: the KL and entropy terms still
reach the row, and a NaN row leaves the baseline.

It also measures what it promises. During the backward pass of each update, a hook reads the
gradient that reaches every completion's token log-probabilities (and entropies): a row with any
non-zero gradient was updated. `vetoed_updates`, the vetoed rows that were nevertheless updated,
is the audit counter and must stay 0.

Relies on TRL private API (`_generate_and_score_completions`, `_compute_loss`,
`_get_per_token_logps_and_entropies`, the batch keys `completion_mask`, `tool_mask`,
`num_items_in_batch`, `advantages`), checked against trl==1.16.0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOTrainer

ROW_INDEX = "veto_row_index"  # batch key: each row's index in its generation batch (TRL shuffles rows)


def apply_veto(batch: dict[str, Any], vetoed: torch.Tensor, gather: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict[str, Any]:
    """Zero the completion-mask rows of `vetoed` and recompute the loss normaliser; returns `batch`.

    `vetoed` is a bool tensor, one entry per row. The advantages are left alone: they were
    computed with the vetoed rows' rewards in the group statistics, as they should be.
    """
    keep = (~vetoed.bool()).to(batch["completion_mask"].dtype).unsqueeze(1)
    batch["completion_mask"] = batch["completion_mask"] * keep
    tool_mask = batch.get("tool_mask")
    if tool_mask is not None:
        batch["tool_mask"] = tool_mask * keep.to(tool_mask.dtype)
        loss_mask = batch["completion_mask"] * batch["tool_mask"]
    else:
        loss_mask = batch["completion_mask"]
    total = loss_mask.sum()
    batch["num_items_in_batch"] = gather(total).sum() if gather is not None else total
    return batch


@dataclass
class VetoBatch:
    """What one generation batch was and what its update did, row by row (in generation order)."""

    vetoed: list[bool]
    advantages: list[float]
    prompts: list[str]
    completions: list[str]
    environments: list[Any] = field(default_factory=list)  # TRL reuses them: read before the next step
    loss_tokens: int = 0  # tokens in the loss after the veto
    updated: list[bool] = field(default_factory=list)  # a non-zero gradient reached the row
    in_loss_mask: list[bool] = field(default_factory=list)  # the row had tokens in the mask the loss used

    @property
    def n_vetoed(self) -> int:
        return sum(self.vetoed)

    @property
    def vetoed_updates(self) -> int:
        """The audit: vetoed rows that got gradient, or were in the loss mask at all (must be 0)."""
        return sum(v and (u or m) for v, u, m in zip(self.vetoed, self.updated, self.in_loss_mask))

    @property
    def updates(self) -> int:
        """Non-vetoed rows that got gradient."""
        return sum((not v) and u for v, u in zip(self.vetoed, self.updated))


def _default_eligibility(environments: Sequence[Any] | None, inputs: Sequence[dict]) -> list[bool]:
    return [True] * len(inputs)


class VetoGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose ineligible completions are masked out of the update.

    `eligibility(environments, inputs) -> list[bool]` says, after the rewards are computed, which
    completions may teach (by default all; the engine passes its task's guard,
    `agentrl.engines.trl.task_rewards.TaskRewards.eligibility`). Keeps `last_batch` (a `VetoBatch`) and the run totals `vetoed_total` and
    `vetoed_updates_total` (the audit).
    """

    def __init__(self, *args: Any, eligibility: Callable[[Sequence[Any] | None, Sequence[dict]], list[bool]] | None = None, **kwargs: Any):
        self.eligibility = eligibility or _default_eligibility
        self.last_batch: VetoBatch | None = None
        self.vetoed_total = 0
        self._vetoed_updates_done = 0  # audit of the batches before `last_batch`
        self._grad_rows: torch.Tensor | None = None  # row indices of the micro-batch whose loss is being built
        super().__init__(*args, **kwargs)

    # -- rollouts and scores -> the vetoed batch -------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict[str, Any]:
        batch = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return batch  # an evaluation batch is never learned from
        rows = batch["completion_ids"].size(0)
        eligible = list(self.eligibility(self.environments, inputs))
        if len(eligible) != rows:
            raise ValueError(f"eligibility returned {len(eligible)} flags for {rows} completions")
        vetoed = torch.tensor([not e for e in eligible], dtype=torch.bool, device=batch["completion_mask"].device)
        record = VetoBatch(
            vetoed=vetoed.tolist(),
            advantages=[float(a) for a in batch["advantages"].reshape(rows, -1)[:, 0].tolist()],
            prompts=self._decode_rows(batch["prompt_ids"], batch["prompt_mask"]),
            completions=self._decode_rows(batch["completion_ids"], batch["completion_mask"]),
            environments=list(self.environments or []),
        )
        apply_veto(batch, vetoed, gather=self.accelerator.gather)
        record.loss_tokens = int(batch["num_items_in_batch"].item())
        record.updated = [False] * rows
        record.in_loss_mask = [False] * rows
        batch[ROW_INDEX] = torch.arange(rows, device=vetoed.device)
        if self.last_batch is not None:
            self._vetoed_updates_done += self.last_batch.vetoed_updates
        self.last_batch = record
        self.vetoed_total += record.n_vetoed
        return batch

    def _decode_rows(self, ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
        return [self._tokenizer.decode(row[m.bool()].tolist(), skip_special_tokens=False) for row, m in zip(ids, mask)]

    # -- the update, measured ------------------------------------------------------------------

    def _compute_loss(self, model, inputs: dict[str, Any]):
        record, rows = self.last_batch, inputs.get(ROW_INDEX)
        if record is None or rows is None or not self.model.training:
            return super()._compute_loss(model, inputs)
        mask = inputs["completion_mask"] if inputs.get("tool_mask") is None else inputs["completion_mask"] * inputs["tool_mask"]
        for row, tokens in zip(rows.tolist(), mask.sum(dim=1).tolist()):
            record.in_loss_mask[row] = record.in_loss_mask[row] or tokens > 0
        self._grad_rows = rows
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._grad_rows = None

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        rows, record = self._grad_rows, self.last_batch
        if rows is not None and record is not None and torch.is_grad_enabled():
            for tensor in (logps, entropies):
                if tensor is not None and tensor.requires_grad:
                    tensor.register_hook(self._gradient_hook(rows.tolist(), record))
        return logps, entropies, aux

    @staticmethod
    def _gradient_hook(rows: list[int], record: VetoBatch):
        def hook(grad: torch.Tensor) -> None:
            reached = (grad.detach() != 0).reshape(grad.size(0), -1).any(dim=1).tolist()
            for row, hit in zip(rows, reached):
                record.updated[row] = record.updated[row] or hit

        return hook

    @property
    def vetoed_updates_total(self) -> int:
        """The audit over the run so far: vetoed rows that got gradient (must be 0)."""
        current = self.last_batch.vetoed_updates if self.last_batch is not None else 0
        return self._vetoed_updates_done + current
