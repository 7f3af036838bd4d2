"""A trajectory's behaviour: a short canonical string of what it did, for any task and any engine.

Engine (or a task's own `behaviour(environment, completion)`) -> **behaviour** -> the trajectory
row's `behaviour` column -> store (`step_behaviours`) -> the Behaviours view, `agentrl
behaviours`, `agentrl diff`, review by behaviour and the gate's coverage check.

By default a behaviour is the names of the tool calls in order, joined by " > "
("lookup > request_approval > refund > finish"); a trajectory with no call is "(no tool calls)".
A row written without one (an older agentrl, a script that did not say) gets the default at
ingest, computed by the same rule in SQL (`agentrl.store.queries.ledger.BEHAVIOUR_SQL`), so the
store holds a behaviour for every trajectory. Imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Sequence

SEPARATOR = " > "
NO_CALLS = "(no tool calls)"
MAX_CHARS = 500  # a behaviour is a label a person reads; a longer one is cut here, marked with "…"


def default_behaviour(actions: Sequence[str] | None) -> str:
    """The tool calls' names in order, joined by " > "; "(no tool calls)" when there are none."""
    names = [str(a) for a in (actions or ()) if a is not None]
    return _cut(SEPARATOR.join(names)) if names else NO_CALLS


def clip(text: str) -> str:
    """A task's own behaviour as stored: on one line, at most MAX_CHARS; empty is "(no tool calls)"."""
    return _cut(" ".join(str(text).split())) or NO_CALLS


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"
