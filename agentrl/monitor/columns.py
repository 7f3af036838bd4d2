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


@dataclass(frozen=True)
class CodeRows:
    """Rows of (code, position, count) made ready once for `window_max_of`, which reads them again
    for each subset of codes (each set of reviews): one row a (code, position), sorted by
    (code, position), and for the rows with another row of their code within the window (`near`),
    each window sum a row's own position opens. None of it depends on which codes are read: a
    window never holds two codes, so leaving codes out changes no other code's sums."""

    code: np.ndarray  # a row's code
    at: np.ndarray  # a row's position
    count: np.ndarray  # the row's count (the counts of a repeated (code, position) summed)
    near: np.ndarray  # bool: another row of the code within the window
    near_sums: np.ndarray  # (window, rows near): the sum at end `at + d` of the window, d = 0..window-1
    n_pos: int
    window: int


def code_rows(code: np.ndarray, pos: np.ndarray, count: np.ndarray, n_pos: int, window: int) -> CodeRows:
    """`CodeRows` of rows that may repeat a (code, position), in any order.

    The rows are sorted as one array of integers, each (code, position, count) packed into one
    int64 (a sort of values, not an argsort and three gathers: on a run of 500,000 rows 10 ms
    against 25). Each row's sum at end pos_i + d is the rows of its code from the window's start
    to that end, all within `window` rows of row i: a few shifted comparisons, on the near rows."""
    span = n_pos + window  # codes never share a window
    key = np.asarray(code, dtype=np.int64) * span + np.asarray(pos, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    bits = max(1, int(count.max()).bit_length()) if len(count) else 1
    if len(count) and int(count.min()) >= 0 and int(key.max()) < 1 << (62 - bits):
        packed = np.sort((key << bits) | count)
        key, count = packed >> bits, packed & ((1 << bits) - 1)
    else:
        order = np.argsort(key, kind="stable")
        key, count = key[order], count[order]
    if len(key) > 1 and not np.all(key[1:] != key[:-1]):  # a step split over commits: one row a (code, pos)
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        key, count = key[starts], np.add.reduceat(count, starts)
    row_code = key // span
    at = key - row_code * span
    near = np.zeros(len(key), dtype=bool)
    near[1:] |= key[1:] - key[:-1] < window
    near[:-1] |= key[1:] - key[:-1] < window
    key_n, count_n = key[near], count[near]
    near_sums = np.empty((window, len(key_n)), dtype=np.int64)
    for d in range(window):
        total = count_n.copy()
        for k in range(1, window - d):  # earlier rows of the code inside the window ending at pos + d
            inside = key_n[k:] + d - window < key_n[:-k]
            total[k:] += np.where(inside, count_n[:-k], 0)
        for k in range(1, d + 1):  # later rows up to that end
            inside = key_n[k:] <= key_n[:-k] + d
            total[:-k] += np.where(inside, count_n[k:], 0)
        near_sums[d] = total
    return CodeRows(row_code, at, count, near, near_sums, n_pos, window)


def window_max_of(rows: CodeRows, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`window_max` of the rows whose code `keep` (a bool a code) keeps; all of them by default."""
    n_pos, window = rows.n_pos, rows.window
    by_end = np.full((window, n_pos), -1, dtype=np.int64)  # by_end[d][p]: the largest sum at end p + d of rows at p
    if len(rows.code):
        kept = np.ones(len(rows.code), dtype=bool) if keep is None else np.asarray(keep, dtype=bool)[rows.code]
        alone = kept & ~rows.near  # its sum at every end its position opens is its own count
        np.maximum.at(by_end[0], rows.at[alone], rows.count[alone])
        by_end[1:] = by_end[0]
        near_kept = kept[rows.near]
        at = rows.at[rows.near][near_kept]
        for d in range(window):
            np.maximum.at(by_end[d], at, rows.near_sums[d][near_kept])
    has_row = by_end[0] >= 0  # every row puts at least its count (>= 0) at its own position
    best = by_end[0].copy()
    for d in range(1, window):
        np.maximum(best[d:], by_end[d][:-d], out=best[d:])
    present = np.convolve(has_row, np.ones(window, dtype=int))[:n_pos] > 0
    return best, present


def window_max(code: np.ndarray, pos: np.ndarray, count: np.ndarray, n_pos: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """For each position e (0..n_pos-1): the largest sum of one code's counts over positions
    e - window + 1 .. e, and whether any row lies in that window (rows may repeat a (code, pos)).

    Each row's code's sum is taken at the window ends its own position opens (pos .. pos + window
    - 1): a code's sum only grows at a position where it has a row, so the largest sum at every end
    is among these (`code_rows`, `window_max_of`)."""
    return window_max_of(code_rows(code, pos, count, n_pos, window))


@dataclass(frozen=True)
class BehaviourSteps:
    """A run's behaviour columns (`queries.monitor_behaviour_columns`) made ready once for
    `unverified_from`, which reads them again after each review: what does not depend on which
    behaviours are verified (the steps, each window's rollouts, the rows' window sums, the
    starting policy's behaviours) is worked out here."""

    names: list[str]
    steps: np.ndarray  # the distinct steps, in order
    rows: CodeRows  # (behaviour's index in `names`, step's index in `steps`, unflagged rollouts)
    rollouts: np.ndarray  # per step: the rollouts of the window ending there
    at_start: dict[str, int]  # unflagged rollouts of each behaviour at the first step

    def arrays(self) -> list[np.ndarray]:
        """Every array it holds (`agentrl.monitor.kept` makes them read-only)."""
        rows = self.rows
        return [self.steps, self.rollouts, rows.code, rows.at, rows.count, rows.near, rows.near_sums]


def behaviour_steps(names: list[str], cols: Mapping[str, np.ndarray], window: int = 5) -> BehaviourSteps | None:
    """`BehaviourSteps` of a run's behaviour columns (None when it has none)."""
    if not names or len(cols["step"]) == 0:
        return None
    code = np.asarray(cols["code"])
    steps, pos = positions(np.asarray(cols["step"], dtype=np.int64))
    unflagged = np.asarray(cols["unflagged"], dtype=np.int64)
    first = pos == 0
    at_start = np.bincount(code[first], weights=unflagged[first], minlength=len(names)).astype(np.int64).tolist()
    rollouts = _window_sums(np.bincount(pos, weights=np.asarray(cols["n"], dtype=np.int64), minlength=len(steps)), window)
    return BehaviourSteps(names, steps, code_rows(code, pos, unflagged, len(steps), window), rollouts,
                          {names[c]: at_start[c] for c in np.unique(code[first]).tolist()})


def unverified_from(ready: BehaviourSteps | None, approved: set[str]) -> tuple[set[str], set[str], Column]:
    """(the verified behaviours: the starting policy's common ones and `approved`; every behaviour
    of the run; `unverified_share` a step), as `signals.verified_at_start` and
    `signals.unverified_signals` compute them step by step."""
    if ready is None:
        return set(approved), set(), (np.zeros(0, dtype=np.int64), np.zeros(0))
    verified = verified_at_start(ready.at_start) | set(approved)
    keep = np.array([name not in verified for name in ready.names], dtype=bool)
    largest, present = window_max_of(ready.rows, keep)
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
