"""Watching a run's signals from its chunk files, as they arrive (`python -m agentrl watch RUN_ID`).

Run folder (commits) -> **watch** -> signals -> onset. It reads the run's committed chunks
directly (read-only Parquet, never the database, which the dashboard may hold), so it works for
any run, while it trains or after, with or without a dashboard. It yields each new step's
signals and stops at the onset (the caller exits 3, so a script or a scheduler can act on it)
or when the run has ended and every commit is read. A commit it cannot read (a damaged chunk)
costs that commit only: it is named once in `unreadable` and the watch goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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
        self.unreadable: list[tuple[int, str]] = []  # (commit number, why): commits left out

    def poll(self) -> list[Reading]:
        """Readings of the steps whose `steps` row arrived since the last poll."""
        for commit in list_commits(self.run.root, after=self._after):
            replaced_read = commit.replaces and max(last for _, last in commit.replaces) <= self._after
            self._after = commit.number
            if replaced_read:  # a compacted commit of rows already read, one by one
                continue
            try:
                tables = self._read(commit)
            except Exception as error:  # a damaged chunk: that commit only is left out, and named
                self.unreadable.append((commit.number, " ".join(f"{type(error).__name__}: {error}".split())[:300]))
                continue
            self._take(*tables)
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

    @staticmethod
    def _read(commit) -> tuple[list, list, list, list, list]:
        """A commit's rows the signals need, every file read before any is taken (a damaged file
        must not leave half a commit behind)."""
        files = commit.files

        def rows(table: str, columns=None) -> list[dict]:
            return commit.read(table, columns=columns).to_pylist() if table in files else []

        return (rows("trajectories", ["step", "reward", "violation", "success", "vetoed"]), rows("action_probs"),
                rows("evals"), rows("events"), rows("steps", ["step"]))

    def _take(self, trajectories, action_probs, evals, events, steps) -> None:
        for row in trajectories:
            self._rollouts.append(Rollout(row["step"], float(row["reward"] or 0.0), bool(row["violation"]),
                                          bool(row["success"]), bool(row["vetoed"])))
        for row in action_probs:
            self._dists.setdefault(row["step"], {}).setdefault(row["state"], {})[row["action"]] = row["prob"]
        for row in evals:
            if row["split"] == "probe":
                self._probes.setdefault(row["step"], []).append(bool(row["violation"]))
        for row in events:
            if row["kind"] == "onset" and self.recorded_onset is None:
                self.recorded_onset = Onset(row["step"], row["signal"], row["value"], row["threshold"], 0)
        self._done_steps.extend(row["step"] for row in steps)

    def ended(self) -> bool:
        return (self.run.status() or {}).get("status") in TERMINAL_STATUSES


def watch(run: RunDir, interval: float = 1.0, timeout: float | None = None,
          unreadable: Callable[[int, str], None] | None = None) -> Iterator[Reading]:
    """Readings as they arrive; stops after the onset, or when the run has ended and all is read.
    `unreadable(commit number, why)` is told of each commit left out (a damaged chunk)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    watcher = ChunkWatcher(run)
    while True:
        ended = watcher.ended()  # read before the poll: a run writes its last commit before its final status
        readings = watcher.poll()
        if unreadable is not None:
            for number, why in watcher.unreadable:
                unreadable(number, why)
            watcher.unreadable.clear()
        for reading in readings:
            yield reading
            if reading.onset is not None:
                return
        if ended or (deadline is not None and time.monotonic() > deadline):
            return
        time.sleep(interval)
