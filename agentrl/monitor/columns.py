"""The store side's signals as columns: `unverified_share`, signed drift and the onset of a whole
run at once with numpy, equal bit for bit to the per-step forms in `signals` and `onset`.

Store queries (`agentrl.store.queries.monitor`) -> **columns** -> `agentrl.monitor.store_signals`
/ `store_onset`. A run of 15,625 steps has 500,000 (step, behaviour) tallies and 15,625 readings of
each signal: a Python loop over them took about a second, a page may ask for a run's onset on
every redraw, and the gate asks for it on every check. Every float here is computed with the
same operations in the same order as the scalar form it replaces (the logarithms by `math.log2`
itself), so a figure and the step of an onset do not move.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from agentrl.monitor.onset import DEFAULT_THRESHOLDS, Onset, Threshold, threshold_of
from agentrl.monitor.signals import WILSON_Z, _window_sums, verified_at_start

Column = tuple[np.ndarray, np.ndarray]  # (steps, values) where a signal was read, in step order


def wilson_lower_columns(successes: np.ndarray, n: np.ndarray, z: float = WILSON_Z) -> np.ndarray:
    """`signals.wilson_lower` of every (successes, n) at once (n > 0)."""
    share = successes / n
    centre = share + z * z / (2 * n)
    spread = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return np.maximum(0.0, (centre - spread) / (1 + z * z / n))


def positions(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct steps in order, each row's index among them) without sorting the rows."""
    first = int(steps.min())
    present = np.zeros(int(steps.max()) - first + 1, dtype=bool)
    present[steps - first] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present) + first, rank[steps - first]


def _stable_order(values: np.ndarray) -> np.ndarray:
    """`argsort(kind="stable")`, as a radix sort where the values fit in 16 bits (a run's positions
    and behaviour codes mostly do)."""
    if len(values) and int(values.max()) < 1 << 16:
        values = values.astype(np.uint16)
    return np.argsort(values, kind="stable")


