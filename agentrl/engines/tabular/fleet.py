"""The environment fleet: a round's rollouts sampled across N worker processes (SPEC section 9).

Tabular run process -> training loop -> **fleet** -> workers. In agent RL the environment, not
the gradient, is the budget: an environment that answers slowly (a remote API, a sandbox)
leaves the trainer waiting, and N environments in parallel divide that wait by up to N. The
fleet samples a round's batch (task-major, `group_size` rollouts per task) with the policy of
that round, each rollout in a worker process with a seed of its own, and hands the batch back in
order, so the update is the same whatever the number of workers.

`workers=1` samples in the run process itself with the same per-rollout seeds: the baseline a
speedup is measured against. The SPEC path (one `random.Random(seed)` for the whole run, which
the published figures need bit for bit) is the training loop's own sampler and does not go
through the fleet; a run uses the fleet only when it asks for workers or an environment latency.
`env_latency_s` makes each environment step wait that long, the way SPEC section 9 declares a
0.3 s step, so the fleet's effect can be measured on a CPU-bound toy gym.

`backend="ray"` puts the workers on a Ray cluster instead: one actor per worker (1 CPU each),
spread over the cluster's nodes, each sampling its contiguous slice with the same per-rollout seeds, so the batch is the one the
processes give. The run connects to the cluster it was launched on (a Ray job has RAY_ADDRESS),
or to RAY_ADDRESS / the latest `ray start` on this machine; it never starts a cluster of its own.
"""

from __future__ import annotations

import multiprocessing
import random
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from agentrl.engines.tabular.policy import SoftmaxPolicy
from agentrl.ray_backend import BackendError, require_ray
from agentrl.tasks.refund.gym import Task
from agentrl.tasks.refund.rollout import Trajectory, rollout


def rollout_seed(run_seed: int, round_index: int, position: int) -> int:
    """The seed of one rollout: a function of the run's seed, the round and the batch position only,
    so the batch does not depend on how many workers sampled it."""
    return random.Random(f"{run_seed}:{round_index}:{position}").getrandbits(63)


def _sample_jobs(actions: tuple[str, ...], logits: dict[str, list[float]], jobs: list[tuple[Task, int]], max_steps: int,
                 env_latency_s: float) -> list[Trajectory]:
    """In a worker: the rollouts of `jobs` (task, seed) with the round's policy."""
    policy = SoftmaxPolicy(actions)
    policy.logits = {state: list(row) for state, row in logits.items()}
    return [rollout(policy, task, random.Random(seed), max_steps=max_steps, env_latency_s=env_latency_s)
            for task, seed in jobs]


FLEET_BACKENDS = ("processes", "ray")
ACTOR_START_TIMEOUT_S = 120.0  # a cluster without a free CPU per actor would otherwise wait forever


class Sampler:
    """One environment worker on a Ray actor: samples the slice of a round it is given."""

    def ready(self) -> bool:
        return True

    def sample(self, actions, logits, jobs, max_steps, env_latency_s) -> list[Trajectory]:
        return _sample_jobs(actions, logits, jobs, max_steps, env_latency_s)


