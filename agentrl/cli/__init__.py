"""The command line: `python -m agentrl COMMAND`. Each command module registers its subcommands.

Every error a user can cause (unknown preset, invalid values, unreadable config, unwritable runs
directory, a held or damaged database) ends as one line on stderr and exit status 2, before
anything is written. A command module adds itself to `COMMAND_MODULES`; its `register(sub)` adds parsers
whose `func` default is the command.
"""

from __future__ import annotations

import argparse
import sys

from agentrl.cli import (behaviour_commands, bench_commands, import_commands, launch_commands, lm_commands, monitor_commands,
                         review_commands, run_commands, store_commands)
from agentrl.cli.common import UsageError
from agentrl.config import ConfigError
from agentrl.record.rundir import RunsDirError

COMMAND_MODULES = (run_commands, launch_commands, store_commands, review_commands, behaviour_commands, lm_commands,
                   monitor_commands, import_commands, bench_commands)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m agentrl", description="Train and inspect agent-RL runs.")
    sub = top.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return top


def one_line(message: str) -> str:
    """The message on one line: a control character (a newline or carriage return in a path the
    user typed) is shown escaped, so the error stays one line a script can read."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from agentrl.store.db import StoreError
    from agentrl.store.decisions import DecisionLogError

    try:
        return args.func(args)
    except (ConfigError, RunsDirError, StoreError, DecisionLogError, UsageError) as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
