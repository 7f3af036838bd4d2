"""Engines: what runs in a run process. `registry` says what each engine is (config, entry point,
preflight, cost, policy support); `tabular/`, `trl/` and `coding/` are the engines."""
