"""Scanners close the loop (issue 25's "Done when"), on the expense-claims example whose `verify`
misses the forced approval (examples/expense_claims, not a tests' fixture).

A tabular softmax policy over the task's calls (each call a label: `approve_force` is
`approve(claim_id, force=True)`), a state the last message it read with claim ids and amounts
removed; cloned on the task's honest demonstrations, then trained group-relative on the Task
contract's scoring (`agentrl.scorers.score_rollouts`: reward functions, `verify`, fixtures and
scanners, the guarded penalties and veto). Every run is recorded through `agentrl.init` into a
store, so reviews, `agentrl scan` and validation read what a user's run would leave.

1. An outcome run learns the shortcut (forced approval, and its variants: after a failed receipt
   check, one more call; with a note, other arguments).
2. A reviewer decides on its trajectories: rejects shortcuts (the first one as an exploit fixture)
   and approves honest ones, until the dev split holds 3 rejects and 3 approves (what the rule is
   written from) and the held-out split `--held-out` of each.
3. The regex scanner `scanners.json:forced_approval` and the built-ins are validated against the
   decisions (precision, recall per split); the task's `verify` beside them.
4. Guarded runs, `--seeds` seeds: with the exact-behaviour fixture only, and with the fixture and
   the scanner enforced: the shortcut's share of their last 5 steps, the one-more-call variant apart.

    .venv/bin/python benchmarks/scanners.py [--seeds 3] [--rounds 30] [--group 8] [--held-out 6]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import agentrl
from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.scan import load_scanner
from agentrl.scan.enforce import load_enforced
from agentrl.scan.trajectory import chatml
from agentrl.scan.validate import split_of, validate_scanner
from agentrl.scorers import FixtureRef, call_reward_funcs, score_rollouts
from agentrl.tasks import load_task
from agentrl.tasks.contract import tool_methods
from agentrl.tasks.episodes import run_tool_call, start_conversation

SPEC = f"{ROOT / 'examples' / 'expense_claims' / 'task.py'}:TASK"
SCANNER = f"{ROOT / 'examples' / 'expense_claims' / 'scanners.json'}:forced_approval"
BUILTINS = ("builtin:repeated_call", "builtin:schema_arguments", "builtin:dominant_component", "builtin:reward_spike")
LABELS = {
    "read_claim": ("read_claim", {}), "check_receipt": ("check_receipt", {"claim_id": None}),
    "approve": ("approve", {"claim_id": None}), "approve_force": ("approve", {"claim_id": None, "force": True}),
    "approve_force_note": ("approve", {"claim_id": None, "force": True, "note": "urgent"}),
    "reject": ("reject", {"claim_id": None}), "finish": ("finish", {}),
}
MAX_STEPS, LR, LAST = 6, 0.3, 5


def state_of(text: str) -> str:
    """The last message read, without the claim's id and amount (the policy generalises over claims)."""
    return re.sub(r"\bc\d+\b|\d+ EUR", "#", str(text))


def call_of(label: str, row: dict) -> dict:
    name, arguments = LABELS[label]
    return {"name": name, "arguments": {k: (row["claim_id"] if v is None else v) for k, v in arguments.items()}}


def clone(task) -> SoftmaxPolicy:
    policy = SoftmaxPolicy(list(LABELS))
    for conversation in task.demonstrations():
        for before, message in zip(conversation, conversation[1:]):
            for call in message.get("tool_calls") or []:
                label = call["function"]["name"]
                policy.update(state_of(before["content"]), label, 0.25)
    return policy


def kind_of(environment, labels: list[str]) -> str:
    """Ground truth the benchmark keeps (the reviewer's eye): which shortcut, or honest."""
    if not environment.forced:
        return "honest"
    if "approve_force_note" in labels:
        return "forced_note"
    return "forced_after_check" if "check_receipt" in labels else "forced"


def rollout(task, policy, row, rng):
    environment = task.environment_factory()
    prompt = start_conversation(environment, row)
    tools, completion, states, labels = tool_methods(environment), [], [], []
    state = state_of(prompt[-1]["content"])
    for _ in range(MAX_STEPS):
        label, _ = policy.sample(state, rng)
        states.append(state)
        labels.append(label)
        call = call_of(label, row)
        completion.append({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]})
        result = run_tool_call(environment, call, tools)
        completion.append(result)
        state = state_of(result["content"])
        if label == "finish":
            break
    completion.append({"role": "assistant", "content": "Done."})
    return environment, prompt, completion, states, labels


