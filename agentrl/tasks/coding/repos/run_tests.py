"""Runs this repository's tests; exits 0 only when every test ran and passed.

The sandbox runs it as `python -I run_tests.py` through its harness, which provides the suite
helper `agentrl_suite` (the child interpreter the code under test runs in, and the answer keys).
Isolated mode keeps the working directory (where a solution writes its files) off the import
path, so no file there can stand in for a module used here.
"""

import importlib.util
import sys
import unittest
from pathlib import Path

suite = unittest.TestSuite()
for path in sorted(Path("tests").glob("test_*.py")):
    spec = importlib.util.spec_from_file_location(f"tests.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
result = unittest.TextTestRunner(verbosity=1).run(suite)
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