def code_order(code: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The rows' indices sorted by (code, pos), stably: what `window_max` reads them in."""
    order = _stable_order(pos)
    return order[_stable_order(code[order])]


def window_max(code: np.ndarray, pos: np.ndarray, count: np.ndarray, n_pos: int, window: int,
               order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each position e (0..n_pos-1): the largest sum of one code's counts over positions
    e - window + 1 .. e, and whether any row lies in that window (rows may repeat a (code, pos)).
    `order`: the rows to read, by index, sorted by (code, pos) (`code_order`, perhaps of a subset);
    by default every row, sorted here.

    Each row's code's sum is taken at the window ends its own position opens (pos .. pos + window
    - 1): a code's sum only grows at a position where it has a row, so the largest sum at every end
    is among these. Rows sorted by (code, pos), the sum at end pos_i + d is the rows from the
    window's start to that end, all within `window` rows of row i: a few shifted comparisons, on
    the rows that have another row of their code that near (the others' sum is their own count)."""
    if order is None:
        order = code_order(code, pos)
    if len(order) == 0:
        return np.zeros(n_pos, dtype=np.int64), np.zeros(n_pos, dtype=bool)
    key = code[order].astype(np.int64) * (n_pos + window) + pos[order]  # codes never share a window
    count = count[order].astype(np.int64)
    if len(key) > 1 and not np.all(key[1:] != key[:-1]):  # a step split over commits: one row a (code, pos)
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        key, count = key[starts], np.add.reduceat(count, starts)
    at = key % (n_pos + window)
    near = np.zeros(len(key), dtype=bool)  # another row of the code within the window
    near[1:] |= key[1:] - key[:-1] < window
    near[:-1] |= key[1:] - key[:-1] < window
    # by_end[d][p]: the largest sum at end p + d among the rows at position p
    by_end = np.full((window, n_pos), -1, dtype=np.int64)
    alone = ~near
    np.maximum.at(by_end[0], at[alone], count[alone])
    by_end[1:] = by_end[0]
    key, count, at = key[near], count[near], at[near]
    for d in range(window):
        total = count.copy()
        for k in range(1, window - d):  # earlier rows of the code inside the window ending at pos + d
            inside = key[k:] + d - window < key[:-k]
            total[k:] += np.where(inside, count[:-k], 0)
        for k in range(1, d + 1):  # later rows up to that end
            inside = key[k:] <= key[:-k] + d
            total[:-k] += np.where(inside, count[k:], 0)
        np.maximum.at(by_end[d], at, total)
    has_row = by_end[0] >= 0  # every row puts at least its count (>= 0) at its own position
    best = by_end[0].copy()
    for d in range(1, window):
        np.maximum(best[d:], by_end[d][:-d], out=best[d:])
    present = np.convolve(has_row, np.ones(window, dtype=int))[:n_pos] > 0
    return best, present


@dataclass(frozen=True)
class BehaviourSteps:
    """A run's behaviour columns (`queries.monitor_behaviour_columns`) made ready once for
    `unverified_from`, which reads them again after each review: what does not depend on which
    behaviours are verified (the steps' positions, each window's rollouts, the rows' order by
    behaviour and step, the starting policy's behaviours) is worked out here."""

    names: list[str]
    code: np.ndarray  # a row's behaviour, as its index in `names`
    steps: np.ndarray  # the distinct steps, in order
    pos: np.ndarray  # a row's step, as its index in `steps`
    unflagged: np.ndarray
    rollouts: np.ndarray  # per step: the rollouts of the window ending there
    order: np.ndarray  # the rows by (code, pos)
    at_start: dict[str, int]  # unflagged rollouts of each behaviour at the first step
    window: int


def behaviour_steps(names: list[str], cols: Mapping[str, np.ndarray], window: int = 5) -> BehaviourSteps | None:
    """`BehaviourSteps` of a run's behaviour columns (None when it has none)."""
    if not names or len(cols["step"]) == 0:
        return None
    code = np.asarray(cols["code"], dtype=np.int64)
    steps, pos = positions(np.asarray(cols["step"], dtype=np.int64))
    unflagged = np.asarray(cols["unflagged"], dtype=np.int64)
    first = pos == 0
    at_start = np.bincount(code[first], weights=unflagged[first], minlength=len(names)).astype(np.int64).tolist()
    rollouts = _window_sums(np.bincount(pos, weights=np.asarray(cols["n"], dtype=np.int64), minlength=len(steps)), window)
    return BehaviourSteps(names, code, steps, pos, unflagged, rollouts, code_order(code, pos),
                          {names[c]: at_start[c] for c in np.unique(code[first]).tolist()}, window)


def unverified_from(ready: BehaviourSteps | None, approved: set[str]) -> tuple[set[str], set[str], Column]:
    """(the verified behaviours: the starting policy's common ones and `approved`; every behaviour
    of the run; `unverified_share` a step), as `signals.verified_at_start` and
    `signals.unverified_signals` compute them step by step."""
    if ready is None:
        return set(approved), set(), (np.zeros(0, dtype=np.int64), np.zeros(0))
    verified = verified_at_start(ready.at_start) | set(approved)
    keep = ~np.array([name in verified for name in ready.names])
    rows = ready.order[keep[ready.code[ready.order]]]  # the unverified behaviours' rows, still in (code, pos) order
    largest, present = window_max(ready.code, ready.pos, ready.unflagged, len(ready.steps), ready.window, rows)
    share = np.where(present, wilson_lower_columns(np.maximum(largest, 0).astype(float), ready.rollouts), 0.0)  # 0.0: none there
    return verified, set(ready.names), (ready.steps, share)


def unverified_columns(names: list[str], cols: Mapping[str, np.ndarray], approved: set[str],
                       window: int = 5) -> tuple[set[str], set[str], Column]:
    """`unverified_from` the run's behaviour columns (`queries.monitor_behaviour_columns`)."""
    verified, _, column = unverified_from(behaviour_steps(names, cols, window), approved)
    return verified, set(names), column


def bernoulli_js_columns(p: float, q: np.ndarray) -> np.ndarray:
    """`signals.bernoulli_js(p, q)` for every q at once."""
    p_no, q_no = 1.0 - p, 1.0 - q
    m_yes, m_no = (p + q) / 2, (p_no + q_no) / 2

    def term(a: np.ndarray, m: np.ndarray) -> np.ndarray:  # a * log2(a / m), 0 where a is 0
        a = np.broadcast_to(a, m.shape)
        out = np.zeros(m.shape)
        used = a > 0
        ratio = (a[used] / m[used]).tolist()
        out[used] = a[used] * np.fromiter(map(math.log2, ratio), dtype=float, count=len(ratio))
        return out

    kl_p = term(np.asarray(p, dtype=float), m_yes) + term(np.asarray(p_no, dtype=float), m_no)
    kl_q = term(q, m_yes) + term(q_no, m_no)
    return np.maximum(0.0, (kl_p + kl_q) / 2)


def toward_columns(start: np.ndarray, later: np.ndarray, actions: list[str], suspects: set[str]) -> np.ndarray:
    """`signals.toward(start, row, suspects)` for every row of `later` (steps x actions)."""
    if not suspects:
        return np.zeros(len(later))
    column = {a: i for i, a in enumerate(actions)}
    before, after = 0, np.zeros(len(later))
    for a in suspects:  # summed in the set's own order, as `toward` sums it
        if a in column:
            before, after = before + float(start[column[a]]), after + later[:, column[a]]
        else:
            before, after = before + 0.0, after + 0.0
    before = min(1.0, max(0.0, before))
    after = np.minimum(1.0, np.maximum(0.0, after))
    value = bernoulli_js_columns(before, after)
    return np.where(after > before, value, -value)


def detect_onset_columns(columns: Mapping[str, Column],
                         thresholds: Mapping[str, Threshold] = DEFAULT_THRESHOLDS) -> Onset | None:
    """`onset.detect_onset` of a run's signals as columns: for each signal the first reading that
    ends k readings past its threshold; the earliest step wins, and at one step the name first in
    order (the order `OnsetDetector` reads a step's signals in)."""
    found: tuple[int, str, float, Threshold] | None = None
    for name in sorted(columns):
        limit = threshold_of(name, thresholds)
        steps, values = columns[name]
        if limit is None or len(values) < limit.k:
            continue
        over = np.asarray(values) > limit.value
        runs = np.lib.stride_tricks.sliding_window_view(over, limit.k).all(axis=1)
        hits = np.flatnonzero(runs)
        if len(hits) == 0:
            continue
        at = int(hits[0]) + limit.k - 1
        step = int(steps[at])
        if found is None or step < found[0]:
            found = (step, name, float(values[at]), limit)
    if found is None:
        return None
    step, name, value, limit = found
    return Onset(step, name, value, limit.value, limit.k)