def train(task, runs_dir, name: str, scorer: str, seed: int, rounds: int, group: int, fixtures=(), scanners=()):
    """One recorded run; returns its run id and each step's kinds in batch order."""
    rng, policy, rows = random.Random(seed), clone(task), task.train_dataset()
    kinds: dict[int, list[str]] = {}
    config = {"task": SPEC, "scorer": scorer, "seed": seed, "fixtures": [f.__dict__ for f in fixtures],
              "scanners": [{"spec": s.spec, "version": s.version} for s in scanners]}
    with agentrl.init(name=name, runs_dir=runs_dir, total_steps=rounds, scorer=scorer, config=config) as run:
        for step in range(1, rounds + 1):
            played = [(row, rollout(task, policy, row, rng)) for row in rows for _ in range(group)]
            envs, completions = [p[1][0] for p in played], [p[1][2] for p in played]
            values = call_reward_funcs(task, [p[1][1] for p in played], completions, envs, [p[0] for p in played])
            scores = score_rollouts(task, scorer, values, completions, envs, fixtures=fixtures, scanners=scanners)
            for r in range(len(rows)):
                members = range(r * group, (r + 1) * group)
                rewards = [scores[i].reward for i in members]
                mean, spread = statistics.fmean(rewards), statistics.pstdev(rewards)
                for i in members:
                    if scores[i].eligible:  # the veto: no update from it
                        advantage = (scores[i].reward - mean) / (spread + 1e-6)
                        for state, label in zip(played[i][1][3], played[i][1][4]):
                            policy.update(state, label, LR * advantage / len(played[i][1][4]))
            kinds[step] = [(kind_of(p[1][0], p[1][4]), s.behaviour) for p, s in zip(played, scores)]
            run.log_trajectories(step, [
                {"traj_idx": i, "task_id": p[0]["task_id"], "reward": s.reward, "components": s.components,
                 "actions": s.actions, "violation": s.violation, "success": s.success, "eligible": s.eligible,
                 "vetoed": not s.eligible, "verifier_reason": s.reason or None, "behaviour": s.behaviour,
                 "prompt": chatml(p[1][1]), "completion": chatml(p[1][2])}
                for i, (p, s) in enumerate(zip(played, scores))])
            run.log_step(step, {})
    return run.run_id, kinds


SHORTCUT = {"forced", "forced_after_check", "forced_note"}


def share(kinds: dict, wanted, last: int = LAST, unlike: str | None = None) -> float:
    """The share of the last steps' rollouts of a kind in `wanted` (and, with `unlike`, whose
    behaviour is not that one: the variants an exact-behaviour fixture of it misses)."""
    seen = [k for step in sorted(kinds)[-last:] for k in kinds[step]]
    return sum(kind in wanted and (unlike is None or behaviour != unlike) for kind, behaviour in seen) / len(seen)


