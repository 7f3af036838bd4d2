"""`agentrl.init`: record any training script, the way our engines record theirs.

A user's script (or `agentrl.integrations.trl.AgentrlCallback`) -> **init** -> `Run` -> chunks ->
store. `init` makes a run folder in a runs directory (the dashboard's, by default) and returns
the one writer, `agentrl.record.run.Run`:

```python
run = agentrl.init(project="refunds", name="my-grpo", config={"lr": 1e-5}, tags=["baseline"])
for step in range(1, 101):
    ...
    run.log_trajectories(step, [{"traj_idx": i, "task_id": t, "reward": r, "success": ok} ...])
    run.log({"loss": loss, "kl": kl, "reward": mean_reward}, step=step)   # or agentrl.log(...)
run.finish()                                                              # or agentrl.finish()
```

The calls are wandb's and Trackio's (`agentrl.record.metrics` says how metric names map to columns);
`id=` with `resume=` continues a run.

When `AGENTRL_RUN_DIR` is set (a command the dashboard launched, kind `script`), `init` writes
into that run folder instead, and the engine process that started the command keeps the run's
lifecycle: its status, pid and end. Nothing here installs a signal handler.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
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
    create_run_dir,
    default_runs_dir,
    ensure_writable,
    iso,
    new_run,
    utc_now,
)

SCRIPT_KIND = "script"  # the engine (agentrl.engines.registry) of every run a user's own code records


RESUME_MODES = ("allow", "must", "never")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def init(project: str | None = None, name: str | None = None, config: Any = None, runs_dir: str | Path | None = None, *,
         tags: Iterable[str] | None = None, notes: str | None = None, id: str | None = None,
         resume: str | bool | None = None, total_steps: int | None = None, scorer: str = "outcome",
         flush_interval: float | None = None, chunks_url: str | None = None, **wandb_only: Any) -> Run:
    """Start recording a run; returns its writer (also a context manager) and makes it the one
    `agentrl.log` and `agentrl.finish` use.

    project: a label to group runs by (wandb's and Trackio's). name: shown on every page (default:
    the script's file name). config: the run's settings, a dict, dataclass, pydantic model,
    argparse namespace or anything with `to_dict()`; stored as JSON (`run.config.update` adds to
    it). tags, notes: shown on the Runs page. id: the run's id (a folder name: letters, digits,
    `.`, `_`, `-`); default a new one. resume: with `id`, "allow" continues that run if it exists
    (else starts it), "must" continues it or fails, "never" (and None) fails if it exists; True
    means "allow". A continued run's steps go on from the last one it recorded. runs_dir: default
    `$AGENTRL_RUNS_DIR`, else `runs/`. total_steps: for the Live page's progress and ETA. scorer:
    the label the run is compared under ('outcome' or 'guarded'). chunks_url: write the run's
    chunks under `<chunks_url>/<run_id>/` instead of its folder (a shared folder or any fsspec URL,
    such as s3://bucket/chunks; default `$AGENTRL_CHUNKS_URL`). wandb's other keywords (entity,
    group, job_type, dir, mode, reinit, settings, ...) are accepted and ignored; a misspelt one is refused.
    """
    from agentrl.scorers import SCORERS

    unknown = sorted(set(wandb_only) - WANDB_KEYWORDS)
    if unknown:
        raise TypeError(f"init() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                        f"it takes project, name, config, runs_dir, tags, notes, id, resume, total_steps, scorer, "
                        "flush_interval and chunks_url")
    if total_steps is not None and (total_steps.__class__ is not int or total_steps < 1):
        raise ValueError(f"total_steps must be a positive int, not {total_steps!r}")
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {sorted(SCORERS)} (the label the run is compared under), not {scorer!r}")
    if project is not None and not isinstance(project, str):
        raise ValueError(f"project must be a str, not {project!r:.80}")
    if notes is not None and not isinstance(notes, str):
        raise ValueError(f"notes must be a str, not {notes!r:.80}")
    if tags is not None:
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise ValueError(f"tags must be a list of str, not {tags!r:.80}")
        tags = list(dict.fromkeys(tags))
    if resume is True:
        resume = "allow"
    elif resume is False:
        resume = None
    if resume is not None and resume not in RESUME_MODES:
        raise ValueError(f"resume must be one of {list(RESUME_MODES)} (with id=), not {resume!r}")
    if resume in ("allow", "must") and id is None:
        raise ValueError(f"resume={resume!r} needs id=, the id of the run to continue")
    if id is not None and (not isinstance(id, str) or not _RUN_ID.match(id)):
        raise ValueError(f"id must be letters, digits, '.', '_' or '-' (up to 128, a folder name), not {id!r:.80}")
    if chunks_url is not None:  # a URL fsspec cannot open, or storage that cannot be reached, is refused before a run folder is made
        check_chunks_url(chunks_url, reach=True)
    settings = plain_config(config)
    labels = {k: v for k, v in (("project", project), ("tags", tags), ("notes", notes)) if v is not None}
    attached = os.environ.get(RUN_DIR_ENV)
    continues = False
    if attached:
        already = _OPEN.get(Path(attached).resolve())
        if already is not None and not already.closed:
            _set_current(already)
            return already  # one writer per run: a second init (a callback and a loop) shares it
        run_dir = RunDir(Path(attached))
        if not run_dir.meta_path.is_file():
            raise RunsDirError(f"{RUN_DIR_ENV}={attached!r} is not a run folder (it has no run.json); unset it to "
                               "record into a runs directory, or let the dashboard's script engine set it")
        # The command's own settings, beside the launch config that started it.
        meta = {"logged_config": settings, **labels, **({"total_steps": total_steps} if total_steps else {})}
        run_dir.update_meta(**meta)
        supervised = bool(os.environ.get(SUPERVISOR_ENV))
        config_key = "logged_config"
    else:
        root = Path(runs_dir) if runs_dir is not None else default_runs_dir()
        existing = RunDir(root / id) if id is not None else None
        if existing is not None and existing.meta_path.is_file():
            if resume not in ("allow", "must"):
                raise RunsDirError(f"run {id!r} already exists in {str(root)!r}; pass resume='allow' to continue it, "
                                   "or choose another id")
            run_dir, continues = existing, True
            run_dir.update_meta(**({"config": {**(run_dir.meta() or {}).get("config", {}), **settings}} if settings else {}),
                                **({"name": name} if name else {}), **labels,
                                **({"total_steps": total_steps} if total_steps else {}))
        elif resume == "must":
            raise RunsDirError(f"run {id!r} does not exist in {str(root)!r}, so it cannot be continued (resume='must'); "
                               "use resume='allow' to start it")
        elif id is not None:
            ensure_writable(root)
            run_dir = create_run_dir(root, id, {"run_id": id, "name": name or default_name(), "kind": SCRIPT_KIND,
                                                "scorer": scorer, "created_at": iso(utc_now()), "total_steps": total_steps,
                                                "config": settings, **labels})
        else:
            run_dir = new_run(root, name or default_name(), SCRIPT_KIND, scorer, settings, total_steps=total_steps,
                              **labels)
        supervised = False
        config_key = "config"
    run = Run(run_dir, total_steps, supervised=supervised, close_at_exit=True, flush_interval=flush_interval,
              chunks_url=chunks_url, config_key=config_key, continues=continues)
    if attached:
        _OPEN[Path(attached).resolve()] = run
    _set_current(run)
    return run


WANDB_KEYWORDS = frozenset({"entity", "group", "job_type", "dir", "mode", "reinit", "settings", "save_code", "anonymous",
                            "magic", "sync_tensorboard", "monitor_gym", "allow_val_change", "fork_from", "resume_from",
                            "config_exclude_keys", "config_include_keys", "space_id", "dataset_id", "embed",
                            "private", "auto_log_gpu", "server", "tensorboard"})
"""Keywords of `wandb.init` and `trackio.init` that have no meaning here: accepted so a script
written for them runs unchanged, and ignored."""

_CURRENT: list[Run] = []  # the run agentrl.log and agentrl.finish use: the last one init returned


def _set_current(run: Run) -> None:
    _CURRENT[:] = [run]


def current_run() -> Run | None:
    """The run the last `agentrl.init` returned, while it is open."""
    return _CURRENT[0] if _CURRENT and not _CURRENT[0].closed else None


def log(metrics: Mapping, step: int | None = None, *, commit: bool | None = None) -> None:
    """`agentrl.log({"loss": 0.25}, step=None)`: `Run.log` on the run the last `agentrl.init` returned."""
    if not _CURRENT:
        raise RecordError("agentrl.log: no run to log to; call agentrl.init() first")
    _CURRENT[0].log(metrics, step=step, commit=commit)


def finish(status: str | None = None, error: str | None = None, *, exit_code: int | None = None,
           quiet: bool | None = None) -> None:
    """End the run the last `agentrl.init` returned (`Run.finish`); nothing when there is none."""
    if _CURRENT:
        run = _CURRENT.pop()
        run.finish(status, error, exit_code=exit_code)


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
