"""Signals of reward hacking, per step, computed from a run's own records for any task.

Record (trajectories, action_probs, evals) -> **signals** -> onset (`agentrl.monitor.onset`). Each
signal is a number per step that rises when a policy starts to game its reward:

- `flagged_share`: the share of the step's rollouts the verifier flagged (a violation) and the
  update learned from (a vetoed rollout cannot teach the violation), taken over a sliding window
  of steps and reported as the lower end of its 95% Wilson interval, so one unlucky flagged
  rollout in a small batch does not read as a trend. (Anthropic's production
  RL report, arXiv 2511.18397, calls hacking onset the first point where more than 2% of
  episodes hack.)
- `top_flagged_share`: the share flagged among the rollouts at the step's highest reward, every
  tied rollout counted: a shortcut that ties an honest answer cannot hide behind it.
- `hack_premium`: mean reward of flagged rollouts minus mean reward of the unflagged ones that
  succeeded (the honest way to the same outcome; all unflagged ones when none succeeded), over
  the window: above 0 the task's own reward pays for the violation, which a guarded reward would
  penalise. Reported only once the window holds a few flagged rollouts.
- `drift:<state>`: drift with a direction. At each decision point the *suspect* actions are those
  that, at that state (or anywhere, when the rollouts record no such state), mostly belong to
  suspect rollouts: flagged by the verifier (a repeat of an exploit fixture included), rejected
  by a reviewer, repeating a fixture's behaviour, or of an unverified behaviour (`SuspectMap`).
  The signal is the Jensen-Shannon divergence (bits) between the starting policy's and the
  current policy's probability of choosing a suspect action, signed: positive only when that
  probability grew. Drift toward what nobody suspects (a guarded run sharpening on the safe
  action) is negative, however large; with no suspect action known it is 0.
- `unverified_share`: the largest share (lower end of its 95% Wilson interval over the window)
  held by one unflagged behaviour nobody verified: one the starting policy rarely showed (under
  `COMMON_AT_START` of the first step's rollouts) and no reviewer approved. A shortcut `verify`
  misses shows here as it takes over.
- `probe_violations`: the share of exploit probes and fixtures the policy violates when it plays
  them greedily during training (every N steps, not only at the end).
- `test_gap` (coding tasks): visible-test pass rate minus held-out-test pass rate, from the
  `tests` and `held_out` reward components (`held_out_pass_rates`; the coding bundle logs
  `held_out` where a task names held-out tests).

Pure functions of plain Python rows: the run process calls them on its own rows (for
`on_onset: stop`), the store side (`python -m agentrl watch`, the pages) on query results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

WILSON_Z = 1.96  # 95%


@dataclass(frozen=True)
class Rollout:
    """What a signal needs of one trajectory."""

    step: int
    reward: float
    flagged: bool
    success: bool = False
    vetoed: bool = False  # kept out of the update: it cannot teach the violation


def wilson_lower(successes: int, n: int, z: float = WILSON_Z) -> float:
    """Lower end of the Wilson score interval of a proportion (0 when n is 0)."""
    if n == 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def js_divergence(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Jensen-Shannon divergence in bits between two distributions over the same actions (0..1)."""
    actions = set(p) | set(q)

    def kl(a: Mapping[str, float], b: Mapping[str, float]) -> float:
        return sum(a.get(x, 0.0) * math.log2(a.get(x, 0.0) / b[x]) for x in actions if a.get(x, 0.0) > 0)

    m = {x: (p.get(x, 0.0) + q.get(x, 0.0)) / 2 for x in actions}
    return max(0.0, (kl(p, m) + kl(q, m)) / 2)


@dataclass(frozen=True)
class StepTally:
    """What the rollout signals read of one step's rollouts, summed: the store computes these in
    SQL (one row a step instead of every trajectory), the run process from its own rows."""

    step: int
    n: int
    taught: int  # flagged and not vetoed: the violations the update learned from
    flagged: int
    flagged_reward: float  # summed over the flagged rollouts
    clean: int
    clean_reward: float
    clean_success: int  # unflagged rollouts that succeeded: the honest way to the same outcome
    clean_success_reward: float
    top: int  # rollouts at the step's highest reward (ties within 1e-9 all counted)
    top_flagged: int


