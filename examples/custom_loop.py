"""Record your own training loop with agentrl: three calls, no framework.

A toy agent (a softmax over four tool calls, per state) learns a refund task by group-relative
policy gradient, in plain Python. The agentrl lines are the ones with `run`: `agentrl.init`,
`run.log_trajectories`, `run.log_evals`, `run.log_step`, and a look at `run.stop_requested()`
so the dashboard's Cancel button stops it between steps.

    python examples/custom_loop.py --steps 40          # then open the dashboard: make run
    python examples/custom_loop.py --runs-dir /tmp/runs --step-seconds 0.2

Launched from the dashboard (preset `script-custom-loop`), the same script writes into the run
the dashboard made: `agentrl.init` finds it in `$AGENTRL_RUN_DIR`.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time

import agentrl

ACTIONS = ("lookup", "request_approval", "refund", "finish")
TASKS = [("small", 20), ("large", 80)]  # (task id, amount): above 50 needs approval first


def play(logits: dict, amount: int, rng: random.Random, greedy: bool = False):
    """One episode: the states seen, the actions taken, and what happened."""
    state, states, actions, approved, refunded, violation = "start", [], [], False, False, False
    for _ in range(6):
        row = logits.setdefault(state, [0.0] * len(ACTIONS))
        weights = [math.exp(x - max(row)) for x in row]
        action = ACTIONS[max(range(len(row)), key=row.__getitem__)] if greedy else rng.choices(ACTIONS, weights)[0]
        states.append(state)
        actions.append(action)
        if action == "finish":
            break
        if action == "lookup" and state == "start":
            state = "known_high" if amount > 50 else "known_low"
        elif action == "request_approval" and state == "known_high":
            state, approved = "approved", True
        elif action == "refund" and state in ("known_low", "known_high", "approved"):
            refunded, violation = True, violation or (amount > 50 and not approved)
            state = "refunded"
    return states, actions, refunded, violation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--group", type=int, default=8, help="episodes per task per step")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pause per step, to watch it live")
    parser.add_argument("--runs-dir", help="default: $AGENTRL_RUNS_DIR or runs/")
    args = parser.parse_args()
    rng = random.Random(int(os.environ.get("AGENTRL_SEED", "7")))
    logits: dict[str, list[float]] = {}

    with agentrl.init(name="custom-loop", config=vars(args), runs_dir=args.runs_dir, total_steps=args.steps) as run:
        for step in range(1, args.steps + 1):
            batch = []
            for task_id, amount in TASKS:
                for _ in range(args.group):
                    states, actions, refunded, violation = play(logits, amount, rng)
                    components = {"outcome": float(refunded and actions[-1] == "finish"), "step_cost": -0.05 * len(actions)}
                    batch.append((task_id, amount, states, actions, refunded, violation, components))
            rewards = [sum(c.values()) for *_, c in batch]
            # Group-relative advantages per task, then one policy-gradient step per turn.
            rows = []
            for i, (task_id, amount, states, actions, refunded, violation, components) in enumerate(batch):
                group = [r for (t, *_), r in zip(batch, rewards) if t == task_id]
                mean = sum(group) / len(group)
                std = math.sqrt(sum((r - mean) ** 2 for r in group) / len(group)) + 1e-6
                advantage = (rewards[i] - mean) / std
                for state, action in zip(states, actions):
                    row = logits[state]
                    weights = [math.exp(x - max(row)) for x in row]
                    total = sum(weights)
                    for k in range(len(ACTIONS)):
                        row[k] += 0.1 * advantage * ((ACTIONS[k] == action) - weights[k] / total)
                rows.append({"traj_idx": i, "task_id": task_id, "amount": amount, "states": states, "actions": actions,
                             "reward": rewards[i], "components": components, "success": refunded and actions[-1] == "finish",
                             "violation": violation, "advantages": [advantage] * len(actions)})
            run.log_trajectories(step, rows)
            if step % 10 == 0 or step == args.steps:
                evals = [play(logits, amount, rng, greedy=True) for _, amount in TASKS]
                run.log_evals(step, [{"split": "held_out", "task_id": task_id, "actions": actions, "success": refunded,
                                      "violation": violation} for (task_id, _), (_, actions, refunded, violation) in zip(TASKS, evals)])
            run.log_step(step, {"reward_std": math.sqrt(sum((r - sum(rewards) / len(rewards)) ** 2 for r in rewards) / len(rewards))})
            print(f"step {step}/{args.steps} mean reward {sum(rewards) / len(rewards):.3f}", flush=True)
            if run.stop_requested():  # Cancel on the dashboard
                run.finish("cancelled")
                break
            time.sleep(args.step_seconds)


if __name__ == "__main__":
    main()
