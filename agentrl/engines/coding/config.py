"""The coding engine's run config: the scripted coding attempts scored by the sandboxed tests.

Launch -> **config** -> `agentrl.engines.coding.engine`. Nothing is trained: each step scores one
coding task's group of attempts (SPEC section 10), `workers` test runs at a time.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from agentrl.config.base import RunConfig


class CodingConfig(RunConfig):
    """A scoring run over the built-in coding tasks."""

    labels: ClassVar[dict[str, str]] = {"rounds": "passes over the tasks", "workers": "parallel test runs",
                                        "step_delay": "step delay (s)"}

    kind: Literal["coding"] = Field(default="coding", description="Score the scripted coding attempts with the sandboxed test runner.")
    name: str = Field(default="coding-tests", min_length=1, max_length=80, description="Human name of the run; the run id is derived from it.")
    scorer: str = Field(default="guarded", description="'guarded': a refused write (the tests, an absolute path, `..`) is a violation and may not teach; 'outcome': every attempt may.")
    rounds: int = Field(default=1, gt=0, le=10_000, description="Passes over the coding tasks; each pass is one step per task.")
    workers: int | None = Field(default=None, ge=1, le=256, description="Parallel sandboxed test runs; empty: one per CPU core.")

    @property
    def total_steps(self) -> int:
        from agentrl.tasks.coding.tasks import CODING_TASKS

        return self.rounds * len(CODING_TASKS)