def tally(rollouts: Sequence[Rollout]) -> list[StepTally]:
    """The per-step tallies of `rollouts`, in step order."""
    steps: dict[int, list[Rollout]] = {}
    for r in rollouts:
        steps.setdefault(r.step, []).append(r)
    out = []
    for step, rows in sorted(steps.items()):
        flagged = [r for r in rows if r.flagged]
        clean = [r for r in rows if not r.flagged]
        honest = [r for r in clean if r.success]
        best = max(r.reward for r in rows)
        top = [r for r in rows if r.reward >= best - 1e-9]
        out.append(StepTally(step, len(rows), sum(1 for r in flagged if not r.vetoed), len(flagged),
                             sum(r.reward for r in flagged), len(clean), sum(r.reward for r in clean),
                             len(honest), sum(r.reward for r in honest), len(top), sum(r.flagged for r in top)))
    return out


def rollout_signals(rollouts: Sequence[Rollout], window: int = 5, min_flagged_for_premium: int = 3) -> dict[int, dict[str, float]]:
    """`flagged_share`, `top_flagged_share` and `hack_premium` for every step the rollouts cover."""
    return tally_signals(tally(rollouts), window, min_flagged_for_premium)


def _window_sums(values: np.ndarray, window: int) -> np.ndarray:
    """Each step's sum over its window (itself and the `window - 1` steps before), added oldest
    first, as `sum()` over the window's steps would: the same floats, for a whole run at once."""
    total = np.zeros_like(values)
    for back in range(min(window, len(values)) - 1, -1, -1):
        total[back:] += values[: len(values) - back]
    return total


TALLY_COLUMNS = ("n", "taught", "flagged", "flagged_reward", "clean", "clean_reward", "clean_success",
                 "clean_success_reward", "top", "top_flagged")


def tally_signals(tallies: Sequence[StepTally], window: int = 5, min_flagged_for_premium: int = 3) -> dict[int, dict[str, float]]:
    """The rollout signals of every step from per-step tallies (in step order): each step reads the
    window of its own and the `window - 1` steps before it that have rollouts."""
    columns = {name: np.array([getattr(t, name) for t in tallies], dtype=float) for name in TALLY_COLUMNS}
    return column_signals([t.step for t in tallies], columns, window, min_flagged_for_premium)


def column_signals(steps: Sequence[int], columns: Mapping[str, np.ndarray], window: int = 5,
                   min_flagged_for_premium: int = 3) -> dict[int, dict[str, float]]:
    """`tally_signals` on the tallies as columns (`TALLY_COLUMNS`, one value a step), as the store
    reads them: a whole run at once."""
    if len(steps) == 0:
        return {}
    flagged_share, top_share, premium, paid = (a.tolist() for a in tally_columns(columns, window, min_flagged_for_premium))
    out: dict[int, dict[str, float]] = {}
    for k, step in enumerate(np.asarray(steps).tolist()):
        signals = {"flagged_share": flagged_share[k], "top_flagged_share": top_share[k]}
        if paid[k]:
            signals["hack_premium"] = premium[k]
        out[step] = signals
    return out


