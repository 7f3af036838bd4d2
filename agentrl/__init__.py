"""agentrl: train tool-using agents with group-relative RL, and record every run in DuckDB.

The library under the dashboard. It never imports Streamlit; the flow is
launch (config, launcher) -> run process (runner, training core) -> chunks -> store -> queries.
"""

__version__ = "0.1.0"
