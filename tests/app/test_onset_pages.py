"""Issue 16 where a person sees it: the Live banner and chart markers at the onset step, the
onset beside each run on Compare, and the Runs column. The runs are the SPEC section 8 preset
pair: the outcome-only run's onset is at step 7 (hack_premium), the guarded run has none."""

from __future__ import annotations

from apptest import app, figure, no_errors


def _ids(runs_dir):
    return {("outcome" if "outcome" in p.name else "guarded"): p.name for p in runs_dir.iterdir() if p.is_dir()}


def _onset_lines(fig: dict) -> list[float]:
    return [shape["x0"] for shape in fig["layout"].get("shapes", []) if shape.get("name") == "onset"]


def test_live_shows_the_onset_banner_and_marks_every_step_chart_at_the_onset_step(trained_runs_dir):
    at = app("pages/2_Live.py", run=_ids(trained_runs_dir)["outcome"]).run()
    no_errors(at)
    (banner,) = [e.value for e in at.warning if "Hacking onset" in e.value]
    assert "step 7" in banner and "hack_premium" in banner and "on_onset: warn" in banner
    at.button_group(key="panels").set_value(["Vetoes", "Updates"]).run()
    for title in ("Success and violation rate", "Mean reward components per step", "Vetoes per step",
                  "Updates and clipped transitions per step"):
        assert _onset_lines(figure(at, title)) == [7], title


def test_live_shows_no_banner_and_no_marker_for_the_guarded_run(trained_runs_dir):
    at = app("pages/2_Live.py", run=_ids(trained_runs_dir)["guarded"]).run()
    no_errors(at)
    assert not [e for e in at.warning if "Hacking onset" in e.value]
    assert _onset_lines(figure(at, "Success and violation rate")) == []


def test_compare_lists_each_runs_onset_and_marks_it_on_the_rate_charts(trained_runs_dir):
    ids = _ids(trained_runs_dir)
    at = app("pages/3_Compare.py", run=[ids["outcome"], ids["guarded"]]).run()
    no_errors(at)
    # In each run's progress line (one line each, so the rate charts stay above the fold).
    progress = [p.proto.text for p in at.get("progress")]
    assert any("hacking onset at step 7" in t and "hack_premium" in t for t in progress)
    assert any(t.endswith("no hacking onset") for t in progress)
    assert _onset_lines(figure(at, "Success rate")) == [7]
    assert _onset_lines(figure(at, "Violation rate")) == [7]


def test_the_runs_table_has_an_onset_column(trained_runs_dir):
    at = app("app.py").run()
    no_errors(at)
    table = at.dataframe[0].value.set_index("name")
    assert table.at["refund-outcome", "onset"] == "step 7 · hack_premium"
    assert table.at["refund-guarded", "onset"] == ""
