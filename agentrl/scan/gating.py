"""The promotion gate's view of a run's scanners: each enforced scanner's held-out recall against
the reviews of its task's runs, as of now, and whether it reaches the floor the user set.

Gate (`agentrl.review.gate`) -> **gating** -> validate. A scanner that guarded the run is only as
good as what it catches: a rule with a low recall let the shortcuts it missed teach. The figures
are computed again at the gate (reviews made since the launch count); what the launch recorded
stays in the run's config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agentrl.scan.scanner import ScanError


@dataclass(frozen=True)
class RecallCheck:
    name: str
    passed: bool
    figure: str
    detail: str = ""


def scanner_recall_checks(con, run: dict, floor: float) -> list[RecallCheck]:
    """One check per scanner the run's config enforces (none for a run without scanners)."""
    from agentrl.review.reviews import ReviewError, load_run_task
    from agentrl.scan.enforce import load_enforced
    from agentrl.scan.validate import held_out, task_runs, validate_scanner

    config = run.get("config")
    config = json.loads(config) if isinstance(config, str) else (config or {})
    specs = config.get("scanners") or []
    if not specs:
        return []
    checks = []
    try:
        task_spec, task = load_run_task(run)
    except ReviewError as error:
        return [RecallCheck(f"enforced scanners' held-out recall ≥ {floor:.0%}", False, "task not loaded", str(error))]
    runs = task_runs(con, task_spec)
    for spec in specs:
        label = f"scanner {spec.get('spec', '?').rsplit(':', 1)[-1]} v{spec.get('version')}"
        name = f"{label}: held-out recall ≥ {floor:.0%}"
        try:
            (scanner,) = load_enforced([spec], task)
        except ScanError as error:
            checks.append(RecallCheck(name, False, "not loaded", str(error)))
            continue
        figure = held_out(validate_scanner(con, scanner, runs, task))
        if figure is None or figure.recall is None:
            checks.append(RecallCheck(name, False, "no held-out recall", figure.note if figure else "no labels"))
            continue
        checks.append(RecallCheck(name, figure.recall >= floor, f"recall {figure.recall:.2f} "
                                  f"({figure.true_positives} of {figure.positives} held-out positives)",
                                  f"precision {figure.precision:.2f}" if figure.precision is not None else figure.note))
    return checks
