"""The sandboxed test runner (SPEC section 10): a throw-away copy of a workspace, the files an
attempt wrote, and the workspace's own test command run there under limits.

Rewards (`agentrl.rewards.tests_reward`) -> **sandbox**. The parts: `runner` (copy, run, verdict),
`paths` (which writes are allowed), `users` (one uid per concurrent run when root, clean-up) and
`stub` (the launcher program each run goes through). The limits bound accidents; they are NOT a
security boundary (README, "The test sandbox").
"""

from agentrl.sandbox.paths import refusal_reason
from agentrl.sandbox.runner import SandboxLimits, SandboxResult, default_temp_root, run_tests
from agentrl.sandbox.users import sandbox_processes

__all__ = ["SandboxLimits", "SandboxResult", "default_temp_root", "refusal_reason", "run_tests", "sandbox_processes"]
