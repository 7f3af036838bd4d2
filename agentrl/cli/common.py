"""What every command shares: the usage error, the `--runs-dir` option and the run config that
`train` and `launch` read from `--preset`, `--config` or `--task`."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrl.record.rundir import default_runs_dir


class UsageError(Exception):
    """A command-line mistake; printed as one line, exit status 2."""


def add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", help="where runs are stored (default $AGENTRL_RUNS_DIR or runs/)")


def runs_dir_of(args: argparse.Namespace) -> Path:
    return Path(args.runs_dir) if getattr(args, "runs_dir", None) else default_runs_dir()


def config_from_args(args: argparse.Namespace, command: str):
    """The run config from --preset, --config or --task, with the --name, --step-delay and --scorer
    overrides; `--task` with a preset or a config file replaces that run's task."""
    from agentrl.config import config_from_json, load_config_file, load_preset, make_config

    overrides = {"name": args.name, "step_delay": args.step_delay, "scorer": args.scorer}
    if args.preset is not None:
        config = load_preset(args.preset, **overrides)
    elif args.config is not None:
        config = load_config_file(args.config, **overrides)
    elif getattr(args, "config_json", None) is not None:  # a launcher on another machine sent it
        config = config_from_json(args.config_json, **overrides)
    elif args.task is not None:
        return make_config(kind="trl", task=args.task, **{k: v for k, v in overrides.items() if v is not None})
    else:
        raise UsageError(f"{command} needs --preset, --config or --task")
    if args.task is not None:
        if "task" not in type(config).model_fields:
            raise UsageError(f"--task is for language-model runs (kind 'trl'); a {config.kind} run trains the refund gym")
        config = make_config(**dict(config.model_dump(), task=args.task))
    return config
