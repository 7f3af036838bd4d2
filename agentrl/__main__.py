"""`python -m agentrl ...`: see cli.py."""

import sys

from agentrl.cli import main

sys.exit(main())
