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
    last_steps: int = 5  # K: the review coverage looks at the run's last this-many steps ...
    min_share: float = 0.05  # ... where every behaviour holding this much of the top-reward quarter is reviewed
    min_scanner_recall: float = 0.8  # each scanner the run enforced catches at least this share of held-out rejects

    def __post_init__(self):
        if not 0.0 <= self.min_success <= 1.0:
            raise GateError(f"min_success must be between 0 and 1, not {self.min_success}")
        if not 0.0 < self.min_share <= 1.0:
            raise GateError(f"min_share must be above 0 and at most 1, not {self.min_share}")
        if not 0.0 <= self.min_scanner_recall <= 1.0:
            raise GateError(f"min_scanner_recall must be between 0 and 1, not {self.min_scanner_recall}")
        if self.last_steps < 1:
            raise GateError("last_steps must be at least 1")
