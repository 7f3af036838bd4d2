"""Scanners: rules a reviewer writes over recorded trajectories, scored against review decisions and
enforced by the next guarded run.

- `trajectory`: one trajectory as a scanner reads it (items: messages, calls, outputs);
- `scanner`: `Scanner`, `ScanResult`, regex and code scanners, versions;
- `loader`: `PATH:NAME`, `module:NAME`, `file.json:NAME`, `builtin:NAME`;
- `builtin`: reward dominance, reward spikes, repeated calls, schema-breaking arguments, `verify`;
- `results`: a scanner over a stored run, its results in the `scan_results` table;
- `validate`: precision, recall and F1 against reviewers' decisions, on a held-out split;
- `enforce`: a guarded run's scanners, flagged and vetoed like a fixture.
"""

from agentrl.scan.loader import load_scanner  # noqa: F401
from agentrl.scan.scanner import ScanError, Scanner, ScanResult, code_scanner, regex_scanner  # noqa: F401
from agentrl.scan.trajectory import Item, Trajectory  # noqa: F401
