"""Every query the dashboard and the CLI make, each a named function with one parameterised
statement (values are bound with `?`, never formatted into SQL).

Store -> **queries** -> analysis / review -> page. A page asks one of these for a DataFrame and
draws it. Each takes a DuckDB connection or cursor (the dashboard passes a cursor per thread).
The functions live in one module per concept and are all importable from here
(`from agentrl.store import queries; queries.list_runs(con)`):

- `runs`: the run list, one run's record, progress and totals, default picks;
- `curves`: one run's per-step curves and evaluations (Live);
- `compare`: several runs at once (Compare);
- `review`: trajectories, the gate's sample, reviews, fixtures, promotions (Review, gate, CLI);
- `hardware`: memory and CPU samples and budgets (Hardware);
- `annotations`: run colours, tags, notes and the archived flag (every page);
- `monitor`: what the onset monitor's signals read (trajectories' flags, distributions, probes, events);
- `ledger`: the ingest ledger and the per-step aggregates ingest keeps (ingest, compaction, migrations).
"""

from agentrl.store.db import Con
from agentrl.store.queries.annotations import *  # noqa: F401,F403
from agentrl.store.queries.compare import *  # noqa: F401,F403
from agentrl.store.queries.curves import *  # noqa: F401,F403
from agentrl.store.queries.hardware import *  # noqa: F401,F403
from agentrl.store.queries.ledger import *  # noqa: F401,F403
from agentrl.store.queries.monitor import *  # noqa: F401,F403
from agentrl.store.queries.review import *  # noqa: F401,F403
from agentrl.store.queries.review import FLAG_COLUMNS  # noqa: F401
from agentrl.store.queries.runs import *  # noqa: F401,F403
