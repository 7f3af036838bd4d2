"""The scorer registry: the names a run config's `scorer` may take, what each one means, and both
scorers applied to any task on the Task contract.

Launch -> config (`scorer`) -> engine -> task. A scorer is a policy about reward and permission,
the same for every task (SPEC section 6): `outcome` pays the task's own reward (the weighted sum
of its reward functions) and lets every trajectory teach; `guarded` adds the penalties of the
task's `verify` to that reward and vetoes ineligible trajectories from the update (their
penalised reward still counts in the group baseline). `score_rollouts` does that for any task;
the tabular engine keeps SPEC's bit-exact refund scorers (`agentrl.tasks.refund.scoring`). An
engine lists which scorers it accepts.

Review teaches the guard here too: a run's config lists the exploit fixtures of its task that
existed when it was launched (`FixtureRef`: id and behaviour); `fixture_hit` says which one a
rollout repeats (the task's `matches_fixture`, default equal behaviour). Every engine asks it: a
repeat is flagged like a verifier's violation ("matches exploit fixture N") under either scorer,
and under `guarded` it also costs `FIXTURE_PENALTY_COMPONENT` and is vetoed.
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
    for `guarded` the verdict's penalties added and the ineligible vetoed. `verify` runs for both,
    so an outcome-only run still records its violations. A rollout that repeats one of `fixtures`
    is flagged for both, and for `guarded` penalised (`fixture_penalty`) and vetoed; so is a hit of
    one of `scanners` (`agentrl.scan.enforce.load_enforced`: the run's scanners, loaded)."""
    import math

    guarded = get_scorer_spec(scorer).guarded
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
        task_reward = reward
        penalty = 0.0
        if guarded:
            terms = verdict.penalty_terms(task.violation_penalty)
            components.update(terms)
            penalty = sum(terms.values())
            reward += penalty
        fields = dict(task.trajectory_fields(environment)) if task.trajectory_fields and environment is not None else {}
        actions = list(fields.pop("actions", None) or called_tools(completion))
        success = verdict.success if verdict.success is not None else task_reward > 0
        behaviour = task.behaviour(environment, completion, actions)
        eligible, violation, reason = verdict.eligible if guarded else True, verdict.violation, verdict.reason
        if fixtures:
            hit = fixture_hit(task, fixtures, behaviour, fields.get("states"))
            if guarded:
                term = fixture_penalty(task) if hit is not None else 0.0
                components[FIXTURE_PENALTY_COMPONENT] = term
                penalty += term
                reward += term
            if hit is not None:
                violation = True
                eligible = False if guarded else eligible
                reason = "; ".join(filter(None, [reason, fixture_reason(hit.fixture_id)]))
        if scanners:  # like a fixture's repeat: flagged, and under guarded penalised and vetoed
            found = scanners.rollout(task, guarded, completion, environment, actions, behaviour, components, task_reward)
            components.update(found.terms)
            penalty, reward = penalty + found.penalty, reward + found.penalty
            if found.reasons:
                violation, eligible = True, (False if guarded else eligible)
                reason = "; ".join(filter(None, [reason, *found.reasons]))
        scores.append(RolloutScore(
            reward=reward, components=components, eligible=eligible,
            violation=violation, success=bool(success), reason=reason, penalty=penalty,
            actions=actions, fields=fields, behaviour=behaviour,
        ))
    return scores


def call_reward_funcs(task, prompts: list, completions: list, environments: list | None, rows: list[dict]) -> dict[str, list]:
    """Every reward function of `task` called as TRL calls it (outside a trainer: evaluation)."""
    columns = {k: [row.get(k) for row in rows] for k in (rows[0] if rows else {}) if k != "prompt"}
    arguments = dict(prompts=prompts, completions=completions, completion_ids=[[] for _ in completions], trainer_state=None,
                     log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None, environments=environments, **columns)
    return {name: list(function(**arguments)) for name, function in zip(task.reward_names(), task.reward_funcs)}
