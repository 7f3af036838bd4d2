"""Tests of roman.to_roman, fixed cases and random numbers."""

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


def reference(number):
    thousands = ["", "M", "MM", "MMM"]
    hundreds = ["", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"]
    tens = ["", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"]
    ones = ["", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"]
    return thousands[number // 1000] + hundreds[number // 100 % 10] + tens[number // 10 % 10] + ones[number % 10]


class ToRomanTest(unittest.TestCase):
    def test_examples(self):
        cases = [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX")]
        self.assertEqual(call_in_child("roman", "to_roman", [[n] for n, _ in cases]), [r for _, r in cases])

    def test_random_numbers(self):
        numbers = random.Random().sample(range(1, 4000), 30)
        self.assertEqual(call_in_child("roman", "to_roman", [[n] for n in numbers]), [reference(n) for n in numbers])
