"""plotly.js fetched and compiled while a page's script still runs: Streamlit loads it (4.7 MB) only
when a tab first draws a plotly chart, and a page's charts come last, so a fresh tab spent a second
or more after its script ended before any chart drew. An empty chart, hidden, drawn first thing
makes the browser start on it at once.

pages -> **ui.preload** -> agentrl.charts. Call it right after the page's title.
"""

from __future__ import annotations

import streamlit as st

from agentrl import charts

KEY = "plotly-preload"


def plotly() -> None:
    """An empty plotly chart that takes no room (hidden with its container)."""
    with st.container(key=KEY):
        st.html(f"<style>.st-key-{KEY} {{ display: none; }}</style>")
        st.plotly_chart(charts.empty(), key=f"{KEY}-chart")
