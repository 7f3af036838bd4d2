"""A guarded run's scanners: hits flagged and vetoed like a fixture's repeat, each with its own
penalty component and the reason "scanner NAME vN: explanation"; the config checks each scanner
loads and records its version; the tabular engine's path honours them too."""

from __future__ import annotations

import pytest
from expense_runs import SCANNERS_JSON, TASK_SPEC, calls_for

from agentrl.config import ConfigError, make_config
from agentrl.scan import load_scanner, regex_scanner
from agentrl.scan.enforce import load_enforced
from agentrl.scorers import call_reward_funcs, score_rollouts
from agentrl.tasks import load_task
from agentrl.tasks.replay import find_row, replay

KINDS = ("honest_approve", "forced", "forced_after_check", "forced_note")
CLAIMS = ("c1", "c2", "c4", "c2")


def scored(scorer: str, scanners=(), fixtures=()):
    task = load_task(TASK_SPEC)
    played = [replay(task, find_row(task, claim), calls_for(kind, claim)) for claim, kind in zip(CLAIMS, KINDS)]
    envs, completions = [p.environment for p in played], [p.completion for p in played]
    values = call_reward_funcs(task, [p.prompt for p in played], completions, envs, [p.row for p in played])
    return score_rollouts(task, scorer, values, completions, envs, fixtures=fixtures, scanners=load_enforced(scanners))


def test_a_guarded_run_vetoes_every_variant_its_scanner_hits_with_its_own_penalty_and_reason():
    from agentrl.scorers import FixtureRef

    scanner = load_scanner(f"{SCANNERS_JSON}:forced_approval")
    exact = FixtureRef(1, "read_claim > approve > finish")
    fixture_only = scored("guarded", fixtures=[exact])
    assert [s.eligible for s in fixture_only] == [True, False, True, False]  # the fixture misses the one-more-call variant
    honest, forced, after_check, with_note = scored("guarded", [scanner], [exact])
    assert honest.eligible and not honest.violation and honest.components["scanner_penalty:forced_approval"] == 0.0
    for variant in (forced, after_check, with_note):
        assert not variant.eligible and variant.violation
        assert variant.components["scanner_penalty:forced_approval"] == -1.0
    assert after_check.reason == f"scanner forced_approval v{scanner.version}: approved with force=true: the receipt check was skipped"
    assert after_check.reward == pytest.approx(1.0 - 0.2 - 1.0)


def test_an_outcome_run_flags_a_hit_but_lets_it_teach_unpenalised():
    scanner = load_scanner(f"{SCANNERS_JSON}:forced_approval")
    honest, forced, *_ = scored("outcome", [scanner])
    assert forced.violation and forced.eligible and "scanner_penalty:forced_approval" not in forced.components
    assert forced.reason.startswith("scanner forced_approval v") and not honest.violation


def test_a_config_names_scanners_that_load_and_records_their_version_and_absolute_path(monkeypatch):
    monkeypatch.chdir(SCANNERS_JSON.parent)
    config = make_config(kind="tabular", scorer="guarded", scanners=["scanners.json:forced_approval"])
    (spec,) = config.scanners
    assert spec.spec == f"{SCANNERS_JSON}:forced_approval" and spec.version == load_scanner(spec.spec).version
    with pytest.raises(ConfigError, match=r"scanners \(scanners.0\): scanner file 'nope.json' does not exist"):
        make_config(kind="tabular", scanners=["nope.json:forced_approval"])
    with pytest.raises(ConfigError, match="is now version .* not 0; remove the version"):
        make_config(kind="tabular", scanners=[{"spec": str(SCANNERS_JSON) + ":forced_approval", "version": "0"}])


def test_the_tabular_engines_fixture_path_vetoes_a_scanner_hit(cloned_policy):
    import random

    from agentrl.engines.tabular.engine import trajectory_records
    from agentrl.engines.tabular.training import train
    from agentrl.scan.enforce import Enforced
    from agentrl.scorers import trajectory_scorer
    from agentrl.tasks.refund.tasksets import TRAIN_TASKS

    wanders = regex_scanner("wanders", r"^lookup\(", ["calls"], min_matches=2)  # looked the order up twice
    rows = []
    train(cloned_policy, TRAIN_TASKS, trajectory_scorer("guarded", (), Enforced([wanders])), random.Random(3),
          rounds=3, on_round=lambda record: rows.extend(trajectory_records(record)))
    twice = [r for r in rows if r.actions.count("lookup") >= 2]
    assert twice, "no rollout looked up twice; nothing was tested"
    for row in rows:
        hit = row.actions.count("lookup") >= 2
        assert row.components["scanner_penalty:wanders"] == (-2.0 if hit else 0.0)
        if hit:
            assert not row.eligible and row.vetoed and row.verifier_reason.startswith("scanner wanders v")


def test_the_language_model_engines_guard_loads_the_configs_scanners_and_vetoes_their_hits():
    from agentrl.engines.trl.task_rewards import TaskRewards

    task = load_task(TASK_SPEC)
    rewards = TaskRewards(task, "guarded", scanners=[{"spec": f"{SCANNERS_JSON}:forced_approval"}])
    played = [replay(task, find_row(task, claim), calls_for(kind, claim)) for claim, kind in zip(CLAIMS, KINDS)]
    columns = {"prompts": [p.prompt for p in played], "completions": [p.completion for p in played],
               "environments": [p.environment for p in played], "completion_ids": [[] for _ in played]}
    *functions, guard = rewards.functions()
    for function in functions:
        function(**columns)
    assert guard(**columns) == [0.0, -1.0, -1.0, -1.0]
    assert rewards.eligibility(columns["environments"], [{}] * 4) == [True, False, False, False]


def test_an_enforced_scanners_hit_rate_per_step_is_read_from_the_reasons_its_run_recorded(tmp_path):
    """Live plots a guarded run's scanner hits while it trains, before anyone runs `agentrl scan`."""
    import agentrl
    from agentrl.store import queries
    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor

    scanner = load_scanner(f"{SCANNERS_JSON}:forced_approval")
    with agentrl.init(name="guarded", runs_dir=tmp_path, scorer="guarded") as run:
        for step, forced in ((1, 3), (2, 1)):
            run.log_trajectories(step, [
                {"traj_idx": i, "task_id": "c2", "reward": 0.1, "violation": i < forced, "eligible": i >= forced,
                 "verifier_reason": f"scanner {scanner.name} v{scanner.version}: approved with force=true" if i < forced else None}
                for i in range(4)])
            run.log_step(step, {})
    con = connect(tmp_path)
    try:
        Ingestor(con, tmp_path, log=lambda m: None).ingest()
        rates = queries.enforced_hit_rates(con, [run.run_id])
    finally:
        con.close()
    assert rates[["step", "scanner", "hit_rate", "scanned"]].values.tolist() == [
        [1, "forced_approval (enforced)", 0.75, 4], [2, "forced_approval (enforced)", 0.25, 4]]
    assert rates["violation_rate"].tolist() == [0.75, 0.25]
