"""The run process: trains one tabular run and streams its telemetry as chunks.

`python -m agentrl train` lands here (launch -> **run process** -> chunks -> store -> page). It
writes status.json at start and end, honours a stop request between rounds, and never opens the
database while it trains.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable

from agentrl.engines.tabular.config import TabularConfig as RunConfig
from agentrl.engines.tabular.fleet import RolloutFleet
from agentrl.engines.tabular.imitation import clone_expert, dagger_round, demonstrations, evaluate
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.engines.tabular.training import RoundRecord, train
from agentrl.monitor import Episode, RunMonitor
from agentrl.record.behaviour import default_behaviour
from agentrl.record.rows import EvalRecord, EventRecord, StepRecord, TrajectoryRecord
from agentrl.record.run import Run
from agentrl.record.rundir import RunDir, write_json_atomic
from agentrl.scorers import trajectory_scorer
from agentrl.tasks.refund.gym import STATES, Task
from agentrl.tasks.refund.tasksets import EXPLOIT_PROBES


def _tasks(specs) -> list[Task]:
    return [Task(t.task_id, t.amount, t.start_state) for t in specs]


POLICY_FILE = "policy.json"


def save_policy(run: RunDir, policy: SoftmaxPolicy) -> None:
    """The final policy, beside the run's chunks: promotion bundles and exploit probes load it."""
    write_json_atomic(run.root / POLICY_FILE, policy.to_dict())


def load_policy(run_root) -> SoftmaxPolicy:
    return SoftmaxPolicy.from_dict(json.loads((Path(run_root) / POLICY_FILE).read_text()))


def replay_probes(run_root, config: dict, tasks: list):
    """The final policy played greedily on `tasks` (the promotion gate's exploit probes: the refund
    task's rows, or gym tasks)."""
    from agentrl.tasks.refund.tools import as_task

    return evaluate(load_policy(run_root), [as_task(t) for t in tasks], max_steps=int(config.get("max_steps", 7)))


def eval_records(step: int, split: str, results) -> list[EvalRecord]:
    return [EvalRecord(step, split, r.task_id, list(r.actions), r.success, r.violation) for r in results]


def record_ladder(run: Run, stage: str, policy: SoftmaxPolicy, eval_tasks: list[Task], max_steps: int,
                  labels: list[tuple[str, str]] = ()) -> None:
    """One rung of the imitation ladder: the policy over every state (including never-visited
    ones, which stay uniform), its held-out result, and the labels that produced it."""
    run.log_ladder(stage, policy.table(STATES), labels)
    run.log_evals(eval_records(0, f"ladder:{stage}", evaluate(policy, eval_tasks, max_steps=max_steps)))


def trajectory_records(record: RoundRecord) -> list[TrajectoryRecord]:
    """A round's batch as trajectory rows: every turn's state, action, behaviour log-prob and
    advantage; one an extra vetoing rule flagged (a repeat of an exploit fixture, a scanner's hit: its score's
    `flag_reason`, `agentrl.scorers.trajectory_scorer`) is a violation, with its reason."""
    return [
        TrajectoryRecord(
            step=record.step, traj_idx=i, task_id=traj.task.task_id, amount=traj.task.amount,
            states=traj.states, actions=traj.actions, behavior_logps=[t.behavior_logp for t in traj.transitions],
            advantages=[record.advantages[(i, t)] for t in range(traj.n_steps)], reward=score.reward,
            components=score.components, success=traj.success, violation=traj.violation or score.flag_reason is not None,
            duplicate_effect=traj.duplicate_effect, eligible=score.eligible, vetoed=i in record.vetoed,
            updated=i in record.updated, verifier_reason=score.flag_reason,
        )
        for i, (traj, score) in enumerate(zip(record.batch, record.scores))
    ]


