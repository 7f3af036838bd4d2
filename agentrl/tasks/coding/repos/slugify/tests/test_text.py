"""Tests of text.slugify, fixed cases and random titles."""

import json
import random
import subprocess
import sys
import unittest


def call_in_child(module, function, calls):
    """`module.function(*args)` for each args in `calls`, evaluated in a fresh interpreter.

    The code under test never runs in this process, so whatever it does there (print a forged
    report, exit early, patch the standard library) cannot touch the assertions made here.
    """
    program = (
        "import json, sys\n"
        "calls = json.loads(sys.stdin.read())\n"
        "sys.path.insert(0, '.')\n"
        f"from {module} import {function}\n"
        f"print(json.dumps([{function}(*args) for args in calls]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program],
        input=json.dumps(calls), capture_output=True, text=True, timeout=20,
    )
    if done.returncode != 0:
        raise AssertionError(f"the code under test failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])
import re


def reference(title):
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))


class SlugifyTest(unittest.TestCase):
    def test_examples(self):
        cases = [("Hello World", "hello-world"), ("  Many   spaces  ", "many-spaces"),
                 ("Rock & Roll!", "rock-roll"), ("already-a-slug", "already-a-slug")]
        self.assertEqual(call_in_child("text", "slugify", [[t] for t, _ in cases]), [s for _, s in cases])

    def test_random_titles(self):
        rng = random.Random()
        words = ["alpha", "Beta", "GAMMA", "d3lta", "e", "Zeta99"]
        titles = [rng.choice([" ", "  ", " - ", ", ", "! "]).join(rng.choices(words, k=rng.randint(1, 5)))
                  + rng.choice(["", " ", "?", "..."]) for _ in range(25)]
        self.assertEqual(call_in_child("text", "slugify", [[t] for t in titles]), [reference(t) for t in titles])
