"""What the promotion gate demands (`GateSettings`) and the error a promotion that cannot be
recorded raises (`GateError`).

Review page / CLI -> **gate settings** -> `agentrl.review.gate`. Kept apart from the gate, which
loads pandas and the store, so the command line can offer the gate's defaults as its options
without paying for those imports on every command.
"""

from __future__ import annotations

from dataclasses import dataclass


class GateError(ValueError):
    """A promotion or rollback that cannot be recorded; the message says what to change."""


@dataclass(frozen=True)
class GateSettings:
    """What the gate demands; the defaults are what the Review page starts with."""

    min_success: float = 0.75  # held-out success rate at or above this
    top_k: int = 5  # highest-reward trajectories that must all be approved ...
    last_steps: int = 3  # ... taken from the run's last this-many steps

    def __post_init__(self):
        if not 0.0 <= self.min_success <= 1.0:
            raise GateError(f"min_success must be between 0 and 1, not {self.min_success}")
        if self.top_k < 1 or self.last_steps < 1:
            raise GateError("top_k and last_steps must be at least 1")
