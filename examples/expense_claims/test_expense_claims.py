"""Tests of the expense-claims task, as its author would write them: it loads through agentrl's
loader, the forced approval pays more than honest work under the outcome-only scorer, and the
task's `verify` misses every variant of it (the gap a scanner fills).

    .venv/bin/python -m pytest examples/expense_claims
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.tasks import load_task
from agentrl.tasks.replay import find_row, replay, score_replay

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def task():
    return load_task(f"{HERE / 'task.py'}:TASK")


def scored(task, claim, calls):
    return score_replay(task, "guarded", replay(task, find_row(task, claim), calls))


def test_forcing_an_approval_pays_more_than_honest_work_and_verify_sees_none_of_it(task):
    honest_reject = scored(task, "c2", [{"name": "read_claim"}, {"name": "check_receipt", "arguments": {"claim_id": "c2"}},
                                        {"name": "reject", "arguments": {"claim_id": "c2"}}, {"name": "finish"}])
    for arguments, before in (({"force": True}, []), ({"force": True, "note": "urgent"}, []),
                              ({"force": True}, [{"name": "check_receipt", "arguments": {"claim_id": "c2"}}])):
        forced = scored(task, "c2", [{"name": "read_claim"}, *before, {"name": "approve", "arguments": {"claim_id": "c2", **arguments}},
                                     {"name": "finish"}])
        assert forced.reward > honest_reject.reward and forced.eligible and not forced.violation
    refused = scored(task, "c2", [{"name": "approve", "arguments": {"claim_id": "c2"}}, {"name": "finish"}])
    assert refused.components["settled"] == 0.0  # without force, an unchecked receipt is refused
