"""The script engine: a user's own command (an argument list) run as a run, writing through `agentrl.init`."""
