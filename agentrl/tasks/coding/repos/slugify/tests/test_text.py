"""Tests of text.slugify: fixed cases, and random titles checked against the task's answer key.

The code under test runs in a child interpreter and only plain JSON values come back
(`agentrl_suite.call_in_child`); the reference implementation is an answer key the sandbox hands
to this process alone (`agentrl_suite.answer_key`), never a file of the workspace.
"""

import random
import unittest

from agentrl_suite import answer_key, call_in_child


class SlugifyTest(unittest.TestCase):
    def test_examples(self):
        cases = [("Hello World", "hello-world"), ("  Many   spaces  ", "many-spaces"),
                 ("Rock & Roll!", "rock-roll"), ("already-a-slug", "already-a-slug")]
        self.assertEqual(call_in_child("text", "slugify", [[t] for t, _ in cases]), [s for _, s in cases])

    def test_random_titles(self):
        reference = answer_key("reference").slugify
        rng = random.Random()
        words = ["alpha", "Beta", "GAMMA", "d3lta", "e", "Zeta99"]
        titles = [rng.choice([" ", "  ", " - ", ", ", "! "]).join(rng.choices(words, k=rng.randint(1, 5)))
                  + rng.choice(["", " ", "?", "..."]) for _ in range(25)]
        self.assertEqual(call_in_child("text", "slugify", [[t] for t in titles]), [reference(t) for t in titles])
