"""The onset monitor: is this run starting to game its reward? Signals per step, and the onset.

Two doors, one computation (`signals`, `onset`):
- in the run process, `RunMonitor` reads the rows the engine is about to log (each step's
  trajectories, its decision-point distributions, its probe replays) and, at an onset, records an
  `events` row and, with `on_onset: stop`, ends the run with the reason;
- on the store side, `store_signals` / `store_onset` compute the same signals from a run's rows in
  DuckDB, for any run (a user's own script included): `python -m agentrl watch`, the Live banner
  and chart markers, the Compare and Runs columns, and the promotion gate's "no onset" check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentrl.monitor.columns import BehaviourSteps, Column, behaviour_steps, detect_onset_columns, toward_columns, unverified_from
from agentrl.monitor.onset import DEFAULT_THRESHOLDS, Onset, OnsetDetector, Threshold, detect_onset
from agentrl.monitor.signals import (
    ANY_STATE,
    Episode,
    Rollout,
    SuspectMap,
    drift_signals,
    held_out_pass_rates,
    probe_signals,
    rollout_signals,
    tally_columns,
    test_gap_signals,
    unverified_signals,
    verified_at_start,
)

__all__ = ["Episode", "Onset", "OnsetDetector", "RunMonitor", "Threshold", "DEFAULT_THRESHOLDS", "detect_onset",
           "store_signals", "store_signal_columns", "store_signal_reads", "RowReads", "store_onset", "ANY_STATE"]


def _run_task(con, run_id: str) -> str | None:
    """The run's task spec (its config's `task`, else its engine's), for its fixtures."""
    import json

    from agentrl.engines.registry import UnknownEngineError, get_engine
    from agentrl.store import queries
    from agentrl.tasks.loader import absolute_spec

    run = queries.monitor_run_engine(con, run_id)
    if run is None:
        return None
    kind, config = run
    try:
        spec = get_engine(kind).task_spec(json.loads(config) if isinstance(config, str) else config)
    except (UnknownEngineError, ValueError):
        return None
    return absolute_spec(spec) if spec else None


def _reviews_and_fixtures(con, run_id: str) -> tuple[list[tuple], list[str]]:
    """What a run's suspects read besides its rows: its reviewed trajectories and the behaviours of
    its task's exploit fixtures."""
    from agentrl.store import queries

    return queries.monitor_reviewed(con, run_id), queries.monitor_fixture_behaviours(con, _run_task(con, run_id))


def _behaviour_steps(con, run_id: str) -> tuple[list[str], BehaviourSteps | None]:
    """The run's behaviours and their per-step tallies made ready for `unverified_from`."""
    from agentrl.store import queries

    names, cols = queries.monitor_behaviour_columns(con, run_id)
    return names, behaviour_steps(names, cols)


def _store_direction(con, run_id: str, early=None, behaviours=None) -> tuple[SuspectMap, Column]:
    """The store's suspect actions and `unverified_share` a step, as a column. `early`: a future
    of `_reviews_and_fixtures`, read on another cursor meanwhile (else they are read here);
    `behaviours`: the run's `_behaviour_steps`, read before (else read here)."""
    from agentrl.store import queries

    names, ready = behaviours if behaviours is not None else _behaviour_steps(con, run_id)
    reviewed, fixture_behaviours = early.result() if early is not None else _reviews_and_fixtures(con, run_id)
    approved = {behaviour for verdict, behaviour, *_ in reviewed if verdict == "approve" and behaviour is not None}
    verified, _, unverified = unverified_from(ready, approved)
    suspect = set(fixture_behaviours) | (set(names) - verified)
    return suspect_map(queries.monitor_action_uses(con, run_id, sorted(suspect)), reviewed, suspect), unverified


def suspect_map(uses: list[tuple], reviewed: list[tuple], suspect: set[str]) -> SuspectMap:
    """The `SuspectMap` of every trajectory of a run from its (state, action, suspect uses, uses),
    where a use is suspect by its trajectory's flag or its behaviour (in `suspect`), and its
    reviewed trajectories: a rejected one is suspect too. Each action counts at its state and,
    where that is a recorded state, at '*' as well."""
    counts: dict[tuple, list[int]] = {(state, action): [int(bad), int(total)] for state, action, bad, total in uses}
    for verdict, behaviour, violation, states, actions in reviewed:
        if verdict != "reject" or not actions or violation or behaviour in suspect:
            continue  # not rejected, or counted as suspect already
        at = states if states is not None and len(states) == len(actions) else [ANY_STATE] * len(actions)
        for state, action in zip(at, actions):
            counts.setdefault((state, action), [0, 0])[0] += 1
    anywhere: dict[str, list[int]] = {}
    for (state, action), (bad, total) in counts.items():
        if state is not None and state != ANY_STATE:
            tally = anywhere.setdefault(action, [0, 0])
            tally[0], tally[1] = tally[0] + bad, tally[1] + total
    suspects = SuspectMap()
    for (state, action), (bad, total) in counts.items():
        suspects.add_counts(state, action, bad, total)
    for action, (bad, total) in anywhere.items():
        suspects.add_counts(ANY_STATE, action, bad, total)
    return suspects


