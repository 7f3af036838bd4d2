"""Small helpers shared by the tests (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, interval: float = 0.05):
    """Poll `predicate` until it returns a truthy value or `timeout` seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
