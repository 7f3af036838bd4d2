"""The record of a run, written by the run process: typed rows (`rows`), the chunk protocol
(`chunks`), the run folder (`rundir`), hardware samples (`hardware`) and the one writer (`run`).
Nothing here opens the database or imports Streamlit."""
