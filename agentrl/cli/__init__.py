"""The command line: `agentrl COMMAND` (installed by `make install`), or `python -m agentrl COMMAND`.
Each command module registers its subcommands.

Every error a user can cause (unknown preset, invalid values, unreadable config, unwritable runs
directory, a held or damaged database) ends as one line on stderr and exit status 2, before
anything is written. The library's messages go through `logging` (loggers under `agentrl`);
`main` shows them on stderr as plain lines, as the commands always printed them. A command module adds itself to `COMMAND_MODULES`; its `register(sub)` adds parsers
whose `func` default is the command.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from agentrl.cli import (bench_commands, import_commands, launch_commands, lm_commands, monitor_commands, review_commands,
                         run_commands, store_commands)
from agentrl.cli.common import UsageError
from agentrl.config import ConfigError
from agentrl.record.rundir import RunsDirError

COMMAND_MODULES = (run_commands, launch_commands, store_commands, review_commands, lm_commands, monitor_commands, import_commands,
                   bench_commands)


def parser() -> argparse.ArgumentParser:
    installed = Path(sys.argv[0]).name == "agentrl" if sys.argv and sys.argv[0] else False
    top = argparse.ArgumentParser(prog="agentrl" if installed else "python -m agentrl",
                                  description="Train and inspect agent-RL runs.")
    sub = top.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return top


def one_line(message: str) -> str:
    """The message on one line: a control character (a newline or carriage return in a path the
    user typed) is shown escaped, so the error stays one line a script can read."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def show_library_messages() -> None:
    """The library's log records (loggers under `agentrl`, INFO and up) as plain lines on stderr,
    unless the program already routed them (a handler on `agentrl` or the root logger)."""
    library = logging.getLogger("agentrl")
    if library.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    library.addHandler(handler)
    library.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    show_library_messages()
    from agentrl.store.db import StoreError
    from agentrl.store.decisions import DecisionLogError

    try:
        return args.func(args)
    except (ConfigError, RunsDirError, StoreError, DecisionLogError, UsageError) as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