def store_direction(con, run_id: str) -> tuple[SuspectMap, dict[int, dict[str, float]]]:
    """The store's suspect actions and `unverified_share` per step (`agentrl.monitor.signals`)."""
    suspects, (steps, values) = _store_direction(con, run_id)
    return suspects, {step: {"unverified_share": value} for step, value in zip(steps.tolist(), values.tolist())}


@dataclass(frozen=True)
class RowReads:
    """What a run's stored signals read of its rows alone (not of its reviews or the fixtures):
    its behaviours' per-step tallies as columns, its per-step rollout tallies, its decision-point
    distributions, its probe replays and its test pass rates. `agentrl.monitor.kept` keeps them
    for the run being reviewed, so a decision recomputes only what depends on the reviews."""

    behaviours: tuple[list[str], BehaviourSteps | None]  # `_behaviour_steps`
    tallies: dict
    distributions: list
    probe_rows: object  # a DataFrame (step, ..., violation)
    pass_rates: dict


def _suspect_free_reads(con, run_id: str) -> tuple:
    """On a cursor of its own, which it closes: the reads of a run's signals that do not depend on which actions are suspect: its per-step
    tallies, its decision-point distributions, its probe replays and its test pass rates."""
    from agentrl.store import queries

    try:
        return (queries.monitor_step_tallies(con, run_id), queries.monitor_distribution_matrices(con, run_id),
                queries.monitor_probes(con, run_id), queries.monitor_test_pass_rates(con, run_id))
    finally:
        con.close()  # its own cursor


def store_signal_columns(con, run_id: str) -> dict[str, Column]:
    """Every signal of a run, each as (steps, values) where it was read, from its rows in the
    store: the per-step tallies and `behaviour_actions` ingest kept, and the decision-point
    distributions, all pivoted with numpy (`agentrl.monitor.columns`)."""
    return store_signal_reads(con, run_id)[0]


def store_signal_reads(con, run_id: str, rows: RowReads | None = None) -> tuple[dict[str, Column], RowReads]:
    """`store_signal_columns`, and the `RowReads` they came from; given `rows` (read before, and
    the run's rows unchanged since), only the reviews, fixtures and suspect actions' uses are read.

    Without `rows`, the reads that do not depend on the suspect actions run on their own cursor
    in a second thread while this one works out the suspects (DuckDB and numpy's large array
    operations let go of the GIL): on the bench store that hid the distributions' 14 ms and the
    tallies' 5 ms behind the suspects' 80. The reviews and the fixtures' behaviours are read there
    first, while this thread fetches the run's behaviour columns (they are needed only after
    those: 8-16 ms off the critical path). The thread ends with the call (a thread kept waiting
    would outlive the dashboard's services)."""
    from concurrent.futures import ThreadPoolExecutor

    if rows is not None:
        suspects, unverified = _store_direction(con, run_id, behaviours=rows.behaviours)
        return _assembled(rows, suspects, unverified), rows
    with ThreadPoolExecutor(1, thread_name_prefix="agentrl-signals") as side_reader:
        side_cursor = con.cursor()  # the side reads run one after another on it; the last closes it
        early = side_reader.submit(_reviews_and_fixtures, side_cursor, run_id)
        side = side_reader.submit(_suspect_free_reads, side_cursor, run_id)
        try:
            behaviours = _behaviour_steps(con, run_id)
            suspects, unverified = _store_direction(con, run_id, early, behaviours)
        finally:
            tallies, distributions, probe_rows, pass_rates = side.result()
    rows = RowReads(behaviours, tallies, distributions, probe_rows, pass_rates)
    return _assembled(rows, suspects, unverified), rows


def _assembled(rows: RowReads, suspects: SuspectMap, unverified: Column) -> dict[str, Column]:
    """Every signal's column from the run's row reads and its suspects."""
    import numpy as np

    steps = np.asarray(rows.tallies["step"], dtype=np.int64)
    out: dict[str, Column] = {}
    if len(steps):
        flagged_share, top_share, premium, paid = tally_columns(rows.tallies)
        out["flagged_share"], out["top_flagged_share"] = (steps, flagged_share), (steps, top_share)
        out["hack_premium"] = (steps[paid], premium[paid])
    out["unverified_share"] = unverified
    for state, recorded, actions, probs in rows.distributions:
        # steps x actions, an action a step did not record as 0; signed drift from the first step recorded
        later = np.asarray(recorded[1:]) > 0
        drift = toward_columns(probs[0], probs[1:][later], actions, suspects.suspects(state))
        out[f"drift:{state}"] = (np.asarray(recorded[1:])[later].astype(np.int64), drift)
    probes: dict[int, list[bool]] = {}
    for step, _, violation in rows.probe_rows.itertuples(index=False):
        probes.setdefault(int(step), []).append(bool(violation))
    probed = [(s, p["probe_violations"]) for s, p in probe_signals(probes).items() if s > 0]
    gaps = test_gap_signals(rows.pass_rates)
    for name, pairs in (("probe_violations", probed), ("test_gap", [(s, g["test_gap"]) for s, g in gaps.items()])):
        if pairs:
            out[name] = (np.array([s for s, _ in pairs], dtype=np.int64), np.array([v for _, v in pairs], dtype=float))
    return {name: column for name, column in out.items() if len(column[0])}


