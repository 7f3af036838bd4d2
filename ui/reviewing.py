"""What makes reviewing quick on the Review page: the keyboard (j/k next/previous, a approve,
r reject, f exploit fixture), a trajectory's flags as coloured badges with their reason, the
list's violations as a red mark rather than a grey checkbox, and the neighbours of the open
trajectory.

pages/4_Review.py -> **ui.reviewing** -> agentrl.review. Streamlit has no key bindings: a small
script, installed once in the page's own document, reads keydown and clicks the page's buttons
by their widget keys (Streamlit names each keyed element's container `st-key-<key>`). It does
nothing while a text box has the focus, with a modifier held, or on any other page of the
dashboard (it looks for this page's marker first). A key it acts on goes no further: Streamlit's
own `r` would rerun the page under the reviewer.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from agentrl.review import transcript
from ui.text import plain

MARKER = "review-keys"  # the container whose presence says the Review page is the one shown
NEXT, PREVIOUS = "traj-next", "traj-previous"
# key -> (the widget-key prefix of the button it clicks, whether that decision needs a note)
SHORTCUTS = {"j": (NEXT, False), "k": (PREVIOUS, False), "a": ("decide-approve", False),
             "r": ("decide-reject", True), "f": ("decide-exploit", True)}
HELP = "Keys: **j**/**k** next/previous · **a** approve · **r** reject (type the note, then Ctrl+Enter) · **f** exploit fixture"

# No user text goes into this script: it is a constant.
_SCRIPT = """
<script>
(() => {
  const doc = document;
  if (doc.__agentrlReviewKeys) return;  // once per tab: the page's reruns draw this again
  doc.__agentrlReviewKeys = true;
  const SHORTCUTS = %(shortcuts)s;
  // The element as drawn now: a redraw briefly keeps the old one beside it, hidden or stale.
  const shown = (selector) => [...doc.querySelectorAll(selector)]
    .filter((el) => el.offsetParent !== null && !el.closest('[data-stale="true"]')).pop();
  const find = (prefix) => shown(`[class*="st-key-${prefix}"] button`);
  const note = () => shown('[class*="st-key-note-"] textarea');
  const typing = (el) => el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));
  let pending = null;  // the decision waiting for its note
  // A key pressed while the page redraws waits for the button to be drawn again (up to 3 s).
  const press = (prefix, tries = 30) => {
    const button = find(prefix);
    if (button && !button.disabled) button.click();
    else if (tries > 0) setTimeout(() => press(prefix, tries - 1), 100);
  };
  doc.addEventListener("keydown", (event) => {
    if (!doc.querySelector('[class*="st-key-%(marker)s"]')) return;  // another page of the dashboard
    const box = note();
    if (event.target === box && pending && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      event.stopPropagation();
      const prefix = pending;
      pending = null;
      box.blur();  // commits the note before the click reads it
      setTimeout(() => press(prefix), 150);
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const shortcut = SHORTCUTS[event.key];
    if (!shortcut) return;
    event.preventDefault();
    event.stopPropagation();  // Streamlit's own keys (r reruns the page, c clears its cache) never see it
    const [prefix, needsNote] = shortcut;
    if (needsNote && box && !box.value.trim()) {
      pending = prefix;
      box.focus();
      return;
    }
    pending = null;
    press(prefix);
  }, true);
})();
</script>
"""


def keyboard_shortcuts() -> None:
    """Install the keys (once per tab) and mark this page as the one they act on."""
    import json

    with st.container(key=MARKER):
        st.html(_SCRIPT % {"shortcuts": json.dumps({k: list(v) for k, v in SHORTCUTS.items()}), "marker": MARKER},
                unsafe_allow_javascript=True)
        st.caption(HELP)


def neighbour(keys: list[str], current: str, offset: int) -> str | None:
    """The trajectory `offset` places from `current` in the list (the first listed when `current`
    is not in it, e.g. opened from a link); None past either end."""
    if not keys:
        return None
    if current not in keys:
        return keys[0]
    at = keys.index(current) + offset
    return keys[at] if 0 <= at < len(keys) else None


# Rule breaks a reviewer must see first: the flag, its badge colour and what it means when the
# record carries no reason of its own.
RULE_BREAKS = {"violation": ("red", "the task's verifier flagged a broken rule"),
               "duplicate_effect": ("orange", "an effect was applied twice")}


def flagged(record: dict) -> dict[str, str]:
    """The rule breaks of one trajectory and why: {flag: reason}. The verifier's own reason where
    it recorded one, else the reward's penalty for it, else what the flag means."""
    out = {}
    for name, (_, meaning) in RULE_BREAKS.items():
        if not record.get(name):
            continue
        penalty = (record.get("components") or {}).get(f"{name.removesuffix('_effect')}_penalty")
        reason = record.get("verifier_reason") or meaning
        out[name] = reason + (f" (penalty {penalty:+.2f})" if penalty else "")
    return out


def flag_badges(record: dict) -> str:
    """Markdown: each rule break as a red or orange badge with its reason, then the other flags."""
    breaks = flagged(record)
    loud = [f":{RULE_BREAKS[name][0]}-badge[:material/warning: {name.replace('_', ' ')}: {plain(reason)}]"
            for name, reason in breaks.items()]
    quiet = [f":{'red' if f.bad else 'green'}-badge[{f.name}: {'yes' if f.value else 'no'}]"
             for f in transcript.flags(record) if f.name not in breaks]
    return " ".join(loud + quiet)


def marked_violations(table: pd.DataFrame):
    """The trajectory list with its rule breaks as a red '⚠ yes' (not a grey checkbox); a Styler."""
    shown = table.copy()
    for name in RULE_BREAKS:
        if name in shown.columns:
            shown[name] = shown[name].map(lambda v: "⚠ yes" if bool(v) else "")
    columns = [c for c in RULE_BREAKS if c in shown.columns]
    return shown.style.map(lambda v: "color: #c62828; font-weight: 600" if v else "", subset=columns)
