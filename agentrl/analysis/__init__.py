"""Computations the pages show that are not queries: the throughput model of SPEC section 9 and
what the Compare and Review pages derive from query results."""
