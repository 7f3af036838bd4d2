"""agentrl: train tool-using agents with group-relative RL, and record every run in DuckDB.

The library under the dashboard. It never imports Streamlit; the flow is
launch (config, launcher) -> run process (engines, or a user's own script) -> record (chunks) ->
store -> queries -> pages.

The public face, for recording any training script:

```python
import agentrl

agentrl.init(project="refunds", name="my-grpo", config={"lr": 1e-5})
for step in range(1, 101):
    ...
    agentrl.log({"loss": 0.25, "kl": 0.01, "reward": 0.8}, step=step)
agentrl.finish()
```

`init` returns a `Run` (`run.log`, `run.log_trajectories`, `run.config`, `run.summary`, `run.finish`);
`agentrl.Api()` reads runs back as DataFrames, also while the dashboard runs.

A task of your own is an `agentrl.Task` (`agentrl.load_task("path/to/file.py:TASK")` checks one);
`init` returns `agentrl.record.run.Run`; rows are the record types of `agentrl.record.rows`
(`TrajectoryRecord`, `StepRecord`, `EvalRecord`) or dicts of their fields. These names load on
first use, so `import agentrl` itself loads nothing heavy (no torch, Streamlit, DuckDB or Arrow).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_PUBLIC = {
    "init": "agentrl.record.api",
    "log": "agentrl.record.api",
    "finish": "agentrl.record.api",
    "Api": "agentrl.store.reader",
    "Run": "agentrl.record.run",
    "StepRecord": "agentrl.record.rows",
    "TrajectoryRecord": "agentrl.record.rows",
    "EvalRecord": "agentrl.record.rows",
    "RecordError": "agentrl.record.rows",
    "RECORD_SCHEMA_VERSION": "agentrl.record.rows",
    "Task": "agentrl.tasks.contract",
    "Verdict": "agentrl.tasks.contract",
    "DecisionPoint": "agentrl.tasks.contract",
    "load_task": "agentrl.tasks.loader",
}
__all__ = ["__version__", *_PUBLIC]

if TYPE_CHECKING:  # for readers and type checkers; at run time the names load on first use
    from agentrl.record.api import finish, init, log
    from agentrl.store.reader import Api
    from agentrl.record.rows import RECORD_SCHEMA_VERSION, EvalRecord, RecordError, StepRecord, TrajectoryRecord
    from agentrl.record.run import Run
    from agentrl.tasks.contract import DecisionPoint, Task, Verdict
    from agentrl.tasks.loader import load_task


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'agentrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
