"""Helpers of the AppTest page tests: open a page as a browser does, read its figures and tables."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def app(path: str, **query) -> AppTest:
    """The app opened at `path` (from the entrypoint, as a browser does, so page links resolve),
    with the URL's query parameters `query` (a list value repeats the parameter)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    if path != "app.py":
        at.switch_page(path)
    for name, value in query.items():
        at.query_params[name] = value
    return at


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def no_failures(at: AppTest) -> None:
    """No exception and no section that could not be drawn (a failing gate is an expected error box)."""
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error if e.value.startswith("Could not")]


def _array(value) -> list:
    """A plotly JSON array: a list, or typed binary ({'dtype', 'bdata'}) as plotly writes numpy data."""
    import numpy as np

    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return list(value or [])


def figures(at: AppTest) -> list[dict]:
    """Every plotly figure on the page: its title, layout, and each trace's name, x, y and colour."""
    found = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        found.append({
            "title": spec["layout"].get("title", {}).get("text", ""),
            "layout": spec["layout"],
            "data": [{"name": t.get("name"), "x": _array(t.get("x")), "y": _array(t.get("y")),
                      "color": (t.get("line") or {}).get("color") or (t.get("marker") or {}).get("color"),
                      "showlegend": t.get("showlegend", True)} for t in spec["data"]],
        })
    return found


def titles(at: AppTest) -> list[str]:
    return [f["title"] for f in figures(at)]


def figure(at: AppTest, prefix: str) -> dict:
    (found,) = [f for f in figures(at) if f["title"].startswith(prefix)]
    return found


def table_with(at: AppTest, *columns: str):
    """The one table on the page that has all of `columns`."""
    (found,) = [d.value for d in at.dataframe if set(columns) <= set(d.value.columns)]
    return found


def store(runs_dir):
    """A read connection on the store the app holds: the app's own cached connection."""
    import ui

    return ui._services(str(Path(runs_dir).resolve())).con.cursor()


def view(at: AppTest, name: str) -> AppTest:
    """Pick a view of the Compare page's view selector."""
    (selector,) = [b for b in at.get("button_group") if b.label == "View"]
    selector.set_value(name)
    return at.run()
