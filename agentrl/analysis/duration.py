"""How long a run will take, said before it starts: the step delay it asks for plus the time a step
of its engine took in earlier runs on this machine.

queries.past_step_seconds -> **analysis.duration** -> Launch page. A run longer than `LONG_RUN_S`
is started only once the person has confirmed it (100,000 rounds of a 0.25 s delay is 7 hours).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.analysis.live import clock

LONG_RUN_S = 3600.0


@dataclass(frozen=True)
class Duration:
    seconds: float  # at least this long (the step delays alone, when no earlier run was measured)
    measured: bool  # whether earlier runs of the engine told the time of a step
    text: str

    @property
    def long(self) -> bool:
        return self.seconds > LONG_RUN_S

    @property
    def warning(self) -> str:
        """One line for a long run: 'This run takes about 6:58:20.'"""
        return f"This run takes {'about' if self.measured else 'at least'} {clock(self.seconds)}."


def estimate(total_steps: int, step_delay: float, seconds_per_step: float | None) -> Duration:
    """The run's duration from its steps, its step delay and the measured time of a step (None: unknown)."""
    delay = total_steps * step_delay
    if seconds_per_step is None:
        text = (f"at least {clock(delay)} of step delay; no earlier run of this engine has measured a step yet"
                if delay else "unknown until a run of this engine has measured a step")
        return Duration(delay, False, text)
    seconds = delay + total_steps * seconds_per_step
    how = f"{total_steps:,} steps × ({step_delay:g} s delay + {seconds_per_step:.3g} s per step measured in earlier runs)"
    return Duration(seconds, True, f"about {clock(seconds)} ({how})")
