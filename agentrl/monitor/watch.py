"""Watching a run's signals from its chunk files, as they arrive (`python -m agentrl watch RUN_ID`).

Run folder (commits) -> **watch** -> signals -> onset. It reads the run's committed chunks
directly (read-only Parquet, never the database, which the dashboard may hold), so it works for
any run, while it trains or after, with or without a dashboard. It yields each new step's
signals and stops at the onset (the caller exits 3, so a script or a scheduler can act on it)
or when the run has ended and every commit is read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from agentrl.monitor.onset import DEFAULT_THRESHOLDS, Onset, OnsetDetector
from agentrl.monitor.signals import Rollout, drift_signals, probe_signals, rollout_signals
from agentrl.record.chunks import list_commits
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir


@dataclass(frozen=True)
class Reading:
    """One step's signals, and the onset if this step is it."""

    step: int
    signals: dict[str, float]
    onset: Onset | None = None


class ChunkWatcher:
    """Reads a run's new commits and turns finished steps into signals, in step order."""

    def __init__(self, run: RunDir, window: int = 5):
        self.run = run
        self.window = window
        self.detector = OnsetDetector(dict(DEFAULT_THRESHOLDS))
        self._after = -1  # last commit read
        self._rollouts: list[Rollout] = []
        self._dists: dict[int, dict[str, dict[str, float]]] = {}
        self._probes: dict[int, list[bool]] = {}
        self._done_steps: list[int] = []
        self._reported = 0  # steps already yielded
        self.recorded_onset: Onset | None = None

    def poll(self) -> list[Reading]:
        """Readings of the steps whose `steps` row arrived since the last poll."""
        for commit in list_commits(self.run.root, after=self._after):
            replaced_read = commit.replaces and max(last for _, last in commit.replaces) <= self._after
            self._after = commit.number
            if replaced_read:  # a compacted commit of rows already read, one by one
                continue
            files = commit.files
            if "trajectories" in files:
                for row in commit.read("trajectories", columns=["step", "reward", "violation", "success", "vetoed"]).to_pylist():
                    self._rollouts.append(Rollout(row["step"], float(row["reward"] or 0.0), bool(row["violation"]),
                                                  bool(row["success"]), bool(row["vetoed"])))
            if "action_probs" in files:
                for row in commit.read("action_probs").to_pylist():
                    self._dists.setdefault(row["step"], {}).setdefault(row["state"], {})[row["action"]] = row["prob"]
            if "evals" in files:
                for row in commit.read("evals").to_pylist():
                    if row["split"] == "probe":
                        self._probes.setdefault(row["step"], []).append(bool(row["violation"]))
            if "events" in files and self.recorded_onset is None:
                for row in commit.read("events").to_pylist():
                    if row["kind"] == "onset":
                        self.recorded_onset = Onset(row["step"], row["signal"], row["value"], row["threshold"], 0)
                        break
            if "steps" in files:
                self._done_steps.extend(commit.read("steps", columns=["step"]).column("step").to_pylist())
        readings = []
        steps = sorted(set(self._done_steps))
        new = steps[self._reported:]
        if not new:
            return readings
        by_rollouts = rollout_signals(self._rollouts, window=self.window)
        start = self._dists.get(0) or (self._dists[min(self._dists)] if self._dists else None)
        for step in new:
            signals = dict(by_rollouts.get(step, {}))
            if start and step in self._dists:
                signals.update(drift_signals({0: start, step: self._dists[step]}).get(step, {}))
            if step in self._probes:
                signals.update(probe_signals({step: self._probes[step]})[step])
            readings.append(Reading(step, signals, self.detector.update(step, signals)))
        self._reported = len(steps)
        return readings

    def ended(self) -> bool:
        return (self.run.status() or {}).get("status") in TERMINAL_STATUSES


def watch(run: RunDir, interval: float = 1.0, timeout: float | None = None) -> Iterator[Reading]:
    """Readings as they arrive; stops after the onset, or when the run has ended and all is read."""
    deadline = None if timeout is None else time.monotonic() + timeout
    watcher = ChunkWatcher(run)
    while True:
        ended = watcher.ended()  # read before the poll: a run writes its last commit before its final status
        for reading in watcher.poll():
            yield reading
            if reading.onset is not None:
                return
        if ended or (deadline is not None and time.monotonic() > deadline):
            return
        time.sleep(interval)