class RayActors:
    """N `Sampler` actors on the Ray cluster this process is (or gets) connected to."""

    def __init__(self, workers: int):
        ray = self._ray = require_ray("fleet_backend 'ray'")
        self._connected_here = False
        if not ray.is_initialized():
            # ray.init replaces the SIGTERM handler with sys.exit; the run's own handler turns SIGTERM
            # (Ray's stop_job, the supervisor passing a signal on) into a stop between steps: keep it.
            main = threading.current_thread() is threading.main_thread()
            previous = signal.getsignal(signal.SIGTERM) if main else None
            try:  # "auto": the cluster of this job, RAY_ADDRESS, or the latest `ray start`; never a new one
                ray.init(address="auto", log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise BackendError(f"fleet_backend 'ray' found no Ray cluster to join ({' '.join(str(error).split())[:200]}); "
                                   "launch the run with --backend ray, or start one with `ray start --head`") from None
            finally:
                if main and previous is not None:
                    signal.signal(signal.SIGTERM, previous)
            self._connected_here = True
        # SPREAD: over every node with a free CPU, not packed on the run's own node first (Ray's default).
        remote = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(Sampler)
        self.actors = [remote.remote() for _ in range(workers)]
        try:
            ray.get([actor.ready.remote() for actor in self.actors], timeout=ACTOR_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise BackendError(f"the Ray cluster had no room for {workers} fleet actors (1 CPU each) within "
                               f"{ACTOR_START_TIMEOUT_S:.0f} s: lower the environment workers or add nodes") from None

    def map(self, slices: list[list], actions: tuple[str, ...], logits: dict[str, list[float]], max_steps: int,
            env_latency_s: float) -> list[Trajectory]:
        """Each slice on its own actor; the trajectories in slice order."""
        refs = [actor.sample.remote(actions, logits, part, max_steps, env_latency_s) for actor, part in zip(self.actors, slices)]
        return [trajectory for part in self._ray.get(refs) for trajectory in part]

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []
        if self._connected_here:
            self._ray.shutdown()  # disconnects this process; the cluster goes on
            self._connected_here = False


@dataclass
class FleetStats:
    """What the fleet measured: environment transitions per wall second of sampling."""

    transitions: int = 0
    sampling_s: float = 0.0
    per_round: list[float] = field(default_factory=list)  # transitions/s of each round

    @property
    def transitions_per_s(self) -> float:
        return self.transitions / self.sampling_s if self.sampling_s > 0 else 0.0


class RolloutFleet:
    """N workers (processes, or Ray actors) that sample a round's batch; use as a context manager."""

    def __init__(self, workers: int, run_seed: int, max_steps: int = 7, env_latency_s: float = 0.0,
                 backend: str = "processes"):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        if backend not in FLEET_BACKENDS:
            raise ValueError(f"unknown fleet backend {backend!r}; choose one of {list(FLEET_BACKENDS)}")
        self.workers = workers
        self.run_seed = run_seed
        self.max_steps = max_steps
        self.env_latency_s = env_latency_s
        self.backend = backend
        self.stats = FleetStats()
        self._pool = self._actors = None
        if backend == "ray":
            self._actors = RayActors(workers)
        elif workers > 1:
            # 'spawn': the run process has threads (the chunk flusher), and forking a threaded
            # process can copy a held lock into the child.
            self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))

    def sample(self, policy: SoftmaxPolicy, tasks: Sequence[Task], group_size: int, round_index: int) -> list[Trajectory]:
        """The round's task-major batch, sampled across the workers, in batch order."""
        jobs = [(task, rollout_seed(self.run_seed, round_index, i))
                for i, task in enumerate(task for task in tasks for _ in range(group_size))]
        started = time.perf_counter()
        # Contiguous slices, one per worker: the batch comes back in order.
        size = -(-len(jobs) // self.workers)
        slices = [jobs[k: k + size] for k in range(0, len(jobs), size)]
        if self._actors is not None:
            batch = self._actors.map(slices, tuple(policy.actions), policy.logits, self.max_steps, self.env_latency_s)
        elif self._pool is None:
            batch = _sample_jobs(tuple(policy.actions), policy.logits, jobs, self.max_steps, self.env_latency_s)
        else:
            futures = [self._pool.submit(_sample_jobs, tuple(policy.actions), policy.logits, part, self.max_steps,
                                         self.env_latency_s) for part in slices]
            batch = [trajectory for future in futures for trajectory in future.result()]
        seconds = time.perf_counter() - started
        transitions = sum(t.n_steps for t in batch)
        self.stats.transitions += transitions
        self.stats.sampling_s += seconds
        self.stats.per_round.append(transitions / seconds if seconds > 0 else 0.0)
        return batch

    def close(self) -> None:
        if self._actors is not None:
            self._actors.close()
            self._actors = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> RolloutFleet:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
