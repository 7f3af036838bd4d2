"""The DuckDB store, written only by the dashboard (or `python -m agentrl ingest`): connect (`db`),
ingest chunks idempotently (`ingest`), every query (`queries`), export (`export`)."""
