"""A cheap look at whether any run has committed chunks since the last look: the dashboard's
wake-up, so a logged step is ingested within tens of milliseconds instead of at the next tick.

Run process -> chunks -> **watch** -> store. A commit renames files into `<run>/chunks/`, which
moves that folder's modification time. `CommitWatch.changed()` stats the chunks folder of every
run written to recently (one `stat` each, microseconds), and the runs directory itself: a new
run's folder moves it, and the directory is listed again at once (else about once a second, to
forget idle runs). A new run has no chunks folder until its first flush, so its run folder is
watched until one appears: its first commit is seen as soon as a known run's would be.
`BackgroundIngest(wake=watch.changed)` polls it between its regular ticks. On a file system whose times are coarse (a second or more)
a change can go unseen: the regular tick still takes it, as it always did.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentrl.record.chunks import CHUNKS_DIR

RESCAN_S = 1.0  # how often the runs directory itself is listed
ACTIVE_WINDOW_S = 120.0  # a run whose chunks have not moved for this long is no longer polled


class CommitWatch:
    """`changed()`: True when some recently active run's chunks folder moved since the last call."""

    def __init__(self, runs_dir: Path, rescan_s: float = RESCAN_S, active_window_s: float = ACTIVE_WINDOW_S):
        self.runs_dir = Path(runs_dir)
        self.rescan_s = rescan_s
        self.active_window_s = active_window_s
        self._seen: dict[str, int] = {}  # chunks folder (or a new run's folder) -> its mtime (ns) at the last look
        self._no_chunks: set[str] = set()  # the run folders in _seen: runs with no chunks folder yet
        self._last_scan = float("-inf")
        self._top: int | None = None  # the runs directory's mtime at the last listing

    def changed(self) -> bool:
        changed = False
        try:
            top = os.stat(self.runs_dir).st_mtime_ns
        except OSError:
            top = None
        if top != self._top or time.monotonic() - self._last_scan >= self.rescan_s:
            self._top = top  # a run folder was made (or removed): list the directory now
            changed = self._rescan()
        for folder, before in list(self._seen.items()):
            try:
                now = os.stat(folder).st_mtime_ns
            except OSError:
                del self._seen[folder]
                self._no_chunks.discard(folder)
                continue
            if now != before:
                self._seen[folder] = now
                if folder in self._no_chunks and not self._chunks_appeared(folder):
                    continue  # run.json or status.json rewritten: nothing committed yet
                changed = True
        return changed

    def _chunks_appeared(self, run_folder: str) -> bool:
        """A new run's folder moved: when it now has a chunks folder, watch that instead."""
        chunks = os.path.join(run_folder, CHUNKS_DIR)
        try:
            mtime = os.stat(chunks).st_mtime_ns
        except OSError:
            return False
        del self._seen[run_folder]
        self._no_chunks.discard(run_folder)
        self._seen[chunks] = mtime
        return True

    def _rescan(self) -> bool:
        """List the runs directory: add runs written to within the window (a new one counts as a
        change), drop the others."""
        self._last_scan = time.monotonic()
        horizon = time.time_ns() - int(self.active_window_s * 1e9)
        found = False
        try:
            entries = list(os.scandir(self.runs_dir))
        except OSError:
            return False
        active = {}
        no_chunks = set()
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            folder = os.path.join(entry.path, CHUNKS_DIR)
            try:
                mtime = os.stat(folder).st_mtime_ns
            except OSError:
                try:  # no chunks yet: a new run (or one that writes its chunks elsewhere); watch its folder
                    mtime = entry.stat(follow_symlinks=False).st_mtime_ns
                except OSError:
                    continue
                if mtime >= horizon:  # (not a change by itself: nothing is committed yet)
                    active[entry.path] = self._seen.get(entry.path, mtime)
                    no_chunks.add(entry.path)
                continue
            if mtime >= horizon:
                if self._seen.get(folder) != mtime:
                    found = True
                active[folder] = mtime
        self._seen = active
        self._no_chunks = no_chunks
        return found