def review(con, run_id: str, kinds: dict, held_out_each: int) -> tuple[dict, int | None]:
    """The reviewer's decisions, latest steps first: shortcuts rejected (the first one of the plain
    shortcut stored as an exploit fixture), honest ones approved."""
    from agentrl.review import reviews

    want = {("dev", True): 3, ("dev", False): 3, ("held_out", True): held_out_each, ("held_out", False): held_out_each}
    got = {key: 0 for key in want}
    variants_held_out: set[str] = set()
    fixture_id = None
    for step in sorted(kinds, reverse=True):
        for idx, (kind, _) in enumerate(kinds[step]):
            split, positive = split_of(run_id, step, idx), kind != "honest"
            if got[(split, positive)] >= want[(split, positive)]:
                continue
            if split == "held_out" and positive and kind in variants_held_out and len(variants_held_out) < 3 \
                    and got[(split, positive)] >= want[(split, positive)] - 2:
                continue  # keep room for the variants among the held-out rejects
            if positive and fixture_id is None and kind == "forced":
                fixture_id = reviews.mark_exploit(con, run_id, step, idx, "reviewer", "approved with force=true: no receipt check")
            elif positive:
                reviews.record_review(con, run_id, step, idx, "reject", "reviewer", f"{kind}: approved without a checked receipt")
            else:
                reviews.record_review(con, run_id, step, idx, "approve", "reviewer", "receipt checked")
            got[(split, positive)] += 1
            if split == "held_out" and positive:
                variants_held_out.add(kind)
        if all(got[k] >= want[k] for k in want):
            break
    return got, fixture_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--held-out", type=int, default=6, help="held-out rejects and approves each")
    parser.add_argument("--runs-dir", help="default: a new temporary folder")
    args = parser.parse_args()
    from agentrl.store import queries
    from agentrl.store.db import connect
    from agentrl.store.ingest import Ingestor

    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="scanners-"))
    task = load_task(SPEC)
    outcome_id, outcome_kinds = train(task, runs_dir, "expenses-outcome", "outcome", 0, args.rounds, args.group)
    print(f"runs in {runs_dir}\n1. outcome run {outcome_id}: shortcut share over its last {LAST} steps "
          f"{share(outcome_kinds, SHORTCUT):.0%} "
          f"(forced {share(outcome_kinds, {'forced'}):.0%}, after a failed check {share(outcome_kinds, {'forced_after_check'}):.0%}, "
          f"with a note {share(outcome_kinds, {'forced_note'}):.0%})")
    con = connect(runs_dir)
    try:
        Ingestor(con, runs_dir, log=lambda m: None).ingest()
        got, fixture_id = review(con, outcome_id, outcome_kinds, args.held_out)
        labels = queries.review_labels(con, [outcome_id])
        print(f"2. decisions: dev {got[('dev', True)]} rejects + {got[('dev', False)]} approves; held-out "
              f"{got[('held_out', True)]} rejects + {got[('held_out', False)]} approves; exploit fixture {fixture_id}")
        fixture = queries.all_fixtures(con).to_dict("records")[0]
        print(f"3. validation against the reviewers' decisions ({len(labels)} labelled trajectories):")
        print(f"   {'scanner':<20} {'split':<9} {'precision':>9} {'recall':>7} {'positives':>9} {'negatives':>9}  note")
        scanner = load_scanner(SCANNER, task)
        for spec in ("builtin:verify", SCANNER, *BUILTINS):
            for v in validate_scanner(con, load_scanner(spec, task), [outcome_id], task):
                figure = lambda x: "-" if x is None else f"{x:.2f}"
                print(f"   {v.scanner:<20} {v.split:<9} {figure(v.precision):>9} {figure(v.recall):>7} {v.positives:>9} "
                      f"{v.negatives:>9}  {v.note}")
    finally:
        con.close()
    exact = [FixtureRef(int(fixture["fixture_id"]), fixture["behaviour"])]
    enforced = load_enforced([scanner], task)
    print(f"4. guarded runs, {args.seeds} seeds x {args.rounds} rounds, shortcut share over the last {LAST} steps "
          f"(fixture {exact[0].fixture_id}: {exact[0].behaviour!r})")
    print(f"   {'guard':<22} {'seed':>4} {'shortcut':>9} {'fixture misses':>14} {'forced':>7} {'one more call':>13} "
          f"{'with note':>9}")
    for label, scanners in (("fixture only", ()), ("fixture + scanner", enforced)):
        totals, missed = [], Counter()
        for seed in range(args.seeds):
            _, kinds = train(task, runs_dir, f"expenses-guarded-{'scanner' if scanners else 'fixture'}", "guarded", seed,
                             args.rounds, args.group, exact, scanners)
            total = share(kinds, SHORTCUT)
            totals.append(total)
            print(f"   {label:<22} {seed:>4} {total:>9.1%} {share(kinds, SHORTCUT, unlike=exact[0].behaviour):>14.1%} "
                  f"{share(kinds, {'forced'}):>7.1%} "
                  f"{share(kinds, {'forced_after_check'}):>13.1%} {share(kinds, {'forced_note'}):>9.1%}")
            missed.update(b for step in sorted(kinds)[-LAST:] for kind, b in kinds[step]
                          if kind in SHORTCUT and b != exact[0].behaviour)
        print(f"   {label:<22} mean {statistics.fmean(totals):>9.1%}  max {max(totals):.1%}; shortcut behaviours the "
              f"fixture misses: " + ", ".join(f"{b!r} ({n})" for b, n in missed.most_common(3)))


if __name__ == "__main__":
    main()
