"""`agentrl.init`: record any training script, the way our engines record theirs.

A user's script (or `agentrl.integrations.trl.AgentrlCallback`) -> **init** -> `Run` -> chunks ->
store. `init` makes a run folder in a runs directory (the dashboard's, by default) and returns
the one writer, `agentrl.record.run.Run`:

```python
run = agentrl.init(name="my-grpo", config={"lr": 1e-5})
for step in range(1, 101):
    ...
    run.log_trajectories(step, [{"traj_idx": i, "task_id": t, "reward": r, "success": ok} ...])
    run.log_step(step, {"loss": loss, "kl": kl})
run.finish()
```

When `AGENTRL_RUN_DIR` is set (a command the dashboard launched, kind `script`), `init` writes
into that run folder instead, and the engine process that started the command keeps the run's
lifecycle: its status, pid and end. Nothing here installs a signal handler.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.record.locations import check_chunks_url
from agentrl.record.rows import RecordError
from agentrl.record.run import Run
from agentrl.record.rundir import (
    RUN_DIR_ENV,
    SUPERVISOR_ENV,
    RunDir,
    RunsDirError,
    default_runs_dir,
    new_run,
)

SCRIPT_KIND = "script"  # the engine (agentrl.engines.registry) of every run a user's own code records


def init(name: str | None = None, config: Any = None, runs_dir: str | Path | None = None, *,
         total_steps: int | None = None, scorer: str = "outcome", flush_interval: float | None = None,
         chunks_url: str | None = None) -> Run:
    """Start recording a run; returns its writer (also a context manager).

    name: shown on every page (default: the script's file name). config: the run's settings, a
    dict, dataclass, pydantic model, argparse namespace or anything with `to_dict()`; stored as
    JSON. runs_dir: default `$AGENTRL_RUNS_DIR`, else `runs/`. total_steps: for the Live page's
    progress and ETA. scorer: the label the run is compared under ('outcome' or 'guarded').
    chunks_url: write the run's chunks under `<chunks_url>/<run_id>/` instead of its folder (a
    shared folder or any fsspec URL, such as s3://bucket/chunks; default `$AGENTRL_CHUNKS_URL`).
    """
    from agentrl.scorers import SCORERS

    if total_steps is not None and (total_steps.__class__ is not int or total_steps < 1):
        raise ValueError(f"total_steps must be a positive int, not {total_steps!r}")
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {sorted(SCORERS)} (the label the run is compared under), not {scorer!r}")
    if chunks_url is not None:  # a URL fsspec cannot open, or storage that cannot be reached, is refused before a run folder is made
        check_chunks_url(chunks_url, reach=True)
    settings = plain_config(config)
    attached = os.environ.get(RUN_DIR_ENV)
    if attached:
        already = _OPEN.get(Path(attached).resolve())
        if already is not None and not already.closed:
            return already  # one writer per run: a second init (a callback and a loop) shares it
        run_dir = RunDir(Path(attached))
        if not run_dir.meta_path.is_file():
            raise RunsDirError(f"{RUN_DIR_ENV}={attached!r} is not a run folder (it has no run.json); unset it to "
                               "record into a runs directory, or let the dashboard's script engine set it")
        # The command's own settings, beside the launch config that started it.
        meta = {"logged_config": settings, **({"total_steps": total_steps} if total_steps else {})}
        run_dir.update_meta(**meta)
        supervised = bool(os.environ.get(SUPERVISOR_ENV))
    else:
        run_dir = new_run(Path(runs_dir) if runs_dir is not None else default_runs_dir(), name or default_name(),
                          SCRIPT_KIND, scorer, settings, total_steps=total_steps)
        supervised = False
    run = Run(run_dir, total_steps, supervised=supervised, close_at_exit=True, flush_interval=flush_interval,
              chunks_url=chunks_url)
    if attached:
        _OPEN[Path(attached).resolve()] = run
    return run


_OPEN: dict[Path, Run] = {}  # the run this process writes into under AGENTRL_RUN_DIR


def default_name() -> str:
    """The running script's file name without its suffix ('train' for train.py), else 'run'."""
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    return script or "run"


def plain_config(config: Any) -> dict[str, Any]:
    """`config` as a JSON object: a mapping, a dataclass, a pydantic model, an argparse namespace or
    anything with `to_dict()` (TRL's and transformers' configs); values JSON cannot hold become
    their text."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        values = dict(config)
    elif dataclasses.is_dataclass(config) and not isinstance(config, type) and not hasattr(config, "to_dict"):
        values = dataclasses.asdict(config)
    elif callable(getattr(config, "model_dump", None)):
        values = config.model_dump(mode="json")
    elif callable(getattr(config, "to_dict", None)):
        values = config.to_dict()
    elif hasattr(config, "__dict__") and not isinstance(config, type):
        values = vars(config)
    else:
        raise RecordError(f"config must be a dict (or a dataclass, pydantic model or namespace), not {type(config).__name__}")
    return json.loads(json.dumps(values, default=str))
