"""What the Compare page computes from the query layer's frames: run labels, the step every picked
run has reached, the B − A difference of two action distributions, the held-out evaluation side
by side, the imitation ladder's tables and each run's throughput model.

queries.compare -> **analysis.compare** -> Compare page. Pure functions on DataFrames; nothing
here reads the store or draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from agentrl.analysis.throughput import throughput_curve, transitions_per_second


def run_labels(runs: pd.DataFrame, run_ids: list[str]) -> dict[str, str]:
    """Short names for charts and tables: "name (scorer)", or the run id when two would read the same."""
    by_id = runs.set_index("run_id")
    labels = {run_id: f"{by_id.at[run_id, 'name']} ({by_id.at[run_id, 'scorer']})" for run_id in run_ids}
    if len(set(labels.values())) < len(labels):
        return {run_id: run_id for run_id in run_ids}
    return labels


def common_step(history: pd.DataFrame, run_ids: list[str]) -> int | None:
    """The latest step at which every one of `run_ids` recorded a distribution (columns: run_id,
    step), so the bars and the difference start where all runs have data; None without history."""
    if history.empty:
        return None
    last = history.groupby("run_id")["step"].max()
    present = [r for r in run_ids if r in last.index]
    if not present:
        return None
    return int(last[present].min()) if len(present) == len(run_ids) else int(last[present].max())


@dataclass(frozen=True)
class Difference:
    """B − A per action at one step (columns: action, diff), or why there is none."""

    frame: pd.DataFrame
    missing: str | None = None  # what is missing, for the page to say instead of a blank chart


def action_difference(at_step: pd.DataFrame, a_run: str, b_run: str, labels: dict[str, str], step: int) -> Difference:
    """B − A of two runs' distributions at one step (columns of `at_step`: run_id, action, prob)."""
    a = at_step[at_step["run_id"] == a_run].set_index("action")["prob"]
    b = at_step[at_step["run_id"] == b_run].set_index("action")["prob"]
    empty = pd.DataFrame({"action": pd.Series(dtype=str), "diff": pd.Series(dtype=float)})
    if a_run == b_run:
        return Difference(empty, "Pick two different runs for A and B.")
    lacking = [labels.get(r, r) for r, part in ((a_run, a), (b_run, b)) if part.empty]
    if lacking:
        return Difference(empty, f"{' and '.join(lacking)} recorded no distribution at step {step}.")
    diff = (b - a).dropna().rename("diff").reset_index()
    return Difference(diff)


def held_out_table(held_out: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    """Each run's latest held-out evaluation side by side, one row per task and one short column
    per run ("✓ lookup → refund → finish", a violation marked ⚠), so every run fits on screen.

    Columns of `held_out`: run_id, task_id, actions, success, violation.
    """
    table = pd.DataFrame({"task_id": sorted(held_out["task_id"].unique())}).set_index("task_id")
    for run_id, label in labels.items():
        part = held_out[held_out["run_id"] == run_id].set_index("task_id")
        if part.empty:
            continue
        table[label] = [
            _outcome_cell(part.loc[task]) if task in part.index else "–" for task in table.index
        ]
    return table.reset_index()


def _outcome_cell(row) -> str:
    mark = ("✓" if row["success"] else "✗") + (" ⚠ violation" if row["violation"] else "")
    return f"{mark} · {' → '.join(row['actions'])}"


def held_out_summary(held_out: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    """One row per run: tasks, successes and violations of its latest held-out evaluation."""
    rows = []
    for run_id, label in labels.items():
        part = held_out[held_out["run_id"] == run_id]
        if not part.empty:
            rows.append({"run": label, "tasks": len(part), "succeed": int(part["success"].sum()),
                         "violate": int(part["violation"].sum())})
    return pd.DataFrame(rows, columns=["run", "tasks", "succeed", "violate"])


@dataclass(frozen=True)
class LadderStage:
    stage: str
    succeeded: int
    evaluated: int
    policy: pd.DataFrame  # state x action probabilities, rounded


def ladder_stages(ladder: pd.DataFrame, evals: pd.DataFrame) -> list[LadderStage]:
    """The imitation ladder's stages (cloned, then a DAgger round), each its policy table and its
    held-out score. Columns: ladder (stage, state, action, prob), evals (stage, success)."""
    stages = []
    for stage in ladder["stage"].unique():
        table = ladder[ladder["stage"] == stage].pivot_table(index="state", columns="action", values="prob")
        stage_evals = evals[evals["stage"] == stage]
        stages.append(LadderStage(str(stage), int(stage_evals["success"].sum()), len(stage_evals),
                                  table.round(3).reset_index()))
    return stages


def throughput_curves(totals: pd.DataFrame) -> dict[str, list[tuple[float, float]]]:
    """SPEC section 9's modelled throughput from each run's own totals (runs without transitions left out)."""
    return {r.run_id: throughput_curve(int(r.transitions), int(r.updates)) for r in totals.itertuples() if r.transitions}


def fleet_speedup(workers: pd.DataFrame, rates: pd.DataFrame, totals: pd.DataFrame) -> pd.DataFrame:
    """The environment fleet's measured speedup beside SPEC section 9's model, one row per run
    that recorded both `workers` and `transitions_per_s` (step metrics): its worker count, its
    median transitions/s over the steps, the speedup over the picked run with the fewest workers,
    and the model's speedup for the same N with that run's own totals. Compare like with like:
    the runs should share a task and an environment latency."""
    columns = ["run_id", "workers", "transitions_per_s", "speedup", "modelled"]
    if workers.empty or rates.empty:
        return pd.DataFrame(columns=columns)
    n = workers.groupby("run_id")["value"].max().rename("workers")
    rate = rates[rates["value"] > 0].groupby("run_id")["value"].median().rename("transitions_per_s")
    frame = pd.concat([n, rate], axis=1, join="inner").reset_index().sort_values(["workers", "run_id"])
    if frame.empty:
        return pd.DataFrame(columns=columns)
    base = frame.iloc[0]
    frame["speedup"] = frame["transitions_per_s"] / base["transitions_per_s"]
    by_run = totals.set_index("run_id") if not totals.empty else None

    def modelled(row) -> float:
        transitions = int(by_run.at[row.run_id, "transitions"]) if by_run is not None and row.run_id in by_run.index else 0
        updates = int(by_run.at[row.run_id, "updates"]) if by_run is not None and row.run_id in by_run.index else 0
        if not transitions:
            return float("nan")
        return transitions_per_second(transitions, updates, row.workers) / transitions_per_second(transitions, updates, base["workers"])

    frame["modelled"] = [modelled(row) for row in frame.itertuples()]
    return frame[columns].reset_index(drop=True)
