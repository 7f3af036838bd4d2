"""What the Live page says about a run besides its curves: phase, progress text, panels."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from agentrl.analysis import live

NOW = datetime(2026, 1, 1, 12, 0, 0)


def test_a_run_before_its_first_step_is_starting_with_the_time_since_launch_and_its_last_output():
    run = {"status": "running", "kind": "trl", "started_at": NOW - timedelta(seconds=41), "created_at": NOW}
    progress = {"status": "running", "done": 0, "total": 60, "elapsed_s": 0.0, "eta_s": None}
    phase = live.phase(run, progress, "importing torch", now=NOW)
    assert phase.name == "starting"
    assert phase.text == ("Starting: loading the engine and the model before step 1 · 0:41 since launch · "
                          "last output: importing torch")
    assert live.progress_text(progress, phase) == "Step 0 of 60 · starting"


def test_queued_training_and_ended_phases():
    progress = {"status": "queued", "done": 0, "total": 30, "elapsed_s": 0.0, "eta_s": None}
    assert live.phase({"status": "queued", "created_at": NOW}, progress, now=NOW).name == "queued"
    training = dict(progress, status="running", done=3, elapsed_s=3.0, eta_s=27.0)
    phase = live.phase({"status": "running"}, training, now=NOW)
    assert phase.name == "training"
    assert live.progress_text(training, phase) == "Step 3 of 30 · running · elapsed 0:03 · ETA 0:27"
    assert live.phase({"status": "succeeded"}, dict(progress, status="succeeded"), now=NOW).name == "succeeded"
    assert live.is_active("running") and not live.is_active("failed") and not live.is_active(None)


def test_panels_that_do_not_apply_are_named():
    steps = pd.DataFrame({"clipped": [0, 0]})
    coding = live.panels("coding", steps, [])
    assert (coding.action_distribution, coding.updates, coding.clipped) == (False, False, False)
    tabular = live.panels("tabular", pd.DataFrame({"clipped": [0, 3]}), ["known_high"])
    assert (tabular.vetoes, tabular.action_distribution, tabular.updates, tabular.clipped) == (True, True, True, True)


def test_clock_and_last_rates():
    assert live.clock(3725) == "1:02:05" and live.clock(61) == "1:01" and live.clock(None) == "–"
    assert live.last_rates(pd.DataFrame({"success_rate": [0.5, 1.0], "violation_rate": [0.5, 0.25]})) == {
        "success": "100%", "violation": "25%"}
    assert live.preferred_metrics(["loss", "kl", "entropy"]) == ["entropy", "kl"]
