"""The scorer registry: the names a run config's `scorer` may take, and what each one means.

Launch -> config (`scorer`) -> engine -> task. A scorer is a policy about reward and permission,
the same for every task (SPEC section 6): `outcome` pays the task's own reward and lets every
trajectory teach; `guarded` subtracts the verifier's penalties from that reward and vetoes
violating trajectories from the update (their penalised reward still counts in the group
baseline). Each task implements both (the refund task in `agentrl.tasks.refund.scoring`); an
engine lists which of them it accepts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScorerSpec:
    name: str
    title: str
    guarded: bool  # penalties from the verifier's flags, and a veto on ineligible trajectories
    description: str


SCORERS: dict[str, ScorerSpec] = {
    "outcome": ScorerSpec("outcome", "outcome-only", False,
                          "The task's own reward; every trajectory may teach, so a shortcut that pays is learned."),
    "guarded": ScorerSpec("guarded", "guarded", True,
                          "The task's reward minus the verifier's penalties; a violating trajectory is vetoed from the update."),
}

SCORER_VERSION = "1"
"""Bumped when what a scorer computes changes; promotion bundles record it."""


def get_scorer_spec(name: str) -> ScorerSpec:
    try:
        return SCORERS[name]
    except KeyError:
        raise ValueError(f"unknown scorer {name!r}; use one of {sorted(SCORERS)}") from None
