"""The declared throughput model of an agent-RL run (SPEC section 9).

Not a measurement: latencies per event are assumptions, and the model says how a run's own
totals (transitions, updates) turn into wall time as environments are parallelised.
"""

from __future__ import annotations

from dataclasses import dataclass

ENV_STEP_S = 0.300
SAMPLING_S = 0.030
UPDATE_S = 0.002


@dataclass(frozen=True)
class PhaseSeconds:
    environment: float
    sampling: float
    update: float


def phase_seconds(transitions: int, updates: int) -> PhaseSeconds:
    return PhaseSeconds(
        environment=transitions * ENV_STEP_S,
        sampling=transitions * SAMPLING_S,
        update=updates * UPDATE_S,
    )


def transitions_per_second(transitions: int, updates: int, n_envs: float) -> float:
    """Modelled throughput with `n_envs` parallel environments (n_envs may be math.inf)."""
    if n_envs <= 0:
        raise ValueError("n_envs must be positive")
    phases = phase_seconds(transitions, updates)
    return transitions / (phases.environment / n_envs + phases.sampling + phases.update)


def throughput_curve(transitions: int, updates: int, n_envs: list[int] | tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)) -> list[tuple[int, float]]:
    return [(n, transitions_per_second(transitions, updates, n)) for n in n_envs]
