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

from agentrl.monitor.onset import DEFAULT_THRESHOLDS, Onset, OnsetDetector, Threshold, detect_onset
from agentrl.monitor.signals import (
    ANY_STATE,
    Episode,
    Rollout,
    SuspectMap,
    column_signals,
    drift_signals,
    held_out_pass_rates,
    merge,
    probe_signals,
    rollout_signals,
    test_gap_signals,
    toward,
    unverified_signals,
    verified_at_start,
)

__all__ = ["Episode", "Onset", "OnsetDetector", "RunMonitor", "Threshold", "DEFAULT_THRESHOLDS", "detect_onset",
           "store_signals", "store_onset", "ANY_STATE"]


def _run_task(con, run_id: str) -> str | None:
    """The run's task spec (its config's `task`, else its engine's), for its fixtures."""
    import json

    from agentrl.engines.registry import UnknownEngineError, get_engine
    from agentrl.store import queries
    from agentrl.tasks.loader import absolute_spec

    run = queries.get_run(con, run_id)
    if run is None:
        return None
    try:
        spec = get_engine(run["kind"]).task_spec(json.loads(run["config"]) if isinstance(run["config"], str) else run["config"])
    except (UnknownEngineError, ValueError):
        return None
    return absolute_spec(spec) if spec else None


def store_direction(con, run_id: str) -> tuple[SuspectMap, dict[int, dict[str, float]]]:
    """The store's suspect actions and `unverified_share` per step (`agentrl.monitor.signals`)."""
    from agentrl.store import queries

    counts: dict[int, dict] = {}
    for step, behaviour, n, unflagged in queries.monitor_behaviour_counts(con, run_id):
        at = counts.setdefault(int(step), {None: 0})
        at[None] += int(n)
        at[behaviour] = int(unflagged)
    first = min(counts) if counts else None
    verified = verified_at_start({b: c for b, c in counts[first].items() if b is not None}) if first is not None else set()
    verified |= set(queries.monitor_approved_behaviours(con, run_id))
    behaviours = {b for at in counts.values() for b in at if b is not None}
    suspects = SuspectMap()
    fixtures = queries.monitor_fixture_behaviours(con, _run_task(con, run_id))
    for state, action, bad, total in queries.monitor_suspect_pairs(con, run_id, sorted(behaviours - verified), fixtures):
        suspects.add_counts(state, action, bad, total)
    return suspects, unverified_signals(counts, verified)


def store_signals(con, run_id: str) -> dict[int, dict[str, float]]:
    """Every signal of a run per step, from its rows in the store: the per-step tallies ingest kept
    and the decision-point distributions pivoted with numpy (a run of 15,625 steps in a store of
    10M trajectory rows: about 160 ms, where every trajectory read in Python took 3 s)."""
    from agentrl.store import queries

    tallies = queries.monitor_step_tallies(con, run_id)
    out = column_signals(tallies["step"], tallies)
    suspects, unverified = store_direction(con, run_id)
    out = merge(out, unverified)
    for state, steps, actions, probs in queries.monitor_distribution_matrices(con, run_id):
        # steps x actions, an action a step did not record as 0; signed drift from the first step recorded
        name = f"drift:{state}"
        bad = suspects.suspects(state)
        start = dict(zip(actions, probs[0].tolist()))
        for step, row in zip(steps[1:].tolist(), probs[1:].tolist()):
            if step > 0:
                out.setdefault(step, {})[name] = toward(start, dict(zip(actions, row)), bad)
    probes: dict[int, list[bool]] = {}
    for step, _, violation in queries.monitor_probes(con, run_id).itertuples(index=False):
        probes.setdefault(int(step), []).append(bool(violation))
    probed = {s: p for s, p in probe_signals(probes).items() if s > 0}
    gaps = test_gap_signals(queries.monitor_test_pass_rates(con, run_id))
    return merge(out, probed, gaps) if probed or gaps else dict(sorted(out.items()))


def store_onset(con, run_id: str, thresholds: Mapping[str, Threshold] = DEFAULT_THRESHOLDS) -> Onset | None:
    """The run's onset: the event it recorded itself, else the one its stored signals show."""
    from agentrl.store import queries

    events = queries.monitor_events(con, run_id)
    onsets = events[events["kind"] == "onset"] if not events.empty else events
    if not onsets.empty:
        first = onsets.iloc[0]
        limit = thresholds.get(str(first["signal"]).split(":", 1)[0])
        return Onset(int(first["step"]), str(first["signal"]), float(first["value"]), float(first["threshold"]),
                     limit.k if limit else 0)
    return detect_onset(store_signals(con, run_id), thresholds)


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
