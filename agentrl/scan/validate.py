"""A scanner scored against review decisions: precision, recall and F1 on the labelled trajectories,
on a development split and on a held-out split the rule was not written from.

CLI `agentrl scan RUN_ID --validate`, the launcher (a guarded run's scanners) and the gate ->
**validate** -> results, queries.scans. Labels: a reject or an exploit fixture is a positive, an
approve a negative (the latest verdict counts; a fixture stays positive). The split is fixed by a
hash of the trajectory's id (`run_id/step/traj_idx`), so it never depends on what else was
reviewed and a person writing a rule from the `dev` cases is judged on the `held_out` ones. A
split with fewer than `MIN_PER_CLASS` positives or negatives gets no figure: it says so instead.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from agentrl.scan.results import run_task, scan_run
from agentrl.scan.scanner import Scanner
from agentrl.store import queries

SPLITS = ("dev", "held_out")
MIN_PER_CLASS = 3  # positives and negatives a split needs before its figures mean anything


def split_of(run_id: str, step: int, traj_idx: int) -> str:
    """'held_out' for about half of all trajectories, fixed by their id; else 'dev'."""
    digest = hashlib.sha256(f"{run_id}/{int(step)}/{int(traj_idx)}".encode()).digest()
    return "held_out" if digest[0] % 2 else "dev"


@dataclass(frozen=True)
class Validation:
    """One scanner version on one split. precision/recall/f1 are None when there are too few labels
    (`note` says how many) or, for precision, when the scanner hit nothing."""

    scanner: str
    version: str
    split: str
    precision: float | None
    recall: float | None
    f1: float | None
    positives: int
    negatives: int
    true_positives: int
    false_positives: int
    unscanned: int  # labelled trajectories this version has no result for
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def figures(scanner: str, version: str, split: str, pairs: list[tuple[bool, bool]], unscanned: int) -> Validation:
    """`pairs`: (label, hit) of each labelled, scanned trajectory of the split."""
    positives = sum(label for label, _ in pairs)
    negatives = len(pairs) - positives
    tp = sum(label and hit for label, hit in pairs)
    fp = sum(hit and not label for label, hit in pairs)
    if positives < MIN_PER_CLASS or negatives < MIN_PER_CLASS:
        return Validation(scanner, version, split, None, None, None, positives, negatives, tp, fp, unscanned,
                          f"too few labels: {positives} positives and {negatives} negatives; "
                          f"a figure needs {MIN_PER_CLASS} of each")
    recall = tp / positives
    precision = tp / (tp + fp) if tp + fp else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
    return Validation(scanner, version, split, precision, recall, f1, positives, negatives, tp, fp, unscanned,
                      "" if precision is not None else "no hits")


def validate_results(con, run_ids: list[str], scanner: str, version: str) -> list[Validation]:
    """Stored results of one scanner version against the labels of `run_ids`, per split."""
    labels = queries.review_labels(con, run_ids)
    hits: dict[tuple, bool] = {}
    for run_id in run_ids:
        for row in queries.scan_results(con, run_id, scanner, version).itertuples():
            hits[(run_id, int(row.step), int(row.traj_idx))] = bool(row.hit)
    out = []
    for split in SPLITS:
        pairs, unscanned = [], 0
        for row in labels.itertuples():
            key = (row.run_id, int(row.step), int(row.traj_idx))
            if split_of(*key) != split:
                continue
            if key not in hits:
                unscanned += 1
                continue
            pairs.append((bool(row.label), hits[key]))
        out.append(figures(scanner, version, split, pairs, unscanned))
    return out


def labelled_keys(con, run_id: str) -> list[tuple[int, int]]:
    return [(int(r.step), int(r.traj_idx)) for r in queries.review_labels(con, [run_id]).itertuples()]


def validate_scanner(con, scanner: Scanner, run_ids: list[str], task=None) -> list[Validation]:
    """Scan every labelled trajectory of `run_ids` not yet scanned by this version, then score it."""
    for run_id in run_ids:
        keys = labelled_keys(con, run_id)
        if keys:
            scan_run(con, run_id, scanner, task if task is not None else run_task(con, run_id), keys=keys)
    return validate_results(con, run_ids, scanner.name, scanner.version)


def validate_run(con, run_id: str) -> list[Validation]:
    """Every scanner stored for the run (its latest version) against the run's decisions, and the
    task's own `verify` (scanned on the labelled trajectories when the run has a task)."""
    from agentrl.scan.loader import load_scanner

    task = run_task(con, run_id)
    out = []
    if task is not None:
        out += validate_scanner(con, load_scanner("builtin:verify", task), [run_id], task)
    for row in queries.latest_scanners(con, run_id).itertuples():
        if row.scanner == "verify" and task is not None:
            continue
        out += validate_results(con, [run_id], row.scanner, row.version)
    return out


def task_runs(con, task_spec: str) -> list[str]:
    """Every stored run of the task `task_spec` (absolute spec): where its labels are."""
    from agentrl.review.reviews import run_task_spec

    found = []
    for run_id, kind, config in queries.run_kinds_and_configs(con):
        if run_task_spec({"run_id": run_id, "kind": kind, "config": config}) == task_spec:
            found.append(run_id)
    return found


def held_out(validations: list[Validation]) -> Validation | None:
    return next((v for v in validations if v.split == "held_out"), None)


def as_json(validations: list[Validation]) -> str:
    return json.dumps([v.as_dict() for v in validations], indent=2)
