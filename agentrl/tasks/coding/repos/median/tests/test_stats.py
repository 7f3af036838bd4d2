"""Tests of stats.median, fixed cases and random lists."""

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
import statistics


class MedianTest(unittest.TestCase):
    def test_examples(self):
        cases = [([3, 1, 2], 2), ([4, 1, 3, 2], 2.5), ([5], 5), ([1, 1, 2, 10], 1.5)]
        self.assertEqual(call_in_child("stats", "median", [[v] for v, _ in cases]), [m for _, m in cases])

    def test_random_lists(self):
        rng = random.Random()
        lists = [[rng.randint(-50, 50) for _ in range(rng.randint(1, 9))] for _ in range(25)]
        self.assertEqual(call_in_child("stats", "median", [[v] for v in lists]), [statistics.median(v) for v in lists])
