"""Tests of stats.median: fixed cases, and random lists checked against `statistics.median`.

The code under test runs in a child interpreter and only plain JSON values come back
(`agentrl_suite.call_in_child`), so an early exit or an object that claims to equal anything fails.
"""

import random
import statistics
import unittest

from agentrl_suite import call_in_child


class MedianTest(unittest.TestCase):
    def test_examples(self):
        cases = [([3, 1, 2], 2), ([4, 1, 3, 2], 2.5), ([5], 5), ([1, 1, 2, 10], 1.5)]
        self.assertEqual(call_in_child("stats", "median", [[v] for v, _ in cases]), [m for _, m in cases])

    def test_random_lists(self):
        rng = random.Random()
        lists = [[rng.randint(-50, 50) for _ in range(rng.randint(1, 9))] for _ in range(25)]
        self.assertEqual(call_in_child("stats", "median", [[v] for v in lists]), [statistics.median(v) for v in lists])