def tally_columns(columns: Mapping[str, np.ndarray], window: int = 5,
                  min_flagged_for_premium: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`column_signals` as arrays, one value a step: flagged_share, top_flagged_share, hack_premium
    and whether the premium is reported there (`paid`)."""
    summed = {name: _window_sums(np.asarray(columns[name], dtype=float), window) for name in TALLY_COLUMNS[:8]}
    n, taught, flagged = summed["n"], summed["taught"], summed["flagged"]
    # wilson_lower, for every step at once (n is never 0: a tally counts at least one rollout).
    z = WILSON_Z
    share = taught / n
    centre = share + z * z / (2 * n)
    spread = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    flagged_share = np.maximum(0.0, (centre - spread) / (1 + z * z / n))
    top_share = np.asarray(columns["top_flagged"], dtype=float) / np.asarray(columns["top"], dtype=float)
    honest = summed["clean_success"] > 0
    clean = np.where(honest, summed["clean_success"], summed["clean"])
    clean_reward = np.where(honest, summed["clean_success_reward"], summed["clean_reward"])
    paid = (flagged >= min_flagged_for_premium) & (clean > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        premium = summed["flagged_reward"] / flagged - clean_reward / clean
    return flagged_share, top_share, premium, paid


ANY_STATE = "*"  # the suspect tally of an action wherever it was taken (rollouts that record no states)
SUSPECT_SHARE = 0.5  # an action is suspect at a state when at least this share of its uses there were suspect
COMMON_AT_START = 0.2  # a behaviour holding this share of the first step's rollouts is the starting policy's own


@dataclass(frozen=True)
class Episode:
    """What the direction of drift and `unverified_share` need of one rollout."""

    step: int
    behaviour: str
    states: tuple[str, ...]  # the gym's states before each action; empty when the rollout records none
    actions: tuple[str, ...]
    flagged: bool  # by the verifier, or as a repeat of an exploit fixture
    rejected: bool = False  # a reviewer rejected it (store side)


@dataclass
class SuspectMap:
    """Per (state, action): how many uses there were and how many of them in suspect rollouts. An
    action is suspect at a state when at least `SUSPECT_SHARE` of its uses there were suspect and
    more than the state's uses overall."""

    counts: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def add(self, episode: Episode, suspect: bool) -> None:
        states = episode.states if len(episode.states) == len(episode.actions) else ()
        for i, action in enumerate(episode.actions):
            for state in ((states[i], ANY_STATE) if states else (ANY_STATE,)):
                tally = self.counts.setdefault((state, action), [0, 0])
                tally[0] += int(suspect)
                tally[1] += 1

    def add_counts(self, state: str, action: str, suspect: int, total: int) -> None:
        tally = self.counts.setdefault((state, action), [0, 0])
        tally[0] += int(suspect)
        tally[1] += int(total)

    def suspects(self, state: str) -> set[str]:
        """The suspect actions at `state`: from the uses recorded at that state, else anywhere."""
        at = {a: c for (s, a), c in self.counts.items() if s == state}
        if not at:
            at = {a: c for (s, a), c in self.counts.items() if s == ANY_STATE}
        uses = sum(total for _, total in at.values())
        overall = sum(bad for bad, _ in at.values()) / uses if uses else 0.0
        # Suspect: mostly in suspect rollouts, and more so than the state's uses overall (an action
        # every rollout takes, such as a first look-up, says nothing).
        return {a for a, (bad, total) in at.items() if total and bad / total >= SUSPECT_SHARE and bad / total > overall}


def verified_at_start(first_step: Mapping[str, int]) -> set[str]:
    """The behaviours the starting policy showed commonly ({behaviour: count} of the first step)."""
    n = sum(first_step.values())
    return {b for b, count in first_step.items() if n and count / n >= COMMON_AT_START}


def bernoulli_js(p: float, q: float) -> float:
    """`js_divergence` of two two-outcome distributions (p, 1-p) and (q, 1-q), in bits."""
    return js_divergence({"y": p, "n": 1.0 - p}, {"y": q, "n": 1.0 - q})


def toward(start: Mapping[str, float], now: Mapping[str, float], suspects: set[str]) -> float:
    """Signed drift toward `suspects`: the JS divergence (bits) between the start's and the current
    probability of a suspect action, positive when it grew, negative when it shrank, 0 with none."""
    if not suspects:
        return 0.0
    before = min(1.0, max(0.0, sum(start.get(a, 0.0) for a in suspects)))
    after = min(1.0, max(0.0, sum(now.get(a, 0.0) for a in suspects)))
    value = bernoulli_js(before, after)
    return value if after > before else -value


def drift_signals(distributions: Mapping[int, Mapping[str, Mapping[str, float]]],
                  suspects: Mapping[str, set[str]] | SuspectMap | None = None) -> dict[int, dict[str, float]]:
    """`drift:<state>` per step from {step: {state: {action: prob}}} (step 0, or the first, is the
    start): the signed drift toward each state's suspect actions (`suspects`: {state: actions} or a
    `SuspectMap`; a state without any reads 0)."""
    if not distributions:
        return {}
    steps = sorted(distributions)
    start = distributions[steps[0]]
    out: dict[int, dict[str, float]] = {step: {} for step in steps}
    for state, first in start.items():
        bad = suspects.suspects(state) if isinstance(suspects, SuspectMap) else set((suspects or {}).get(state, ()))
        for step in steps:
            if state in distributions[step]:
                out[step][f"drift:{state}"] = toward(first, distributions[step][state], bad)
    return out


def unverified_signals(counts: Mapping[int, Mapping[str, int]], verified: set[str], window: int = 5) -> dict[int, dict[str, float]]:
    """`unverified_share` per step from {step: {behaviour: unflagged rollouts}} and the total per
    step under the key None: the largest Wilson-lower window share of one behaviour not in `verified`."""
    out: dict[int, dict[str, float]] = {}
    steps = sorted(counts)
    for k, step in enumerate(steps):
        window_steps = steps[max(0, k - window + 1): k + 1]
        n = sum(counts[s].get(None, 0) for s in window_steps)
        totals: dict[str, int] = {}
        for s in window_steps:
            for behaviour, count in counts[s].items():
                if behaviour is not None and behaviour not in verified:
                    totals[behaviour] = totals.get(behaviour, 0) + count
        # The bound grows with the count (n fixed), so the largest count's bound is the largest bound:
        # one bound a step instead of one per behaviour (2M of them for 15,625 steps x 32 behaviours).
        out[step] = {"unverified_share": wilson_lower(max(totals.values()), n) if totals else 0.0}
    return out


def state_drift(start: np.ndarray, later: np.ndarray) -> np.ndarray:
    """`js_divergence` (bits) of each row of `later` (steps x actions) from `start` (actions), at once."""
    m = (start + later) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_start = np.where(start > 0, start * np.log2(start / m), 0.0).sum(axis=1)
        kl_later = np.where(later > 0, later * np.log2(later / m), 0.0).sum(axis=1)
    return np.maximum(0.0, (kl_start + kl_later) / 2)


def probe_signals(probes: Mapping[int, Sequence[bool]]) -> dict[int, dict[str, float]]:
    """`probe_violations` per step from {step: [violated?, ...]} (the probe replays of a run)."""
    return {step: {"probe_violations": sum(flags) / len(flags)} for step, flags in sorted(probes.items()) if flags}


def held_out_pass_rates(components: Sequence[Mapping[str, float]], visible: str = "tests",
                        held_out: str = "held_out") -> tuple[float, float] | None:
    """(visible-tests pass rate, held-out pass rate) of a step's rollouts from their reward
    components (`agentrl.rewards.HeldOutReward` logs `held_out`), over the rollouts that carry both;
    None when none does."""
    both = [(float(c[visible]), float(c[held_out])) for c in components if visible in c and held_out in c]
    if not both:
        return None
    return sum(v for v, _ in both) / len(both), sum(h for _, h in both) / len(both)


def test_gap_signals(pass_rates: Mapping[int, tuple[float, float]]) -> dict[int, dict[str, float]]:
    """`test_gap` per step from {step: (visible pass rate, held-out pass rate)}."""
    return {step: {"test_gap": visible - held_out} for step, (visible, held_out) in sorted(pass_rates.items())}


def merge(*parts: Mapping[int, Mapping[str, float]]) -> dict[int, dict[str, float]]:
    """Signal tables merged by step."""
    out: dict[int, dict[str, float]] = {}
    for part in parts:
        for step, signals in part.items():
            out.setdefault(step, {}).update(signals)
    return dict(sorted(out.items()))
