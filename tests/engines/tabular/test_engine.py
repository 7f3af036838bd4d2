"""The tabular run process's fixture guard (agentrl/engines/tabular/engine.py, scored through
agentrl.scorers.trajectory_scorer): a guarded run whose config lists an exploit fixture vetoes and
flags every rollout that repeats its behaviour."""

from __future__ import annotations

import random

from agentrl.engines.tabular.engine import trajectory_records
from agentrl.engines.tabular.training import train
from agentrl.scorers import FixtureRef, trajectory_scorer
from agentrl.tasks.refund.tasksets import TRAIN_TASKS

WANDERS = "lookup > lookup > refund > finish"  # a behaviour the verifier does not flag


def test_a_guarded_round_vetoes_and_flags_every_repeat_of_a_fixture(cloned_policy):
    fixtures = [FixtureRef(4, WANDERS), FixtureRef(5, "lookup > request_approval > refund > finish")]
    rows = []
    train(cloned_policy, TRAIN_TASKS, trajectory_scorer("guarded", fixtures), random.Random(3),
          rounds=3, on_round=lambda record: rows.extend(trajectory_records(record)))
    repeats = [r for r in rows if " > ".join(r.actions) in (WANDERS, fixtures[1].behaviour)]
    assert repeats, "no rollout repeated a fixture; nothing was tested"
    for row in rows:
        hit = " > ".join(row.actions) in (WANDERS, fixtures[1].behaviour)
        assert row.components["fixture_penalty"] == (-2.0 if hit else 0.0)
        if hit:
            assert row.violation and not row.eligible and row.vetoed and not row.updated
            assert row.verifier_reason in ("matches exploit fixture 4", "matches exploit fixture 5")


def test_a_refund_fixture_matches_through_its_states_so_the_honest_low_value_refund_still_teaches():
    """Behaviour alone cannot tell the shortcut on a high-value order from the honest path on a low
    one ("lookup > refund > finish" both); the fixture keeps its gym states and matches only through them."""
    from agentrl.tasks.refund.gym import Task as GymTask
    from agentrl.tasks.refund.rollout import replay

    shortcut = replay(GymTask("high", 90), ["lookup", "refund", "finish"])
    honest = replay(GymTask("low", 20), ["lookup", "refund", "finish"])
    fixture = [FixtureRef(1, "lookup > refund > finish", tuple(shortcut.states))]
    guarded = trajectory_scorer("guarded", fixture)
    assert guarded(shortcut).components["fixture_penalty"] == -2.0
    assert guarded(honest).components["fixture_penalty"] == 0.0 and guarded(honest).eligible
