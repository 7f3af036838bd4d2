"""Charts that refresh without a blank frame: each chart panel is two stacked slots, and a figure
with new data goes into the slot holding the older one, on top of the figure shown now.

Streamlit names a plotly chart by its figure, so a chart with new data is a new element: the
browser mounts it and draws it from nothing, and for 100-200 ms (longer on a busy machine) the panel
was blank. Here the figure shown until then stays drawn underneath until the new one has drawn over
it (plotly paints an opaque background), and is hidden a moment later. Which slot is on top follows from the slots' generations
(counted modulo 3, so the newer of two is always the one after the other): a slot that keeps its
figure keeps its key and its chart, untouched. The panel has the figure's fixed height from the
first draw, so nothing below it moves.

pages -> **ui.buffered** -> agentrl.charts. `install()` once per page, before the first chart.
"""

from __future__ import annotations

import streamlit as st

from agentrl import charts

HIDE_AFTER_S = 1.5  # a chart draws in well under this on a busy machine; charts refresh every 3 s
_STACK = "[class*='st-key-buffered-']"
_SLOT = "[class*='st-key-slot-g{}-']"
CSS = (
    f"<style>{_STACK} {{ display: grid !important; grid-template-columns: minmax(0, 1fr); }}"
    f" {_STACK} > div {{ grid-area: 1 / 1; min-width: 0; width: 100%; }}"
    # The newer of two slots on top: generation g+1 (mod 3) over g.
    + ", ".join(f"{_STACK}:has({_SLOT.format(g)}):has({_SLOT.format((g + 1) % 3)}) {_SLOT.format((g + 1) % 3)}"
                for g in range(3))
    + " { z-index: 1; } "
    # ... and the older one hidden a moment later, once the newer has drawn over it (a page shows each
    # chart once). By time, not by the newer slot's drawn chart: Streamlit keeps a hidden copy of a
    # replaced chart in the new slot for a while, already drawn.
    + ", ".join(f"{_STACK}:has({_SLOT.format((g + 1) % 3)}) {_SLOT.format(g)}" for g in range(3))
    + f" {{ animation: buffered-hide 0s linear {HIDE_AFTER_S}s forwards; }}"
    + " @keyframes buffered-hide { to { visibility: hidden; } }</style>"
)


def install() -> None:
    """The stacking rules (once per page, outside any refreshing fragment)."""
    st.html(CSS)


def chart(figure, key: str, where=None) -> None:
    """Draw `figure` in the panel `key` (unique on the page) without a blank frame in between."""
    fingerprint = charts.fingerprint(figure)
    slots = st.session_state.setdefault("_buffered", {}).setdefault(key, [None, None])  # (fingerprint, generation, figure)
    if not any(slot and slot[0] == fingerprint for slot in slots):
        generations = [slot[1] if slot else -1 for slot in slots]
        older = generations.index(min(generations))
        slots[older] = (fingerprint, max(generations) + 1, figure)
    with (where or st).container(key=f"buffered-{key}"):
        for index, slot in enumerate(slots):
            if slot is not None:
                with st.container(key=f"slot-g{slot[1] % 3}-{key}-{index}-{slot[0]:08x}"):
                    st.plotly_chart(slot[2], key=f"{key}-{index}")


def forget(key: str) -> None:
    """Drop a panel's slots (its figures are no longer wanted, e.g. another run was picked)."""
    st.session_state.get("_buffered", {}).pop(key, None)
