"""The script engine's run config: a user's own training command, started by the dashboard.

Launch -> **config** -> `agentrl.engines.script.engine`. The command is an argument list, one
argument per line on the Launch form, and runs as it is: no shell ever reads it, so quotes,
pipes and `$VARIABLES` reach the program unchanged. Inside it, `agentrl.init()` (or the TRL
callback) writes into the run the dashboard made.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from agentrl.config.base import RunConfig
from agentrl.record.rundir import RUN_DIR_ENV, SUPERVISOR_ENV

ENV_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
RESERVED_ENV = (RUN_DIR_ENV, SUPERVISOR_ENV, "AGENTRL_SEED")


class ScriptConfig(RunConfig):
    """A run of your own command (a TRL script with the agentrl callback, a loop with agentrl.init)."""

    labels: ClassVar[dict[str, str]] = {"command": "command", "cwd": "working directory", "env": "environment",
                                        "rounds": "expected steps"}

    kind: Literal["script"] = Field(default="script", description="Your own command, recording through agentrl.init or the TRL callback.")
    name: str = Field(default="my-script", min_length=1, max_length=80, description="Human name of the run; the run id is derived from it.")
    scorer: str = Field(default="outcome", description="The label this run is compared under ('outcome' or 'guarded'); the command computes its own rewards.")
    command: list[str] = Field(
        default_factory=lambda: ["python", "examples/custom_loop.py"], min_length=1, max_length=1000,
        json_schema_extra={"widget": "lines"},
        description="The command, one argument per line, run without a shell (quotes, pipes and $VARIABLES are passed as they are). "
                    "`python` is the dashboard's own Python.")
    cwd: str | None = Field(default=None, max_length=4096, description="Folder the command runs in; empty: the project folder.")
    env: list[str] = Field(default_factory=list, max_length=200, json_schema_extra={"widget": "lines"},
                           description="Extra environment variables, one NAME=value per line (kept in the run's config: no secrets).")
    rounds: int | None = Field(default=None, ge=1, le=10_000_000,
                               description="Steps the command will log, for progress and ETA; empty: what it tells agentrl.init, else unknown.")
    seed: int = Field(default=7, ge=0, le=2**63 - 1, description="Given to the command as $AGENTRL_SEED.")
    step_delay: float = Field(default=0.0, ge=0, le=0, json_schema_extra={"form": "hidden"},
                              description="Not used: the command keeps its own pace.")

    @field_validator("command")
    @classmethod
    def _arguments(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the first line must name the program to run, such as python")
        if any("\x00" in arg for arg in value):
            raise ValueError("an argument holds a NUL character, which no program can receive")
        return value

    @field_validator("scanners")
    @classmethod
    def _no_scanners(cls, value):
        if value:  # a scanner that cannot veto must not look enforced
            raise ValueError("the script engine cannot enforce scanners: your command computes its own rewards; "
                             "remove them, and scan the run afterwards with agentrl scan RUN_ID --scanner PATH:NAME")
        return value

    @field_validator("env")
    @classmethod
    def _variables(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not ENV_ENTRY.match(entry):
                raise ValueError(f"{entry!r} is not NAME=value (a name of letters, digits and _, then =)")
            if entry.split("=", 1)[0] in RESERVED_ENV:
                raise ValueError(f"{entry.split('=', 1)[0]} is set by agentrl itself; remove it")
        return value
