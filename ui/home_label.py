"""The home page's name in the sidebar navigation: "Runs", not "app".

Streamlit names the pages of a `pages/` directory app after their files, the main page after its
script, and `app.py` must stay the entry point (`streamlit run app.py`). Without `st.navigation`
it has no option for that label (none in `st.set_page_config`, `[client]` or the pages folder:
streamlit/runtime/scriptrunner/script_runner.py `_mpa_v1` builds the main page from the path
alone), so the first navigation link's text is swapped by a style rule drawn with every page.
"""

from __future__ import annotations

import streamlit as st

HOME_LABEL = "Runs"
_TEXT = "[data-testid='stSidebarNav'] li:first-child [data-testid='stSidebarNavLink'] p"
CSS = (f"<style>{_TEXT} {{ font-size: 0 !important; }}"
       f" {_TEXT}::after {{ content: '{HOME_LABEL}'; font-size: 0.875rem; }}</style>")


def install() -> None:
    st.html(CSS)
