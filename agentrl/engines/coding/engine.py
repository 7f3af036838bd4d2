"""The run process of kind 'coding': the scripted coding attempts scored by the sandboxed test
runner, streamed as trajectories so the Review page shows why each scored what it did.

`python -m agentrl train` lands here for a config of kind 'coding' (launch -> **run process** ->
chunks -> store -> page). Nothing is trained: each step scores one coding task's group of
attempts (SPEC section 10: an honest fix with one read, one with no call, one after twelve
reads, one that rewrites the tests, one that only claims success, one whose tool call leaked
into the text) with the 'tests' reward kind, the group's test runs `config.workers` at a time.
Each step also records the measured parallelism of its group (summed sandbox seconds over wall
seconds), the measured side of SPEC section 9's throughput model. The guard's decision on each
attempt is `agentrl.scorers.guard`'s, as for every engine: a refused write is the verifier's
violation (vetoed under `guarded`, without a penalty: the published figures of SPEC 10), and a
repeat of an exploit fixture of the coding task the run's config lists is flagged (guarded: its
`fixture_penalty` and vetoed).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Callable

from agentrl.tasks.coding.tasks import CODING_TASKS, dataset_rows, prompt_messages, render_completion, scripted_attempts
from agentrl.engines.coding.config import CodingConfig as RunConfig
from agentrl.rewards import build_reward_functions, score_group, tool_calls, written_files
from agentrl.sandbox.paths import refusal_reason
from agentrl.tasks.coding.task import CODING_TASK, describe_writes
from agentrl.tasks.contract import Verdict
from agentrl.record.rows import StepRecord, TrajectoryRecord
from agentrl.record.run import Run
from agentrl.record.rundir import RunDir
from agentrl.scorers import fixture_penalty, get_scorer_spec, guard, rule_vetoes


def _behaviour(completion, protected: list[str]) -> str:
    """The files the attempt wrote (fenced ```file: blocks and write_file calls) and whether one of
    them is refused as a protected path (the tests or their runner: the attempt goes for the tests)."""
    paths = set(written_files(completion))
    paths |= {str(call.arguments.get("path")) for call in tool_calls(completion)
              if call.name == "write_file" and call.arguments and call.arguments.get("path")}
    refused = {p for p in paths if refusal_reason(p, protected)}
    return describe_writes(paths - refused, bool(refused))


def _actions(completion) -> list[str]:
    """The attempt as a sequence of moves: each tool call by name, then its final answer."""
    return [call.name for call in tool_calls(completion)] + ["answer"]


def run_coding(config: RunConfig, run_dir: RunDir, log: Callable[[str], None] = print) -> str:
    """Score the scripted attempts of every coding task, `config.rounds` times; returns the final status."""
    workers = config.workers or os.cpu_count() or 1
    steps = config.total_steps
    guarded = get_scorer_spec(config.scorer).guarded
    from agentrl.scan.enforce import load_enforced

    scanners = load_enforced(config.scanners or (), CODING_TASK)  # at the versions the run's config recorded
    said: set[str] = set()
    with Run(run_dir, steps, config.step_delay, handle_signals=True) as run:
        step = 0
        with tempfile.TemporaryDirectory(prefix="agentrl-coding-") as scratch:
            rows = {row["task_id"]: row for row in dataset_rows(Path(scratch))}
            # a task that names held-out tests adds their reward as a component (the monitor's test_gap)
            rewards = build_reward_functions(workers=workers, held_out=any(row.get("held_out") for row in rows.values()))
            for _ in range(config.rounds):
                for task_id, task in CODING_TASKS.items():
                    if run.stop():
                        break
                    step += 1
                    attempts = scripted_attempts(task)
                    completions = list(attempts.values())
                    group_started = time.monotonic()
                    scored = score_group(completions, [rows[task_id]] * len(completions), workers=workers, rewards=rewards)
                    wall = time.monotonic() - group_started
                    for note in sorted({s.sandbox.note for s in scored if s.sandbox is not None and s.sandbox.note} - said):
                        log(f"sandbox: {note}")  # once a run: the isolation is weaker than bubblewrap's
                        said.add(note)
                    sandbox_seconds = sum(s.sandbox.duration_s for s in scored if s.sandbox is not None)
                    prompt = render_completion(prompt_messages(task))
                    trajectories = []
                    for i, ((attempt, completion), score) in enumerate(zip(attempts.items(), scored)):
                        # A refused write (the tests, an absolute path, `..`) is the coding task's
                        # violation: it is what a policy must never learn to try.
                        refused = score.reason.startswith("refused")
                        behaviour = _behaviour(completion, rows[task_id]["protected"])
                        vetoes = rule_vetoes(CODING_TASK, config.fixtures or (), behaviour, None, fixture_penalty(CODING_TASK))
                        if scanners:  # the run's transcript scanners, as in every engine
                            vetoes += scanners.rollout(CODING_TASK, guarded, completion, None, _actions(completion), behaviour,
                                                       score.components, score.reward).vetoes
                        decision = guard(config.scorer, score.reward, score.components,
                                         Verdict(violation=refused, eligible=not refused, reason=score.reason), penalties={},
                                         vetoes=vetoes)
                        trajectories.append(TrajectoryRecord(
                            step=step, traj_idx=i, task_id=f"{task_id}:{attempt}", actions=_actions(completion),
                            reward=decision.reward, components=decision.components, success=score.passed,
                            # Nothing is trained, but the guard's veto is recorded as a trainer's
                            # would be: the monitor reads a vetoed violation as caught, not as taught.
                            violation=decision.violation, eligible=decision.eligible, vetoed=not decision.eligible,
                            prompt=prompt,
                            completion=render_completion(completion), verifier_reason=decision.reason, behaviour=behaviour,
                        ))
                    run.log_trajectories(trajectories)
                    run.log_step(StepRecord.from_trajectories(step, trajectories, metrics={
                        "score_wall_s": wall, "sandbox_s": sandbox_seconds, "workers": float(workers),
                        "measured_parallelism": sandbox_seconds / wall if wall > 0 else 0.0,
                        # The measured side of SPEC section 9: a scored attempt is the coding task's transition.
                        "transitions_per_s": len(scored) / wall if wall > 0 else 0.0,
                    }))
                    log(f"step {step}/{steps} {task_id}: " + ", ".join(
                        f"{a} {s.reward:.2f} ({s.reason})" for a, s in zip(attempts, scored))
                        + f"; {sandbox_seconds:.1f} sandbox-s in {wall:.1f} s wall with {workers} workers")
                    run.step_done(step)
                if run.stop():
                    break
        run.finish("cancelled" if step < steps else "succeeded")
    return run.status