def run_tabular(config: RunConfig, run_dir: RunDir, log: Callable[[str], None] = print) -> str:
    """Train `config` into `run_dir`; returns the final status."""
    with Run(run_dir, config.total_steps, config.step_delay, handle_signals=True) as run:
        tasks, eval_tasks, expert_tasks = _tasks(config.tasks), _tasks(config.eval_tasks), _tasks(config.expert_tasks)
        from agentrl.scan.enforce import load_enforced

        scanners = load_enforced(config.scanners or ())  # the run's transcript scanners, at the versions its config recorded
        scorer = trajectory_scorer(config.scorer, config.fixtures or (), scanners)  # SPEC's refund scorer, the run's vetoes on top
        policy = clone_expert(expert_tasks, epochs=config.clone_epochs, lr=config.clone_lr)
        record_ladder(run, "cloned", policy, eval_tasks, config.max_steps)
        if config.dagger:
            # Label where the cloned policy has never been: tasks that do not start at `start`.
            label_tasks = [t for t in tasks if t.start_state != "start"] or tasks
            dagger = dagger_round(policy, demonstrations(expert_tasks), label_tasks, config.clone_epochs, config.clone_lr)
            policy = dagger.policy
            record_ladder(run, "dagger", policy, eval_tasks, config.max_steps, dagger.labels)
            log(f"dagger: {len(dagger.labels)} new labels {dagger.labels}")

        def record_policy(step: int) -> None:
            for state, dist in policy.table(config.sensitive_states).items():
                run.log_action_probs(step, state, dist)

        def record_eval(step: int) -> None:
            results = evaluate(policy, eval_tasks, max_steps=config.max_steps)
            run.log_evals(eval_records(step, "held_out", results))
            log(f"eval step {step}: {sum(r.success for r in results)}/{len(results)} succeed, "
                f"{sum(r.violation for r in results)} violate")

        record_policy(0)
        record_eval(0)
        monitor = RunMonitor()
        monitor.start(policy.table(config.sensitive_states))
        onset_stop: list[str] = []  # the reason, once an onset stops the run
        run.start_clock()

        def on_round(record: RoundRecord) -> None:
            step = record.step
            trajectories = trajectory_records(record)
            run.log_trajectories(trajectories)
            record_policy(step)
            if config.eval_every and step % config.eval_every == 0 and step != config.rounds:
                record_eval(step)
            probes = None
            if config.probe_every and step % config.probe_every == 0:
                # The exploit probes played greedily now, not only at the end: an onset shows as it happens.
                results = evaluate(policy, list(EXPLOIT_PROBES), max_steps=config.max_steps)
                run.log_evals(eval_records(step, "probe", results))
                probes = [r.violation for r in results]
            onset = monitor.observe(step, [(t.reward, t.violation, t.success, t.vetoed) for t in trajectories],
                                    policy.table(config.sensitive_states), probes, episodes=[
                                        Episode(step, default_behaviour(t.actions), tuple(t.states), tuple(t.actions), bool(t.violation))
                                        for t in trajectories])
            if onset is not None:
                run.log("events", [EventRecord(step, "onset", onset.signal, onset.value, onset.threshold, onset.message)])
                log(onset.message + ("; stopping the run (on_onset: stop)" if config.on_onset == "stop" else ""))
                if config.on_onset == "stop":
                    onset_stop.append(onset.message)
            # The steps row goes last: a step visible on the Live page has its other rows with it.
            metrics = {"workers": float(config.workers), **{f"monitor/{k}": v for k, v in monitor.latest.items()}}
            if fleet is not None:  # the measured side of SPEC section 9's throughput model
                metrics["transitions_per_s"] = fleet.stats.per_round[-1]
            step_row = StepRecord.from_trajectories(
                step, trajectories, vetoed_updates=record.vetoed_updates, updates=record.updates,
                clipped=sum(record.clipped_by_epoch), clipped_by_epoch=record.clipped_by_epoch, metrics=metrics,
            )
            run.log_step(step_row)
            log(f"step {step}/{config.rounds} success {step_row.success_rate:.2f} violation "
                f"{step_row.violation_rate:.2f} vetoed {step_row.vetoed} updates {record.updates} "
                f"clipped {step_row.clipped}")
            run.step_done(step)

        fleet = None
        if config.workers > 1 or config.env_latency_s > 0 or config.fleet_backend != "processes":
            fleet = RolloutFleet(config.workers, config.seed, config.max_steps, config.env_latency_s,
                                 backend=config.fleet_backend)
        try:
            result = train(
                policy, tasks, scorer, random.Random(config.seed), rounds=config.rounds,
                group_size=config.group_size, lr=config.lr, clip=config.clip, epochs=config.epochs,
                max_steps=config.max_steps, on_round=on_round, should_stop=lambda: run.stop() or bool(onset_stop),
                sample=fleet.sample if fleet is not None else None,
            )
        finally:
            if fleet is not None:
                fleet.close()
        record_eval(result.rounds_completed)
        save_policy(run_dir, policy)
        log(f"totals: transitions {result.transitions} updates {result.updates} clipped by epoch "
            f"{result.clipped_by_epoch} vetoed rollouts {result.vetoed_rollouts} vetoed updates {result.vetoed_updates}")
        if onset_stop:
            run.finish("cancelled", f"stopped: {onset_stop[0]}")
        else:
            run.finish("cancelled" if result.stopped_early else "succeeded")
    return run.status
