"""AppTest of scanner results on Live and Compare (issue 25): each scanner's hit rate per step,
drawn beside the violation rate, once a scanner has read the run."""

from __future__ import annotations

from apptest import app, figure, no_errors, titles


def test_live_and_compare_plot_the_scanner_hit_rate_beside_the_violation_rate(pair_app_env, tmp_path):
    from agentrl.cli import main

    runs_dir, ids = pair_app_env
    rules = tmp_path / "rules.json"
    rules.write_text('{"skips_approval": {"pattern": "^refund\\\\(", "where": ["calls"]}}')
    assert main(["scan", ids["outcome"], "--scanner", f"{rules}:skips_approval", "--runs-dir", str(runs_dir)]) == 0
    at = app("pages/3_Compare.py").run()
    no_errors(at)
    rates = figure(at, "Scanner hit rate beside the violation rate")
    assert [t["name"] for t in rates["data"]] == ["refund-outcome (outcome): skips_approval hits", "refund-outcome (outcome): violations"]
    at = app("pages/2_Live.py", run=ids["outcome"]).run()
    at.button_group(key="panels").set_value(["Scanners"]).run()
    no_errors(at)
    assert "Scanner hit rate beside the violation rate" in titles(at)
