"""The coding engine: the scripted coding attempts scored by the sandboxed test runner, recorded as a run."""
