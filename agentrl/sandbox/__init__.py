"""The sandboxed test runner (SPEC section 10): a throw-away copy of a workspace, the files an
attempt wrote, and the workspace's own test command run there under limits.

Rewards (`agentrl.rewards.tests_reward`) -> **sandbox**. The parts: `runner` (copy, run, verdict),
`paths` (which writes are allowed: protected paths, refused names, the task's allow-list),
`verdict` (which runner a command gets, and the verdict with its reason and detector), `harness`
(the program a Python test command runs through; it writes the result the verdict comes from),
`suite` (`agentrl_suite`, the helper test suites import: the code under test in a child, answer
keys), `boundary` (the solution's modules imported by the tests as proxies to a child that runs
them; only data crosses back: `boundary_wire` the pipe and its values, `boundary_proxies` the
local stand-ins, `boundary_child` the child program), `bubblewrap` (the run's allow-listed view, built by `bwrap`), `isolation` (the fallback: the
launcher's own namespaces and a hide-list), `rundir` (the run's directory),
`users` (one uid per concurrent run when root, clean-up) and `stub` (the launcher program each run
goes through). What the runner promises, and what it does not, is the README's "Guarantees".
"""

from agentrl.sandbox.isolation import namespaces_available
from agentrl.sandbox.paths import refusal_reason
from agentrl.sandbox.runner import SandboxLimits, SandboxResult, default_temp_root, run_tests
from agentrl.sandbox.users import sandbox_processes
from agentrl.sandbox.verdict import DETECTORS

__all__ = ["DETECTORS", "SandboxLimits", "SandboxResult", "default_temp_root", "namespaces_available", "refusal_reason",
           "run_tests", "sandbox_processes"]
