"""`python -m agentrl bench`: the store's scale figures measured on this machine, each next to its
target, and written to docs/benchmarks.md with the machine they ran on.

CLI -> **bench** (report: what runs and the file it writes; scale: the measurements; synth:
the synthetic runs) -> record, store. Nothing here is imported by the dashboard or a run: it
loads only when the command runs. The quick benchmark scripts of `benchmarks/` (ingest_rate,
write_path, fleet) run as they are, in subprocesses, when the checkout has them.
"""
