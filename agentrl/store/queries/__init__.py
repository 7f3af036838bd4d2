"""Every query the dashboard and the CLI make, each a named function with one parameterised
statement (values are bound with `?`, never formatted into SQL).

Store -> **queries** -> analysis / review -> page. A page asks one of these for a DataFrame and
draws it. Each takes a DuckDB connection or cursor (the dashboard passes a cursor per thread).
The functions live in one module per concept and are all importable from here
(`from agentrl.store import queries; queries.list_runs(con)`):

- `runs`: the run list, one run's record, progress and totals, default picks;
- `curves`: one run's per-step curves and evaluations (Live);
- `compare`: several runs at once (Compare);
- `thinning`: a per-step series thinned in SQL to the very rows the pages' `downsample` keeps (for `compare`);
- `review`: trajectories, the gate's sample, reviews, fixtures, promotions (Review, gate, CLI);
- `hardware`: memory and CPU samples and budgets (Hardware);
- `annotations`: run colours, tags, notes and the archived flag (every page);
- `monitor`: what the onset monitor's signals read (trajectories' flags, distributions, probes, events);
- `behaviours`: behaviour shares per step, the last steps by behaviour, reviews by behaviour, next-action counts;
- `scans`: scanner results, the rows scanners read, review labels, hit rates per step;
- `ledger`: the ingest ledger and the per-step aggregates ingest keeps (ingest, compaction, migrations).
"""

import importlib

from agentrl.store.db import Con  # noqa: F401

# The submodules load on the first name asked of the package, not at import: ingest, `train`
# and `check` import `queries.ledger` alone and so start without pandas (about 0.3 s a command).
SUBMODULES = ("annotations", "behaviours", "compare", "curves", "hardware", "ledger", "monitor", "review", "runs", "scans")


def _load_all() -> None:
    for name in SUBMODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        public = getattr(module, "__all__", None) or [key for key in vars(module) if not key.startswith("_")]
        for key in public:
            globals().setdefault(key, getattr(module, key))
    globals().setdefault("FLAG_COLUMNS", importlib.import_module(f"{__name__}.review").FLAG_COLUMNS)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    _load_all()
    try:
        return globals()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    _load_all()
    return sorted(globals())
