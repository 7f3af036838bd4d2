"""Tasks: what an agent is trained to do. `refund/` (the SPEC gym, its tools, rewards and tiny model) and
`coding/` (repositories whose test suites are the reward) are the built-in tasks."""
