"""A guarded run's scanners: the run config's `scanners`, loaded and checked, and each rollout's
hits turned into flags, penalty terms and reasons, as a fixture's repeat is.

Run config (`scanners`) -> engine -> scorer (`agentrl.scorers.score_rollouts`, the tabular engine's
fixture path) -> **enforce**. Under either scorer a hit is flagged (a violation, with the reason
"scanner NAME vN: explanation"); under `guarded` it also costs the task's violation penalty as
its own component (`scanner_penalty:NAME`) and the rollout is vetoed. A config names each scanner
by `spec`; the version it was launched with is recorded there, and a run refuses to start when the
rule changed since (another version would judge its rollouts). The launcher records each scanner's
held-out figures against the reviews of its task's runs (`with_scanner_validation`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.scan.scanner import ScanError, Scanner
from agentrl.scan.trajectory import Trajectory

PENALTY_PREFIX = "scanner_penalty:"


def penalty_component(name: str) -> str:
    return f"{PENALTY_PREFIX}{name}"


def scanner_reason(scanner: Scanner, explanation: str) -> str:
    return f"scanner {scanner.name} v{scanner.version}: {explanation or 'hit'}"


@dataclass(frozen=True)
class ScannerVerdicts:
    """What a run's scanners said about one rollout: the penalty terms (guarded only; 0 for a miss)
    and one reason per hit."""

    terms: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    vetoes: list = field(default_factory=list)  # one `agentrl.scorers.Veto` per scanner, as the guard applies them

    @property
    def penalty(self) -> float:
        return sum(self.terms.values())


def _spec_fields(value: Any) -> tuple[str, str | None]:
    if isinstance(value, str):
        return value, None
    if isinstance(value, Mapping):
        return str(value["spec"]), value.get("version")
    return str(value.spec), getattr(value, "version", None)


class Enforced(list):
    """A run's loaded scanners, as the scorers ask them (`agentrl.scorers` imports nothing of ours)."""

    def rollout(self, task, guarded, completion, environment, actions, behaviour, components, reward) -> ScannerVerdicts:
        return rollout_verdicts(self, task, guarded, completion, environment, actions, behaviour, components, reward)

    def episode(self, states, actions, components, reward, penalty) -> ScannerVerdicts:
        return episode_verdicts(self, states, actions, components, reward, True, penalty)


def load_enforced(specs: Sequence[Any], task: Any = None) -> Enforced:
    """The scanners a config names (`ScannerSpec`s, dicts or `PATH:NAME` strings), each at the
    version the config recorded (ScanError, one line, when the rule has changed since)."""
    from agentrl.scan.loader import load_scanner

    out = []
    for value in specs or ():
        if isinstance(value, Scanner):
            out.append(value)
            continue
        spec, version = _spec_fields(value)
        scanner = load_scanner(spec, task)
        if version is not None and str(version) != scanner.version and not spec.startswith("builtin:verify"):
            raise ScanError(f"scanner {spec} is now version {scanner.version}, but the run's config recorded "
                            f"{version}; launch the run again so its config records the rule it enforces")
        out.append(scanner)
    return Enforced(out)


def judge(scanners: Sequence[Scanner], trajectory: Trajectory, guarded: bool, penalty: float) -> ScannerVerdicts:
    """Every scanner on one trajectory. A scanner that fails is a hit, with its error as the
    explanation: a rule that cannot judge a rollout does not let it teach."""
    from agentrl.scorers import Veto

    terms, reasons, vetoes = {}, [], []
    for scanner in scanners:
        try:
            result = scanner.scan(trajectory)
            hit, explanation = result.hit, result.explanation
        except Exception as error:  # the user's rule
            hit, explanation = True, f"failed: {type(error).__name__}: {error}"
        if guarded:
            terms[penalty_component(scanner.name)] = -abs(penalty) if hit else 0.0
        if hit:
            reasons.append(scanner_reason(scanner, explanation))
        vetoes.append(Veto(penalty_component(scanner.name), -abs(penalty), scanner_reason(scanner, explanation) if hit else None))
    return ScannerVerdicts(terms, reasons, vetoes)


def rollout_verdicts(scanners: Sequence[Scanner], task: Any, guarded: bool, completion: Any, environment: Any,
                     actions: Sequence[str], behaviour: str | None, components: Mapping[str, float],
                     reward: float) -> ScannerVerdicts:
    """A language-model rollout being scored (`score_rollouts`): its completion's messages."""
    messages = completion if isinstance(completion, Sequence) and not isinstance(completion, str) else \
        [{"role": "assistant", "content": str(completion or "")}]
    trajectory = Trajectory.of_messages(messages, actions=list(actions), behaviour=behaviour, reward=reward,
                                        components=dict(components), task=task, environment=environment)
    return judge(scanners, trajectory, guarded, float(getattr(task, "violation_penalty", 1.0)))


def episode_verdicts(scanners: Sequence[Scanner], states: Sequence[str], actions: Sequence[str],
                     components: Mapping[str, float], reward: float, guarded: bool, penalty: float) -> ScannerVerdicts:
    """A gym episode (the tabular engine): the states it saw and the actions it took."""
    from agentrl.record.behaviour import default_behaviour

    trajectory = Trajectory.of_row({"states": list(states), "actions": list(actions), "reward": reward,
                                    "components": dict(components), "behaviour": default_behaviour(list(actions))})
    return judge(scanners, trajectory, guarded, penalty)


def with_scanner_validation(runs_dir: Path, config):
    """`config` with each scanner's version and held-out figures recorded, against the reviews of
    its task's runs in the store (left unrecorded when the store cannot be opened now)."""
    specs = list(getattr(config, "scanners", None) or [])
    if not specs or all(s.validation is not None for s in specs):
        return config
    from agentrl.config import make_config
    from agentrl.engines.registry import get_engine
    from agentrl.record.rundir import DB_FILENAME
    from agentrl.store.db import StoreError, connect
    from agentrl.tasks.loader import absolute_spec

    settings = config.model_dump()
    spec = get_engine(config.kind).task_spec(settings)
    if not spec or not (Path(runs_dir) / DB_FILENAME).is_file():
        return config
    import duckdb

    from agentrl.scan.validate import held_out, task_runs, validate_scanner
    from agentrl.tasks import load_task

    try:
        con = connect(Path(runs_dir), wait_s=0.5)
    except (StoreError, duckdb.Error):  # the dashboard's own process holds it, or it is busy: unrecorded
        return config
    try:
        task_spec = absolute_spec(spec)
        task, runs = load_task(task_spec), task_runs(con, task_spec)
        recorded = []
        for value, scanner in zip(specs, load_enforced(specs, task)):
            figure = held_out(validate_scanner(con, scanner, runs, task))
            recorded.append(dict(value.model_dump(), version=scanner.version, validation=None if figure is None else {
                k: getattr(figure, k) for k in ("split", "precision", "recall", "f1", "positives", "negatives", "note")}))
    finally:
        con.close()
    return make_config(**dict(settings, scanners=recorded))
