"""What a run's behaviours say: each behaviour's share, reward, flags and reviews over the last K
steps, which are high-reward, which are **unverified**, and where two runs' next actions differ most.

queries.behaviours -> **analysis.behaviours** -> Live and Compare (Behaviours view), Review, the
gate's coverage check, `agentrl behaviours` and `agentrl diff`.

Definitions (the same on every page, in the CLI and in the gate):

- **window**: the run's last K steps that have trajectories (steps > last step - K).
- **top-reward quarter**: the window's trajectories whose reward is at or above the 75th
  percentile of the window's rewards (`quantile_disc`; ties at the cut are all in, so on a run
  whose rewards tie it may hold more than a quarter).
- **high-reward**: a behaviour holding at least `min_share` (5%) of the top-reward quarter.
- **reviewed**: a trajectory of the behaviour in this run has an approve or a reject (its latest verdict).
- **unverified**: high-reward, never flagged by the verifier in the whole run, and not reviewed:
  what the product calls "possibly a hack nobody wrote a rule for".
- **found divergence** (`divergent_states`): at each state both runs visit (a recorded gym state,
  or the calls so far), the Jensen-Shannon divergence in bits of the two next-action
  distributions, weighted by min(visits_a / trajectories_a, visits_b / trajectories_b): a state
  one run hardly reaches cannot rank high, however different its actions there.
"""

from __future__ import annotations

import math

import pandas as pd

from agentrl.record.behaviour import default_behaviour
from agentrl.store import queries

DEFAULT_LAST = 5  # K: steps in the window
MIN_TOP_SHARE = 0.05  # a behaviour holding this much of the top-reward quarter is high-reward
TOP_QUANTILE = 0.75

COLUMNS = ["behaviour", "first_step", "share", "mean_reward", "flagged_share", "held_out_success", "top_share",
           "high_reward", "reviewed", "approved", "rejected", "taught", "flagged_ever", "n", "unverified"]


def behaviour_table(con, run_id: str, last: int = DEFAULT_LAST, min_share: float = MIN_TOP_SHARE,
                    at_step: int | None = None) -> pd.DataFrame:
    """One row per behaviour the run ever showed (COLUMNS), most common in the window first.
    `at_step`: the table as it stood at that step (the window ends there; reviews are today's)."""
    if last < 1:
        raise ValueError(f"--last must be at least 1, not {last}")
    if at_step is None:
        return behaviour_tables(con, [run_id], last, min_share)[run_id]
    end = int(at_step)
    since = end - int(last)
    return summarise(queries.behaviour_totals(con, run_id, since, at_step),
                     queries.behaviour_window(con, run_id, since, at_step),
                     queries.behaviour_reviews(con, run_id), queries.held_out_evals(con, run_id), min_share)


def summarise(totals: pd.DataFrame, window: pd.DataFrame, reviews: pd.DataFrame, held_out: pd.DataFrame | None = None,
              min_share: float = MIN_TOP_SHARE) -> pd.DataFrame:
    """The behaviour table from the query frames (pure; `behaviour_table` reads them)."""
    if totals.empty:
        return pd.DataFrame(columns=COLUMNS)
    table = totals.merge(window, on="behaviour", how="left").merge(reviews, on="behaviour", how="left")
    for column in ("top_n", "taught", "approved", "rejected"):
        table[column] = table[column].fillna(0).astype(int)
    n_window, n_top = int(table["n"].sum()), int(table["top_n"].sum())
    table["share"] = table["n"] / n_window if n_window else 0.0
    table["mean_reward"] = (table["reward_total"] / table["n"]).where(table["n"] > 0)
    table["flagged_share"] = (table["flagged"] / table["n"]).where(table["n"] > 0)
    table["top_share"] = table["top_n"] / n_top if n_top else 0.0
    table["high_reward"] = table["top_share"] >= min_share
    table["reviewed"] = (table["approved"] + table["rejected"]) > 0
    table["unverified"] = table["high_reward"] & (table["flagged_ever"] == 0) & ~table["reviewed"]
    table["held_out_success"] = table["behaviour"].map(held_out_success(held_out))
    table["first_step"] = table["first_step"].astype(int)
    table["flagged_ever"] = table["flagged_ever"].astype(int)
    table["n"] = table["n"].astype(int)
    return table.sort_values(["share", "first_step", "behaviour"], ascending=[False, True, True])[COLUMNS] \
        .reset_index(drop=True)


