"""What a launch starts, before any process does: the configs of one click (the outcome-vs-guarded
pair, N seeds of a config, the id the runs of one launch share) and the exploit fixtures a new run's
config takes from the reviews so far. `agentrl.launcher` starts them."""

from __future__ import annotations

import secrets
from pathlib import Path

from agentrl.config import RunConfig
from agentrl.record.rundir import utc_now


def pair_configs(config: RunConfig) -> tuple[RunConfig, RunConfig]:
    """The outcome-vs-guarded pair of `config`: the same settings with each scorer, named
    `<base>-outcome` and `<base>-guarded` (a name already ending in either loses that ending)."""
    from agentrl.config import make_config

    settings = config.model_dump()
    base = config.name.removesuffix("-outcome").removesuffix("-guarded")
    return (make_config(**dict(settings, scorer="outcome", name=f"{base}-outcome")),
            make_config(**dict(settings, scorer="guarded", name=f"{base}-guarded")))


MAX_SEEDS = 16  # one click starts at most this many seeds of a config (twice that for a pair)


def seed_configs(config: RunConfig, seeds: int) -> list[RunConfig]:
    """`seeds` copies of `config` with seeds `config.seed`, `config.seed + 1`, ..., named
    `<name>-seed<N>` so each reads apart on every page (one seed: `config` itself). Runs that
    differ only in seed and name are one seed group on Compare (`agentrl.analysis.seed_groups`)."""
    from agentrl.config import ConfigError, make_config

    if seeds.__class__ is not int or not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"seeds must be a whole number from 1 to {MAX_SEEDS}, not {seeds!r}")
    if seeds == 1:
        return [config]
    settings = config.model_dump()

    def named(seed: int) -> str:  # a name holds 80 characters
        return config.name[:80 - len(f"-seed{seed}")] + f"-seed{seed}"

    return [make_config(**dict(settings, seed=config.seed + i, name=named(config.seed + i))) for i in range(seeds)]


def new_launch_group() -> str:
    """The id the runs of one launch share (a pair, N seeds): sortable by time, unique."""
    return f"launch-{utc_now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def with_fixtures(runs_dir: Path, config: RunConfig) -> RunConfig:
    """`config` with `fixtures` filled in, when it names none: the exploit fixtures of its task
    stored so far (the decisions log), so a run started after a review vetoes what it rejected and
    its config says which fixtures it used."""
    if config.fixtures is not None:
        return config
    from agentrl.config import ConfigError, make_config
    from agentrl.engines.registry import get_engine
    from agentrl.store.decisions import DecisionLogError, logged_fixtures
    from agentrl.tasks.loader import absolute_spec

    settings = config.model_dump()
    spec = get_engine(config.kind).task_spec(settings)
    try:
        found = logged_fixtures(runs_dir, absolute_spec(spec)) if spec else []
    except DecisionLogError as error:
        raise ConfigError(f"cannot read the exploit fixtures this run would veto: {error}") from None
    return make_config(**dict(settings, fixtures=found))
