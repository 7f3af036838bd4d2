"""What every command shares: the usage error and the `--runs-dir` option."""

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
