"""What the Live page says about one run besides its curves: the phase it is in (a language-model
run spends its first minute importing and loading before step 1), the headline figures, which
panels apply to it, and a version of its data that changes only when something new arrived.

queries.runs / queries.curves -> **analysis.live** -> Live and Compare pages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from agentrl.engines.registry import UnknownEngineError, get_engine
from agentrl.record.rundir import TERMINAL_STATUSES, utc_now

# TRL logs dozens of metrics; these say whether learning is healthy, so they are shown first.
PREFERRED_METRICS = ("reward_std", "entropy", "kl", "tools/call_frequency", "measured_parallelism")


def is_active(status: str | None) -> bool:
    """A run that may still report: the pages that show it keep refreshing."""
    return status is not None and status not in TERMINAL_STATUSES


@dataclass(frozen=True)
class Phase:
    name: str  # 'queued', 'starting', 'training', or the terminal status
    text: str  # one line for the page, e.g. "Starting: loading the model · 0:41 since launch"


def _since(ts, now: datetime) -> float | None:
    if ts is None or pd.isna(ts):
        return None
    return max(0.0, (now - pd.Timestamp(ts).to_pydatetime()).total_seconds())


def clock(seconds: float | None) -> str:
    """Seconds as h:mm:ss or m:ss; '–' when unknown."""
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def phase(run: dict, progress: dict, last_log_line: str | None = None, now: datetime | None = None) -> Phase:
    """Where the run is. Before its first step a run is 'starting' (a language-model run imports
    torch and TRL and loads its model, which takes tens of seconds on a small machine); the line
    says so with the time since launch and the run's own last output, instead of "step 0, 0:00"."""
    now = now or utc_now()
    status = progress.get("status") or run.get("status")
    if status in TERMINAL_STATUSES:
        return Phase(status, status)
    if progress.get("done"):
        return Phase("training", "training")
    waited = clock(_since(run.get("started_at") or run.get("created_at"), now))
    detail = f" · last output: {last_log_line.strip()[:160]}" if last_log_line and last_log_line.strip() else ""
    if status == "queued" and not run.get("started_at"):
        return Phase("queued", f"Queued: waiting for the run process to start · {waited} since launch{detail}")
    return Phase("starting", f"Starting: loading the engine and the model before step 1 · {waited} since launch{detail}")


def progress_text(progress: dict, run_phase: Phase) -> str:
    """The progress bar's text: "Step 12 of 60 · running · elapsed 0:31 · ETA 1:05"."""
    if run_phase.name in ("queued", "starting"):
        return f"Step 0 of {progress['total']} · {run_phase.name}"
    eta = "" if progress.get("eta_s") is None else f" · ETA {clock(progress['eta_s'])}"
    return f"Step {progress['done']} of {progress['total']} · {progress['status']} · elapsed {clock(progress['elapsed_s'])}{eta}"


def last_rates(steps: pd.DataFrame) -> dict[str, str]:
    """The last step's success and violation rates as percentages ('–' before the first step)."""
    if steps.empty:
        return {"success": "–", "violation": "–"}
    last = steps.iloc[-1]
    return {name: "–" if pd.isna(last[f"{name}_rate"]) else f"{last[f'{name}_rate']:.0%}" for name in ("success", "violation")}


def preferred_metrics(names: list[str], limit: int = 3) -> list[str]:
    chosen = [n for n in PREFERRED_METRICS if n in names]
    return chosen or list(names[:limit])


@dataclass(frozen=True)
class Panels:
    """Which of the Live page's panels apply to a run (a panel that does not is not drawn empty)."""

    vetoes: bool  # the engine can veto (it has a guarded scorer)
    action_distribution: bool  # the run recorded distributions at sensitive states
    updates: bool  # the engine applies updates (a scoring-only run does not)
    clipped: bool  # the run clipped at least one transition


def panels(kind: str | None, steps: pd.DataFrame, states: list[str]) -> Panels:
    try:
        engine = get_engine(kind)
        vetoes, trains = "guarded" in engine.scorers, engine.policy is not None
    except UnknownEngineError:
        vetoes, trains = True, True
    clipped = bool(not steps.empty and steps["clipped"].fillna(0).gt(0).any())
    return Panels(vetoes=vetoes, action_distribution=bool(states), updates=trains, clipped=clipped)


def onset_banner(onset, run: dict) -> str:
    """The Live banner at a hacking onset: what crossed, where, and what the run does about it."""
    try:
        on_onset = json.loads(run.get("config") or "{}").get("on_onset", "warn")
    except ValueError:
        on_onset = "warn"
    action = ("The run stops here (on_onset: stop)." if on_onset == "stop"
              else "The run goes on (on_onset: warn); review its top trajectories before promoting it.")
    return (f"**Hacking onset at step {onset.step}**: {onset.signal} = {onset.value:.3g}, above {onset.threshold:g} "
            f"for {onset.k} readings. Its success curve may look fine while it learns to game the reward. {action}")
