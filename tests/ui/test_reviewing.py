"""Review's quick path: neighbours of the open trajectory, rule breaks with their reason, and the
list's violations as a red mark (the keys themselves are driven in Chromium by
tests/app/test_browser_review.py)."""

from __future__ import annotations

import pandas as pd

from ui import reviewing


def test_next_and_previous_stop_at_the_ends_and_a_linked_trajectory_starts_at_the_first():
    keys = ["30/0", "30/1", "29/4"]
    assert reviewing.neighbour(keys, "30/1", 1) == "29/4" and reviewing.neighbour(keys, "30/1", -1) == "30/0"
    assert reviewing.neighbour(keys, "29/4", 1) is None and reviewing.neighbour(keys, "30/0", -1) is None
    assert reviewing.neighbour(keys, "2/5", 1) == "30/0"  # opened from a link, outside the list
    assert reviewing.neighbour([], "2/5", 1) is None


def test_a_rule_break_is_a_red_badge_with_its_reason_before_the_other_flags():
    record = {"violation": True, "duplicate_effect": False, "success": True,
              "components": {"outcome": 1.0, "violation_penalty": -1.0}, "verifier_reason": None}
    assert reviewing.flagged(record) == {"violation": "the task's verifier flagged a broken rule (penalty -1.00)"}
    badges = reviewing.flag_badges(record)
    assert badges.startswith(":red-badge[:material/warning: violation: the task's verifier flagged a broken rule")
    assert ":green-badge[success: yes]" in badges and "violation: yes" not in badges
    said = {**record, "verifier_reason": "refunded [80](http://x) without approval"}
    assert "\\[80\\]" in reviewing.flag_badges(said)  # the verifier's words shown as written, never as a link
    assert reviewing.flagged({"violation": False, "duplicate_effect": False}) == {}


def test_the_list_marks_violations_in_words_not_a_grey_checkbox():
    shown = reviewing.marked_violations(pd.DataFrame({"step": [1, 2], "violation": [True, False]}))
    assert shown.data["violation"].tolist() == ["⚠ yes", ""]
    assert "color: #c62828" in shown.to_html()
