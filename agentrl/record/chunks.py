"""The chunk protocol: how a run process hands rows to the store without opening it.

A run buffers rows per table and flushes them about every second (and at close) as
`<run_dir>/<table>/part-NNNNN.parquet`, written under a temporary name and renamed into place
with `os.replace`, so a reader sees a whole file or none. A run killed with SIGKILL loses at
most its unflushed buffer. Only the store (store.py) reads chunks back.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

from agentrl.record.schema import CHUNK_TABLES, to_arrow

FLUSH_INTERVAL_S = 1.0
FLUSH_ROWS = 5000  # a buffer this large is flushed at once, whatever the clock says
CHUNK_GLOB = "part-*.parquet"


class ChunkWriter:
    """Buffers rows per table; a background thread flushes every `interval` seconds.

    Thread-safe: the run's main thread appends while the flusher writes. Call `close()` (or use
    it as a context manager) to flush what is left.
    """

    def __init__(self, run_dir: Path, interval: float = FLUSH_INTERVAL_S, on_flush=None):
        self.run_dir = Path(run_dir)
        self.interval = interval
        self.on_flush = on_flush  # called in the flusher thread before each periodic flush
        self._buffers: dict[str, list[dict]] = {table: [] for table in CHUNK_TABLES}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._next_part = {table: self._first_free_part(table) for table in CHUNK_TABLES}
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.flush_latencies_s: list[float] = []  # wall time of each write, for the benchmark
        self._thread = threading.Thread(target=self._loop, name="chunk-flusher", daemon=True)
        self._thread.start()

    def _first_free_part(self, table: str) -> int:
        # A resumed writer must never overwrite a chunk that may already be ingested.
        # Numerically: past part-99999 the names gain a digit and stop sorting as text.
        parts = [int(p.stem.split("-")[1]) for p in (self.run_dir / table).glob(CHUNK_GLOB)]
        return max(parts) + 1 if parts else 0

    def append(self, table: str, rows: list[dict] | dict) -> None:
        if self._error is not None:
            raise RuntimeError(f"chunk flusher failed: {self._error}") from self._error
        rows = [rows] if isinstance(rows, dict) else rows
        with self._lock:
            buffer = self._buffers[table]
            buffer.extend(rows)
            large = len(buffer) >= FLUSH_ROWS
        if large:
            self.flush()

    def flush(self) -> list[Path]:
        """Write every non-empty buffer as one chunk each; returns the new files."""
        # One flush at a time (the timer's and a full buffer's), so chunks land in order.
        with self._flush_lock:
            self._last_flush = time.monotonic()
            return self._flush()

    def flush_soon(self, min_interval: float = 0.25) -> list[Path]:
        """Flush now unless the last flush was under `min_interval` seconds ago.

        A run calls this when a step ends: a slow run's step reaches the store at once instead
        of waiting for the timer, and a fast run still writes at most a few files a second.
        """
        if time.monotonic() - self._last_flush < min_interval:
            return []
        return self.flush()

    def _flush(self) -> list[Path]:
        with self._lock:
            pending = {table: rows for table, rows in self._buffers.items() if rows}
            for table in pending:
                self._buffers[table] = []
            # Part numbers are reserved under the lock, so concurrent flushes never collide.
            parts = {}
            for table in pending:
                parts[table] = self._next_part[table]
                self._next_part[table] += 1
        written = []
        # Steps last: a visible steps row implies the other rows of its step are visible too
        # (a reader, or a run killed mid-flush, never sees a step without its trajectories).
        for table, rows in sorted(pending.items(), key=lambda item: item[0] == "steps"):
            written.append(self._write(table, rows, parts[table]))
        return written

    def _write(self, table: str, rows: list[dict], part: int) -> Path:
        started = time.perf_counter()
        folder = self.run_dir / table
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"part-{part:05d}.parquet"
        tmp = folder / f".part-{part:05d}.parquet.tmp"
        pq.write_table(to_arrow(table, rows), tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, final)  # atomic: readers see the whole chunk or nothing
        self.flush_latencies_s.append(time.perf_counter() - started)
        return final

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.on_flush is not None:
                    self.on_flush()
                self.flush()
            except BaseException as error:  # surfaced to the run on its next append
                self._error = error
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.flush()
        if self._error is not None:
            raise RuntimeError(f"chunk flusher failed: {self._error}") from self._error

    def __enter__(self) -> "ChunkWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def chunk_files(run_dir: Path, table: str) -> list[Path]:
    """Complete chunks of one table (temporary files are dot-prefixed and never match)."""
    return sorted((Path(run_dir) / table).glob(CHUNK_GLOB))
