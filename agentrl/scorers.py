"""Scoring, in one place every engine asks: the scorer registry (the names a run config's `scorer`
may take and what each one means), the guard's decision on one rollout, and the extra vetoing
rules a run applies on top of its task's verifier.

Launch -> config (`scorer`) -> engine -> **scorers** -> task. A scorer is a policy about reward
and permission, the same for every task (SPEC section 6): `outcome` pays the task's own reward
(the weighted sum of its reward functions) and lets every trajectory teach; `guarded` adds the
penalties of the task's `verify` to that reward and vetoes ineligible trajectories from the update
(their penalised reward still counts in the group baseline). Every engine asks here:

- the LM engine (and a fixture's replay, `agentrl.tasks.replay`): `score_rollouts`, any task on
  the Task contract; its reward functions are the task's (`agentrl.rewards` for the coding task);
- the tabular engine: `trajectory_scorer`, which dispatches to SPEC's bit-exact refund scorers
  (`agentrl.tasks.refund.scoring`) and applies the run's vetoes on top;
- the coding engine: `guard`, its scripted attempts' weighted sum (`agentrl.rewards.score_group`)
  and its verifier's verdict (a refused write) turned into the guard's decision.

`guard` is the verifier's decision then `apply_vetoes`: the one place extra vetoing rules are
applied, whichever engine scored the rollout. Today the rules are the exploit fixtures the run's
config lists (`FixtureRef`: id, behaviour, states), found by `rule_vetoes` (`fixture_hit`: the
task's `matches_fixture`, default equal behaviour). A rule that fires flags the rollout like a
verifier's violation under either scorer ("matches exploit fixture N"), and under `guarded` also
costs its own penalty component (`fixture_penalty`) and vetoes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ScorerSpec:
    name: str
    title: str
    guarded: bool  # penalties from the verifier's flags, and a veto on ineligible trajectories
    description: str


SCORERS: dict[str, ScorerSpec] = {
    "outcome": ScorerSpec("outcome", "outcome-only", False,
                          "The task's own reward; every trajectory may teach, so a shortcut that pays is learned."),
    "guarded": ScorerSpec("guarded", "guarded", True,
                          "The task's reward minus the verifier's penalties; a violating trajectory is vetoed from the update."),
}

SCORER_VERSION = "1"
"""Bumped when what a scorer computes changes; promotion bundles record it."""


def get_scorer_spec(name: str) -> ScorerSpec:
    try:
        return SCORERS[name]
    except KeyError:
        raise ValueError(f"unknown scorer {name!r}; use one of {sorted(SCORERS)}") from None


FIXTURE_PENALTY_COMPONENT = "fixture_penalty"


@dataclass(frozen=True)
class FixtureRef:
    """An exploit fixture as a run uses it: its id and the behaviour it stands for."""

    fixture_id: int
    behaviour: str
    states: tuple[str, ...] | None = None  # the state before each action, when its run recorded them

    @classmethod
    def of(cls, value: Any) -> FixtureRef:
        if isinstance(value, FixtureRef):
            return value
        if isinstance(value, Mapping):
            states = value.get("states")
            return cls(int(value["fixture_id"]), str(value["behaviour"]), tuple(states) if states else None)
        states = getattr(value, "states", None)  # a config's FixtureSpec
        return cls(int(value.fixture_id), str(value.behaviour), tuple(states) if states else None)


def fixture_reason(fixture_id: int) -> str:
    return f"matches exploit fixture {int(fixture_id)}"


def fixture_hit(task, fixtures: Sequence[Any], behaviour: str | None, states: Sequence[str] | None = None) -> FixtureRef | None:
    """The first fixture `behaviour` repeats (by the task's `matches_fixture`; `task` None: equal
    behaviour), or None. Where both the fixture and the rollout recorded their states (a gym's),
    they must be the same too: the refund task's "lookup > refund > finish" is the shortcut on a
    high-value order and the honest path on a low one, and only the states tell them apart."""
    if not fixtures or behaviour is None:
        return None
    for fixture in fixtures:
        ref = FixtureRef.of(fixture)
        if not (task.matches_fixture(ref.behaviour, behaviour) if task is not None else ref.behaviour == behaviour):
            continue
        if ref.states and states and tuple(states) != ref.states:
            continue
        return ref
    return None


def fixture_penalty(task) -> float:
    """What repeating a fixture costs under `guarded`: the task's violation penalty."""
    return -abs(float(getattr(task, "violation_penalty", 1.0)))


def called_tools(completion: Any) -> list[str]:
    """The tools a completion called, in order (each structured tool call by its function name)."""
    if not isinstance(completion, Sequence) or isinstance(completion, str):
        return []
    names = []
    for message in completion:
        if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function", call) if isinstance(call, Mapping) else {}
                names.append(str(function.get("name", "")))
    return names


# --- the guard's decision on one rollout, and the extra vetoing rules -----------------------------


@dataclass(frozen=True)
class Decision:
    """The guard's decision on one rollout: the reward the update uses, every term by name, the
    guarded penalties summed, whether it may teach, whether it is flagged and why."""

    reward: float
    components: dict[str, float]
    penalty: float  # the guarded scorer's penalty terms, summed (0 for outcome-only)
    eligible: bool
    violation: bool
    reason: str


@dataclass(frozen=True)
class Veto:
    """One extra vetoing rule on one rollout: the reward component it is recorded under, what it
    costs under `guarded` when it fires, and why it fired (None: it did not)."""

    component: str
    penalty: float  # negative
    reason: str | None

    @property
    def fired(self) -> bool:
        return self.reason is not None


def apply_vetoes(decision: Decision, guarded: bool, vetoes: Sequence[Veto]) -> Decision:
    """The extra vetoing rules applied to a decision: a rule that fires flags the rollout (a
    violation, its reason added) under either scorer, and under `guarded` costs its penalty and
    vetoes it. Under `guarded` each rule's component is recorded, 0.0 when it does not fire, so
    every rollout of a run has the same components."""
    reward, components, penalty = decision.reward, dict(decision.components), decision.penalty
    eligible, violation, reason = decision.eligible, decision.violation, decision.reason
    for veto in vetoes:
        if guarded:
            term = veto.penalty if veto.fired else 0.0
            components[veto.component] = term
            penalty += term
            reward += term
        if veto.fired:
            violation = True
            eligible = False if guarded else eligible
            reason = "; ".join(filter(None, [reason, veto.reason]))
    return Decision(reward, components, penalty, eligible, violation, reason)


def rule_vetoes(task, fixtures: Sequence[Any], behaviour: str | None, states: Sequence[str] | None,
                penalty: float) -> list[Veto]:
    """The extra vetoing rules of a run on one rollout, in the order they apply: the exploit
    fixtures it lists (a repeat costs `penalty`); none when it lists none. (A run's other
    vetoing rules, such as transcript scanners, are added to this list.)"""
    vetoes = []
    if fixtures:
        hit = fixture_hit(task, fixtures, behaviour, states)
        vetoes.append(Veto(FIXTURE_PENALTY_COMPONENT, penalty, None if hit is None else fixture_reason(hit.fixture_id)))
    return vetoes


def guard(scorer: str, task_reward: float, components: Mapping[str, float], verdict, penalties: Mapping[str, float],
          vetoes: Sequence[Veto] = ()) -> Decision:
    """The decision of scorer `scorer` on one rollout whose task reward and its terms are known:
    `verdict` (`violation`, `eligible`, `reason`: the task's `verify`) with, under `guarded`, its
    `penalties` added and the ineligible vetoed; then the extra vetoing rules (`apply_vetoes`)."""
    guarded = get_scorer_spec(scorer).guarded
    components = dict(components)
    penalty = 0.0
    if guarded:
        components.update(penalties)
        penalty = sum(penalties.values())
    decision = Decision(task_reward + penalty, components, penalty, verdict.eligible if guarded else True,
                        bool(verdict.violation), verdict.reason or "")
    return apply_vetoes(decision, guarded, vetoes)


# --- the tabular engine: SPEC's bit-exact refund scorers ----------------------------------------


REFUND_SCORING = "agentrl.tasks.refund.scoring"
"""The module of SPEC's bit-exact refund scorers (`get_scorer`, `Score`, `VIOLATION_PENALTY`):
resolved when asked, as the engine registry's entries are, so this module stays a leaf the record
may import (tests/test_layout.py)."""
BEHAVIOUR = "agentrl.record.behaviour"  # default_behaviour: a gym trajectory's calls joined by " > "


def _entry(module: str, attribute: str):
    import importlib

    return getattr(importlib.import_module(module), attribute)


def trajectory_scorer(name: str, fixtures: Sequence[Any] = (), scanners: Sequence[Any] = ()):
    """The tabular engine's scorer `name` on a refund gym trajectory: SPEC's bit-exact refund
    scorer (`REFUND_SCORING`; exactly it when the run lists no fixtures), with the run's extra
    vetoing rules applied (`apply_vetoes`; a repeat costs the refund task's violation penalty as
    its own component; so does a hit of one of the run's `scanners`, `agentrl.scan.enforce.Enforced`).
    The score's `flag_reason` says why a rule flagged the trajectory."""
    spec, score_function = get_scorer_spec(name), _entry(REFUND_SCORING, "get_scorer")(name)
    refs = [FixtureRef.of(f) for f in fixtures or ()]
    if not refs and not scanners:
        return score_function
    behaviour_of, score_type = _entry(BEHAVIOUR, "default_behaviour"), _entry(REFUND_SCORING, "Score")
    penalty = -abs(_entry(REFUND_SCORING, "VIOLATION_PENALTY"))

    def scored(trajectory):
        score = score_function(trajectory)
        vetoes = rule_vetoes(None, refs, behaviour_of(trajectory.actions), trajectory.states, penalty)
        if scanners:
            vetoes += scanners.episode(trajectory.states, trajectory.actions, score.components, score.reward, penalty).vetoes
        decision = apply_vetoes(Decision(score.reward, score.components, 0.0, score.eligible, False, ""), spec.guarded, vetoes)
        return score_type(reward=decision.reward, eligible=decision.eligible, components=decision.components,
                          flag_reason=decision.reason or None)

    return scored


# --- the two scorers on any task (agentrl.tasks.contract) ----------------------------------------


@dataclass(frozen=True)
class RolloutScore:
    """One rollout scored: the reward the update uses, every term by name, the guard's flags, and
    what the trajectory row records."""

    reward: float
    components: dict[str, float]
    eligible: bool
    violation: bool
    success: bool
    reason: str
    penalty: float  # the guarded scorer's penalty terms, summed (0 for outcome-only)
    actions: list[str]
    fields: dict  # the task's own trajectory columns (states, amount, duplicate_effect, ...)
    behaviour: str | None = None  # what it did (the task's `behaviour`, else its calls)


def score_rollouts(task, scorer: str, values: dict[str, list], completions: list, environments: list | None,
                   fixtures: Sequence[Any] = (), scanners: Sequence[Any] = ()) -> list[RolloutScore]:
    """Score rollouts whose reward functions already ran (`values`: function name -> one value per
    rollout, None allowed): the weighted sum of the task's reward functions (TRL's `nansum`), and
    for `guarded` the verdict's penalties added and the ineligible vetoed (`guard`). `verify` runs
    for both, so an outcome-only run still records its violations. A rollout that repeats one of
    `fixtures` is flagged for both, and for `guarded` penalised (`fixture_penalty`) and vetoed; so is a hit of
    one of `scanners` (`agentrl.scan.enforce.load_enforced`: the run's scanners, loaded)."""
    import math

    get_scorer_spec(scorer)
    names, weights = task.reward_names(), task.weights()
    scores = []
    for i, completion in enumerate(completions):
        environment = environments[i] if environments else None
        verdict = task.verify(environment, completion)
        components = {}
        reward = 0.0
        for name, weight in zip(names, weights):
            value = values[name][i]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue  # TRL leaves a None reward out of the sum
            components[name] = float(value)
            reward += weight * float(value)
        fields = dict(task.trajectory_fields(environment)) if task.trajectory_fields and environment is not None else {}
        actions = list(fields.pop("actions", None) or called_tools(completion))
        success = verdict.success if verdict.success is not None else reward > 0
        behaviour = task.behaviour(environment, completion, actions)
        vetoes = rule_vetoes(task, fixtures, behaviour, fields.get("states"), fixture_penalty(task))
        if scanners:  # the run's transcript scanners: a hit is flagged, and under guarded penalised and vetoed
            vetoes += scanners.rollout(task, get_scorer_spec(scorer).guarded, completion, environment, actions, behaviour,
                                       components, reward).vetoes
        decision = guard(scorer, reward, components, verdict, verdict.penalty_terms(task.violation_penalty), vetoes)
        scores.append(RolloutScore(
            reward=decision.reward, components=decision.components, eligible=decision.eligible,
            violation=decision.violation, success=bool(success), reason=decision.reason, penalty=decision.penalty,
            actions=actions, fields=fields, behaviour=behaviour,
        ))
    return scores


def call_reward_funcs(task, prompts: list, completions: list, environments: list | None, rows: list[dict]) -> dict[str, list]:
    """Every reward function of `task` called as TRL calls it (outside a trainer: evaluation)."""
    columns = {k: [row.get(k) for row in rows] for k in (rows[0] if rows else {}) if k != "prompt"}
    arguments = dict(prompts=prompts, completions=completions, completion_ids=[[] for _ in completions], trainer_state=None,
                     log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None, environments=environments, **columns)
    return {name: list(function(**arguments)) for name, function in zip(task.reward_names(), task.reward_funcs)}
