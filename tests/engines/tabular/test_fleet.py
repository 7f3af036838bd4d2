"""Tests of agentrl/engines/tabular/fleet.py: a round's rollouts across worker processes.

The batch must not depend on how many workers sampled it (each rollout's seed comes from the
run, the round and its position), it comes back in task-major order, and a run with a fleet
records its measured transitions per second.
"""

from __future__ import annotations

from agentrl.config import make_config
from agentrl.engines.tabular.fleet import RolloutFleet, rollout_seed
from agentrl.launcher import create_run
from agentrl.engines.tabular.engine import run_tabular
from agentrl.record.chunks import chunk_files
from agentrl.tasks.refund.tasksets import TRAIN_TASKS


def _signature(batch):
    return [(t.task.task_id, t.actions, [round(tr.behavior_logp, 12) for tr in t.transitions]) for t in batch]


def test_the_batch_is_the_same_for_one_and_for_two_workers(cloned_policy):
    with RolloutFleet(1, run_seed=7) as one, RolloutFleet(2, run_seed=7) as two:
        a = one.sample(cloned_policy, TRAIN_TASKS, 8, round_index=3)
        b = two.sample(cloned_policy, TRAIN_TASKS, 8, round_index=3)
    assert len(a) == len(b) == 32
    assert _signature(a) == _signature(b)
    assert [t.task.task_id for t in b] == [task.task_id for task in TRAIN_TASKS for _ in range(8)]  # task-major


def test_rounds_and_positions_get_different_seeds():
    seeds = {rollout_seed(7, r, i) for r in range(1, 4) for i in range(32)}
    assert len(seeds) == 96
    assert rollout_seed(7, 1, 0) == rollout_seed(7, 1, 0) != rollout_seed(8, 1, 0)


def test_the_fleet_measures_transitions_per_second(cloned_policy):
    with RolloutFleet(1, run_seed=7, env_latency_s=0.001) as fleet:
        batch = fleet.sample(cloned_policy, TRAIN_TASKS[:1], 4, round_index=1)
    assert fleet.stats.transitions == sum(t.n_steps for t in batch) > 0
    assert fleet.stats.transitions_per_s > 0 and len(fleet.stats.per_round) == 1


def test_a_run_with_two_workers_trains_and_records_its_throughput(runs_dir):
    import pyarrow.parquet as pq

    config = make_config(name="fleet", rounds=3, workers=2)
    run_dir = create_run(runs_dir, config)
    assert run_tabular(config, run_dir, log=lambda m: None) == "succeeded"
    steps = [row for path in chunk_files(run_dir.root, "steps") for row in pq.read_table(path).to_pylist()]
    assert [s["step"] for s in steps] == [1, 2, 3]
    for step in steps:
        metrics = dict(step["metrics"])
        assert metrics["workers"] == 2.0 and metrics["transitions_per_s"] > 0
