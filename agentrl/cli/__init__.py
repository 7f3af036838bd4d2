"""The command line: `agentrl COMMAND` (installed by `make install`), or `python -m agentrl COMMAND`.
Each command module registers its subcommands.

Every error a user can cause (unknown preset, invalid values, unreadable config, unwritable runs
directory, a held, damaged or full store, an argument argparse refuses) ends as one line on stderr
and exit status 2, before anything is written. A reader that stops early (`gate RUN | head`) ends
the command quietly with status 141, as a shell reports SIGPIPE. The library's messages go through
`logging` (loggers under `agentrl`); `main` shows them on stderr as plain lines, as the commands
always printed them. A command module adds itself to `COMMAND_MODULES`; its `register(sub)` adds parsers
whose `func` default is the command.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from agentrl.cli import (behaviour_commands, bench_commands, import_commands, launch_commands, lm_commands, monitor_commands,
                         review_commands, run_commands, scan_commands, store_commands)
from agentrl.cli.common import UsageError
from agentrl.config import ConfigError
from agentrl.record.rundir import RunsDirError

COMMAND_MODULES = (run_commands, launch_commands, store_commands, review_commands, behaviour_commands, lm_commands,
                   monitor_commands, import_commands, bench_commands, scan_commands)


BROKEN_PIPE_EXIT = 128 + 13  # what a shell reports for a command ended by SIGPIPE


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a refused argument said in one line (argparse prints the usage first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see `{self.prog} --help`)\n")


def parser() -> argparse.ArgumentParser:
    installed = Path(sys.argv[0]).name == "agentrl" if sys.argv and sys.argv[0] else False
    top = OneLineParser(prog="agentrl" if installed else "python -m agentrl", description="Train and inspect agent-RL runs.")
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
    from agentrl.store.db import StoreError, full_disk_first
    from agentrl.store.decisions import DecisionLogError

    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except (ConfigError, RunsDirError, StoreError, DecisionLogError, UsageError) as error:
        print(f"error: {one_line(full_disk_first(str(error)))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE_EXIT
    except OSError as error:  # the file system refused a path the user gave (a file for a folder, a full disk)
        print(f"error: {one_line(_os_error_line(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _os_error_line(error: OSError) -> str:
    from agentrl.store.db import is_full_disk

    where = f": {error.filename}" if error.filename else ""
    text = f"{error.strerror or error}{where}"
    return f"the disk is full ({text}); free some space and run the command again" if is_full_disk(error) else text


def _quiet_stdout() -> None:
    """The reader went away: point stdout at /dev/null, so the interpreter's own flush at exit
    finds nothing to complain about (Python's documented pattern for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (captured in a test): nothing to flush
        pass