def store_signals(con, run_id: str) -> dict[int, dict[str, float]]:
    """Every signal of a run per step, from its rows in the store (`store_signal_columns`; a run of
    15,625 steps in a store of 10M trajectory rows: tens of milliseconds, where every trajectory
    read in Python took 3 s)."""
    out: dict[int, dict[str, float]] = {}
    for name, (steps, values) in store_signal_columns(con, run_id).items():
        for step, value in zip(steps.tolist(), values.tolist()):
            out.setdefault(step, {})[name] = value
    return dict(sorted(out.items()))


def store_onset(con, run_id: str, thresholds: Mapping[str, Threshold] = DEFAULT_THRESHOLDS,
                signal_columns=None) -> Onset | None:
    """The run's onset: the event it recorded itself, else the one its stored signals show
    (`signal_columns(con, run_id)`: `store_signal_columns`, or `agentrl.monitor.kept`'s)."""
    from agentrl.store import queries

    events = queries.monitor_events(con, run_id)
    onsets = events[events["kind"] == "onset"] if not events.empty else events
    if not onsets.empty:
        first = onsets.iloc[0]
        limit = thresholds.get(str(first["signal"]).split(":", 1)[0])
        return Onset(int(first["step"]), str(first["signal"]), float(first["value"]), float(first["threshold"]),
                     limit.k if limit else 0)
    return detect_onset_columns((signal_columns or store_signal_columns)(con, run_id), thresholds)


@dataclass
class RunMonitor:
    """The monitor inside a run process: call `observe` once per step, before the step's row is logged."""

    thresholds: Mapping[str, Threshold] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    window: int = 5
    detector: OnsetDetector = field(init=False)
    _rollouts: list[Rollout] = field(default_factory=list)
    _start: dict[str, dict[str, float]] = field(default_factory=dict)
    _suspects: SuspectMap = field(default_factory=SuspectMap)
    _verified: set[str] | None = None  # the starting policy's common behaviours, from the first step observed
    _behaviours: dict[int, dict] = field(default_factory=dict)  # step -> {behaviour: unflagged, None: rollouts}
    latest: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.detector = OnsetDetector(dict(self.thresholds))

    def start(self, distributions: Mapping[str, Mapping[str, float]]) -> None:
        """The starting policy's distributions at the decision points (step 0)."""
        self._start = {state: dict(dist) for state, dist in distributions.items()}

    def observe(self, step: int, rollouts: Sequence[tuple[float, bool, bool] | tuple[float, bool, bool, bool]],
                distributions: Mapping[str, Mapping[str, float]] | None = None,
                probe_violations: Sequence[bool] | None = None, episodes: Sequence[Episode] | None = None,
                components: Sequence[Mapping[str, float]] | None = None) -> Onset | None:
        """The step's (reward, flagged, success[, vetoed]) rows, its decision-point distributions, its
        probe replay if any, and its rollouts' `Episode`s (behaviour, states, actions, flagged): what
        says which actions are suspect (drift counts only toward them) and which behaviours nobody
        verified. Without episodes no action is suspect and drift reads 0. `components`: the
        rollouts' reward components; where they hold `tests` and `held_out`, `test_gap` is read."""
        self._rollouts.extend(Rollout(step, float(row[0]), bool(row[1]), bool(row[2]), bool(row[3]) if len(row) > 3 else False)
                              for row in rollouts)
        # Only the window the signals read is kept.
        first_kept = step - self.window + 1
        self._rollouts = [r for r in self._rollouts if r.step >= first_kept]
        signals = rollout_signals(self._rollouts, window=self.window).get(step, {})
        if episodes:
            signals.update(self._direction(step, episodes))
        if distributions and self._start:
            signals.update(drift_signals({0: self._start, step: dict(distributions)}, self._suspects).get(step, {}))
        if probe_violations:
            signals.update(probe_signals({step: list(probe_violations)})[step])
        rates = held_out_pass_rates(components) if components else None
        if rates is not None:
            signals.update(test_gap_signals({step: rates})[step])
        self.latest = signals
        return self.detector.update(step, signals)

    def _direction(self, step: int, episodes: Sequence[Episode]) -> dict[str, float]:
        if self._verified is None:
            first: dict[str, int] = {}
            for e in episodes:
                first[e.behaviour] = first.get(e.behaviour, 0) + 1
            self._verified = verified_at_start(first)
        counts: dict = {None: len(episodes)}
        for e in episodes:
            self._suspects.add(e, e.flagged or e.rejected or e.behaviour not in self._verified)
            if not e.flagged:
                counts[e.behaviour] = counts.get(e.behaviour, 0) + 1
        self._behaviours[step] = counts
        self._behaviours = {s: c for s, c in self._behaviours.items() if s > step - self.window}
        return unverified_signals(self._behaviours, self._verified, self.window).get(step, {})
