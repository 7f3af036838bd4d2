"""Shared fixtures of the test suite.

Fixtures are grouped by the part of the package they serve; each section is delimited so that
tests of another layer (store, launcher, UI) can add theirs without touching these.
"""

from __future__ import annotations

import random
import sys

import pytest

from agentrl.engines.tabular.imitation import clone_expert
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.tasks.refund.scoring import guarded_score, outcome_score
from agentrl.tasks.refund.tasksets import EXPERT_TASKS, TRAIN_TASKS
from agentrl.engines.tabular.training import TrainResult, train


# Tests under these folders load torch, transformers and TRL: marked `lm` here, in one place, so
# `make test-fast` (-m "not slow and not lm and not browser") can leave them out.
LM_TEST_PATHS = ("tests/engines/trl/", "tests/tasks/refund/test_tiny_model.py", "tests/tasks/refund/test_tools.py")


# `make test-parallel` runs the suite in two passes: the tests not marked `serial` on two pytest-xdist
# workers (`--dist loadgroup`), then the `serial` ones alone. Serial: the Ray tests (a cluster's
# job API answered slower than its 10 s request limit, and a job's actors went missing, with a
# browser test beside them on the other core) and the sandbox's resource-limit attacks (a fork bomb
# is told apart by which limit ended it, which depends on the rest of the machine), and every
# other sandbox test: one claims uids from a private lock folder, and claiming a uid ends every
# process of it (another worker's sandboxed test under that uid was killed); others check that
# no process of any sandbox uid is left, machine-wide, and met another worker's run mid-exit. The browser
# tests run one after another on one worker (group "browser"): each drives a dashboard and usually
# a training run, and two at once on two cores starve each other's pages.
SERIAL_PATHS = ("tests/test_ray_backend.py", "tests/test_ray_cluster.py", "tests/sandbox/")


def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath)
    for item in items:
        where = str(item.path).removeprefix(root + "/")
        if where.startswith(LM_TEST_PATHS):
            item.add_marker(pytest.mark.lm)
        if where.startswith(SERIAL_PATHS):
            item.add_marker(pytest.mark.serial)
        if item.get_closest_marker("browser") or {"browser", "page"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("browser"))


@pytest.fixture(autouse=True)
def _main_module_as_it_was():
    """Put `sys.modules['__main__']` back after each test. Streamlit's AppTest runs a page as
    `__main__` and leaves it there; a process pool started later in this process ('spawn', as the
    environment fleet's) then re-runs that page in each worker, which opens the default runs
    directory. The dashboard never starts a fleet in its own process, so only tests meet this."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _dashboard_services_released():
    """Release the dashboard's cached services after each test that opened a page (AppTest runs
    pages in this process): their ingest and maintenance threads stop and the store closes.
    Left running, every AppTest's threads ticked for the rest of the session, half a core by the
    end of tests/app/test_pages.py alone."""
    yield
    streamlit = sys.modules.get("streamlit")
    if streamlit is not None:
        streamlit.cache_resource.clear()


@pytest.fixture
def runs_dir(tmp_path):
    """A runs directory that does not exist yet; tests pass it explicitly (no global data dir)."""
    return tmp_path / "runs"


# ---------------------------------------------------------------------------------------------
# Training core (tests/test_policy.py ... tests/test_throughput.py, SPEC sections 1-9)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def cloned_start() -> SoftmaxPolicy:
    """SPEC 8's starting policy: the expert cloned on the two demonstrations, no DAgger round.

    Shared by the whole session and never trained: take `.copy()` (or `cloned_policy`).
    """
    return clone_expert(EXPERT_TASKS)


@pytest.fixture
def cloned_policy(cloned_start) -> SoftmaxPolicy:
    """A private copy of the cloned starting policy, free to change."""
    return cloned_start.copy()


def _train_from(cloned_start: SoftmaxPolicy, scorer) -> tuple[SoftmaxPolicy, TrainResult]:
    policy = cloned_start.copy()
    result = train(policy, TRAIN_TASKS, scorer, random.Random(7))
    return policy, result


@pytest.fixture(scope="session")
def outcome_run(cloned_start) -> tuple[SoftmaxPolicy, TrainResult]:
    """SPEC 8's outcome-only run, trained once per session: (trained policy, TrainResult). Read only."""
    return _train_from(cloned_start, outcome_score)


@pytest.fixture(scope="session")
def guarded_run(cloned_start) -> tuple[SoftmaxPolicy, TrainResult]:
    """SPEC 8's guarded run, trained once per session: (trained policy, TrainResult). Read only."""
    return _train_from(cloned_start, guarded_score)


# ---------------------------------------------------------------------------------------------
# End of the training-core section.
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Store, review and gate (tests/test_review.py, test_gate.py, test_compare_queries.py, pages)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _trained_pair_template(tmp_path_factory):
    """The two preset runs trained and ingested once per session (a template; never modified)."""
    from agentrl.config import load_preset
    from agentrl.launcher import create_run
    from agentrl.engines.tabular.engine import run_tabular
    from agentrl.store.ingest import ingest_once

    runs_dir = tmp_path_factory.mktemp("pair") / "runs"
    runs_dir.mkdir()
    ids = {}
    for preset in ("refund-outcome", "refund-guarded"):
        config = load_preset(preset)
        run = create_run(runs_dir, config)
        run_tabular(config, run, log=lambda message: None)
        ids[config.scorer] = run.run_id
    ingest_once(runs_dir)
    return runs_dir, ids


@pytest.fixture
def trained_pair(_trained_pair_template, tmp_path):
    """A private copy of the trained preset pair: (runs_dir, {'outcome': run_id, 'guarded': run_id})."""
    import shutil

    template, ids = _trained_pair_template
    runs_dir = tmp_path / "runs"
    shutil.copytree(template, runs_dir)
    return runs_dir, dict(ids)


@pytest.fixture
def pair_store(trained_pair):
    """(connection to the copied store, runs_dir, ids); closed after the test."""
    from agentrl.store.ingest import connect

    runs_dir, ids = trained_pair
    con = connect(runs_dir)
    yield con, runs_dir, ids
    con.close()