def behaviour_tables(con, run_ids: list[str], last: int = DEFAULT_LAST,
                     min_share: float = MIN_TOP_SHARE) -> dict[str, pd.DataFrame]:
    """`behaviour_table` of each run, read for all of them at once: a query per figure, not per
    figure and run (Compare shows the table of every picked run)."""
    if last < 1:
        raise ValueError(f"--last must be at least 1, not {last}")
    run_ids = list(dict.fromkeys(run_ids))
    if not run_ids:
        return {}
    since = {run_id: step - int(last) for run_id, step in queries.last_steps(con, run_ids).items()}
    return summarise_runs(queries.behaviour_totals_for_runs(con, since), queries.behaviour_window_for_runs(con, since),
                          queries.behaviour_reviews_for_runs(con, run_ids), queries.held_out_evals_for_runs(con, run_ids),
                          run_ids, min_share)


def summarise_runs(totals: pd.DataFrame, window: pd.DataFrame, reviews: pd.DataFrame, held_out: pd.DataFrame,
                   run_ids: list[str], min_share: float = MIN_TOP_SHARE) -> dict[str, pd.DataFrame]:
    """`summarise` of several runs' query frames (each with a `run_id` column; `totals` ordered by
    run and behaviour) at once, by run: the same table for each as `summarise` of its own rows."""
    import numpy as np

    empty = pd.DataFrame(columns=COLUMNS)
    if totals.empty:
        return {run_id: empty.copy() for run_id in run_ids}
    keys = ["run_id", "behaviour"]
    table = totals.merge(window, on=keys, how="left").merge(reviews, on=keys, how="left")
    for column in ("top_n", "taught", "approved", "rejected"):
        table[column] = table[column].fillna(0).astype(int)
    run_code, runs = pd.factorize(table["run_id"])  # the runs in totals' order, each one block of rows
    n_window = np.bincount(run_code, weights=table["n"].to_numpy())[run_code].astype(int)
    n_top = np.bincount(run_code, weights=table["top_n"].to_numpy())[run_code].astype(int)
    table["share"] = (table["n"] / n_window).where(n_window != 0, 0.0)
    table["mean_reward"] = (table["reward_total"] / table["n"]).where(table["n"] > 0)
    table["flagged_share"] = (table["flagged"] / table["n"]).where(table["n"] > 0)
    table["top_share"] = (table["top_n"] / n_top).where(n_top != 0, 0.0)
    table["high_reward"] = table["top_share"] >= min_share
    table["reviewed"] = (table["approved"] + table["rejected"]) > 0
    table["unverified"] = table["high_reward"] & (table["flagged_ever"] == 0) & ~table["reviewed"]
    if held_out.empty:
        table["held_out_success"] = np.nan
    else:
        by = held_out.assign(behaviour=held_out["actions"].map(lambda a: default_behaviour(list(a) if a is not None else [])))
        rates = by.groupby(keys, sort=False)["success"].mean().astype(float).rename("held_out_success").reset_index()
        table = table.merge(rates, on=keys, how="left")
    table["held_out_success"] = table["held_out_success"].astype(float)
    table["first_step"] = table["first_step"].astype(int)
    table["flagged_ever"] = table["flagged_ever"].astype(int)
    table["n"] = table["n"].astype(int)
    # Within a run: most common first, then first seen, then by name (totals' own order).
    order = np.lexsort((np.arange(len(table)), table["first_step"].to_numpy(), -table["share"].to_numpy(), run_code))
    table, run_code = table.iloc[order][COLUMNS], run_code[order]
    bounds = (np.flatnonzero(np.diff(run_code)) + 1).tolist()
    out = {runs[run_code[start]]: table.iloc[start:stop].reset_index(drop=True)
           for start, stop in zip([0] + bounds, bounds + [len(table)])}
    return {run_id: out.get(run_id, empty.copy()) for run_id in run_ids}


def held_out_success(held_out: pd.DataFrame | None) -> dict[str, float]:
    """Success rate of the latest held-out episodes by their behaviour (their calls' default one:
    a task that names its behaviours otherwise matches none, and the column stays empty)."""
    if held_out is None or held_out.empty:
        return {}
    by = held_out.assign(behaviour=held_out["actions"].map(lambda a: default_behaviour(list(a) if a is not None else [])))
    return by.groupby("behaviour")["success"].mean().astype(float).to_dict()


def as_records(table: pd.DataFrame) -> list[dict]:
    """The table as `agentrl behaviours --json` prints it."""
    def number(value):
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)

    return [{"behaviour": r.behaviour, "first_step": int(r.first_step), "share": float(r.share),
             "mean_reward": number(r.mean_reward), "flagged_share": number(r.flagged_share),
             "held_out_success": number(r.held_out_success), "top_share": float(r.top_share),
             "high_reward": bool(r.high_reward), "reviewed": bool(r.reviewed), "unverified": bool(r.unverified)}
            for r in table.itertuples()]


