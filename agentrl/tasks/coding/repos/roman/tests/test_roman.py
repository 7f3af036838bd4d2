"""Tests of roman.to_roman: fixed cases, and random numbers checked against the task's answer key.

The code under test runs in a child interpreter and only plain JSON values come back
(`agentrl_suite.call_in_child`); the reference implementation is an answer key the sandbox hands
to this process alone (`agentrl_suite.answer_key`), never a file of the workspace.
"""

import random
import unittest

from agentrl_suite import answer_key, call_in_child


class ToRomanTest(unittest.TestCase):
    def test_examples(self):
        cases = [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX")]
        self.assertEqual(call_in_child("roman", "to_roman", [[n] for n, _ in cases]), [r for _, r in cases])

    def test_random_numbers(self):
        reference = answer_key("reference").to_roman
        numbers = random.Random().sample(range(1, 4000), 30)
        self.assertEqual(call_in_child("roman", "to_roman", [[n] for n in numbers]), [reference(n) for n in numbers])
