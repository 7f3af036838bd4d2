"""The refund task (SPEC sections 2-6): the gym, its tasksets, trajectories and scorers, the same gym as
chat tools for a language model, its rewards in TRL's shape, and the tiny offline model warm-started on it."""