def lump_shares(shares: pd.DataFrame, keep: int = 8, other: str = "(other)") -> pd.DataFrame:
    """Per-step shares (columns: step, behaviour, share) with all but the `keep` behaviours of
    largest total share summed into `other`: a stacked chart of hundreds of rare ones is unreadable."""
    if shares.empty:
        return shares[["step", "behaviour", "share"]]
    kept = set(shares.groupby("behaviour")["share"].sum().nlargest(keep).index)
    named = shares["behaviour"].where(shares["behaviour"].isin(kept), other)
    return shares.assign(behaviour=named).groupby(["step", "behaviour"], as_index=False)["share"].sum()


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The behaviour table as the pages show it: the behaviours of the window (a long run's early,
    abandoned ones are listed by `agentrl behaviours --json`), what a reviewer decides on first."""
    shown = table[table["n"] > 0]
    shown = shown.assign(unverified=shown["unverified"].map({True: "⚠ unverified", False: ""}))
    return shown[["unverified", "behaviour", "first_step", "share", "mean_reward", "flagged_share", "held_out_success",
                  "reviewed", "top_share"]]


# --- where two runs differ, found from their trajectories -----------------------------------------


def js_bits(p: dict[str, float], q: dict[str, float]) -> float:
    """Jensen-Shannon divergence of two distributions over actions, in bits (0 to 1)."""
    total = 0.0
    for action in set(p) | set(q):
        a, b = p.get(action, 0.0), q.get(action, 0.0)
        m = (a + b) / 2
        if a > 0:
            total += 0.5 * a * math.log2(a / m)
        if b > 0:
            total += 0.5 * b * math.log2(b / m)
    return max(0.0, total)


def _distributions(counts: pd.DataFrame) -> dict[str, tuple[int, dict[str, float]]]:
    out = {}
    for state, group in counts.groupby("state", sort=True):
        visits = int(group["n"].sum())
        out[state] = (visits, {a: int(n) / visits for a, n in zip(group["action"], group["n"])})
    return out


def divergent_states(counts_a: pd.DataFrame, total_a: int, counts_b: pd.DataFrame, total_b: int) -> pd.DataFrame:
    """States both runs visit, largest weighted divergence first: state, js (bits), weight,
    score (js x weight), visits_a, visits_b, probs_a, probs_b (action -> probability)."""
    a, b = _distributions(counts_a), _distributions(counts_b)
    rows = []
    for state in sorted(set(a) & set(b)):
        (visits_a, probs_a), (visits_b, probs_b) = a[state], b[state]
        js = js_bits(probs_a, probs_b)
        weight = min(visits_a / total_a if total_a else 0.0, visits_b / total_b if total_b else 0.0)
        rows.append({"state": state, "js": js, "weight": weight, "score": js * weight, "visits_a": visits_a,
                     "visits_b": visits_b, "probs_a": probs_a, "probs_b": probs_b})
    columns = ["state", "js", "weight", "score", "visits_a", "visits_b", "probs_a", "probs_b"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["score", "js", "state"], ascending=[False, False, True]).reset_index(drop=True)


def gym_states_recorded(kinds: list[str]) -> bool:
    """Whether every run's engine records gym states (the tabular engine's refund gym); otherwise
    states are the calls so far (an LM's states are the text its tool calls answered, never the same twice)."""
    from agentrl.engines.registry import UnknownEngineError, get_engine

    def gym(kind: str) -> bool:
        try:
            return get_engine(kind).gym_states
        except UnknownEngineError:
            return False

    return bool(kinds) and all(gym(kind) for kind in kinds)


def run_divergence(con, run_a: str, run_b: str, last: int = DEFAULT_LAST) -> pd.DataFrame:
    """`divergent_states` of two runs' last `last` steps each."""
    if last < 1:
        raise ValueError(f"--last must be at least 1, not {last}")
    kinds = []
    for run_id in (run_a, run_b):
        run = queries.get_run(con, run_id)
        if run is None:
            raise ValueError(f"no run {run_id!r} in the store")
        kinds.append(run["kind"])
    gym = gym_states_recorded(kinds)
    (ca, ta), (cb, tb) = (queries.next_action_counts(con, r, queries.last_step(con, r) - int(last), gym)
                          for r in (run_a, run_b))
    return divergent_states(ca, ta, cb, tb)


def divergence_records(frame: pd.DataFrame) -> list[dict]:
    """The divergence as `agentrl diff --json` prints it."""
    return [{"state": r.state, "js": float(r.js), "weight": float(r.weight), "visits_a": int(r.visits_a),
             "visits_b": int(r.visits_b), "probs_a": dict(r.probs_a), "probs_b": dict(r.probs_b)}
            for r in frame.itertuples()]
