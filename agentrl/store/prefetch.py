"""Reading ahead: a backlog's next commits are read and decoded in one thread while DuckDB takes
the batch before them, so reading Parquet and inserting overlap on two cores instead of taking
turns (both release the GIL).

Ingest -> **prefetch** -> the reader function. The reader runs at most `ahead` items ahead of the
consumer, so memory holds about one transaction's rows more; it must not touch the store.
"""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

AHEAD = 256  # commits read ahead: about one transaction of a backlog of full-speed tabular commits


def prefetched(items: Iterable[Item], read: Callable[[Item], Result], ahead: int = AHEAD) -> Iterator[tuple[Item, Result]]:
    """(item, read(item)) for each item in order, `read` running in a thread up to `ahead` items
    ahead. A single item is read in the caller's thread (a live tick: no thread to start)."""
    items = list(items)
    if len(items) <= 1:
        for item in items:
            yield item, read(item)
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix="agentrl-read-ahead")
    try:
        pending: collections.deque = collections.deque()
        upcoming = iter(items)
        for item in upcoming:
            pending.append((item, pool.submit(read, item)))
            if len(pending) >= ahead:
                break
        while pending:
            item, future = pending.popleft()
            following = next(upcoming, None)
            if following is not None:
                pending.append((following, pool.submit(read, following)))
            yield item, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
