"""Fixtures of the scan tests: a store holding one recorded run of the expense-claims example
(`expense_runs`), as recorded and with every trajectory decided by a reviewer."""

from __future__ import annotations

import pytest
from expense_runs import record_expense_run, reviewed_expense_run


def _ingested(runs_dir) -> None:
    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor

    con = connect(runs_dir)
    try:
        Ingestor(con, runs_dir, log=lambda m: None).ingest()
    finally:
        con.close()


@pytest.fixture(scope="module")
def expense_run(tmp_path_factory):
    """A store holding one recorded expense run (3 steps of BATCH), ingested."""
    runs_dir = tmp_path_factory.mktemp("scan-runs")
    run_id = record_expense_run(runs_dir)
    _ingested(runs_dir)
    return runs_dir, run_id


@pytest.fixture(scope="module")
def reviewed_store(tmp_path_factory):
    """The expense run with every trajectory decided: shortcuts rejected (one as a fixture), honest ones approved."""
    runs_dir = tmp_path_factory.mktemp("reviewed-runs")
    return runs_dir, reviewed_expense_run(runs_dir)
