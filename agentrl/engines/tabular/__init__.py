"""The tabular engine (SPEC sections 1, 5, 7, 8): the softmax policy, imitation, group-relative
training, and the run process that records it."""
