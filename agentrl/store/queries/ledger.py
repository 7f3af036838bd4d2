"""What ingest writes besides the chunks' rows: run records, the ledger and the per-step aggregates.

Ingest, compaction and the store's migrations -> **queries.ledger** -> DuckDB. Statements take
a cursor inside the caller's transaction; the ledger is what makes every commit taken exactly
once, and `step_components` is what Compare reads instead of unnesting every trajectory's map;
`step_behaviours` is what the Behaviours view reads instead of grouping every trajectory (by
the behaviours' numbers in `behaviour_names`, not their names), and
`run_behaviours` its whole-run figures, and `behaviour_actions` what the onset monitor's suspect
actions read instead of unnesting every action.
"""

from __future__ import annotations

import json
from datetime import datetime

from agentrl.store.db import Con


def run_labels(meta: dict) -> list:
    """(project, tags, notes, summary, launch_group) of a run.json, as `upsert_run` takes them:
    each None unless it has the right shape."""
    project, tags, notes, summary, group = (meta.get(k) for k in ("project", "tags", "notes", "summary", "launch_group"))
    tags = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else None
    summary = json.dumps(summary, default=str) if isinstance(summary, dict) else None
    return [project if isinstance(project, str) else None, tags, notes if isinstance(notes, str) else None, summary,
            group if isinstance(group, str) else None]


def upsert_run(con: Con, values: list) -> None:
    """A run's record as run.json and status.json say it, replacing the one stored (values in the
    order of the columns below; the last five, project to launch_group, may be left off)."""
    values = list(values) + [None] * (19 - len(values))
    con.execute(
        """
        INSERT OR REPLACE INTO runs
            (run_id, name, kind, scorer, status, config, created_at, started_at, ended_at,
             error, pid, total_steps, run_dir, record_schema_version, project, tags, notes, summary, launch_group)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """,
        values,
    )


def unfinished_runs(con: Con) -> list[str]:
    """Runs the store took from a run folder and holds as queued or running."""
    return [r[0] for r in con.execute(
        "SELECT run_id FROM runs WHERE status NOT IN ('succeeded', 'failed', 'cancelled') AND run_dir IS NOT NULL "
        "ORDER BY run_id").fetchall()]


def last_stored_step(con: Con, run_id: str) -> int:
    """The highest step of a run the store holds (0 without any)."""
    return int(con.execute("SELECT coalesce(max(step), 0) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0])


def fail_lost_run(con: Con, run_id: str, error: str, ended_at: datetime) -> None:
    """End a run whose files went away under it (its rows stay): `failed`, with why."""
    con.execute(
        "UPDATE runs SET status = 'failed', error = ?, ended_at = ? "
        "WHERE run_id = ? AND status NOT IN ('succeeded', 'failed', 'cancelled')",
        [error, ended_at, run_id],
    )


def aggregate_step_components(cur: Con, relation: str = "chunk_rows") -> None:
    """Add the per-step sums and counts of every reward component of the trajectories registered
    as `relation` (ingest registers each batch as `chunk_rows`; the name is ours, never input)."""
    if relation not in ("chunk_rows", "trajectories"):
        raise ValueError(f"unknown relation {relation!r}")
    cur.execute(
        f"""
        INSERT INTO step_components (run_id, step, component, total, n)
        SELECT run_id, step, component, sum(value), count(value)
        FROM (SELECT run_id, step, unnest(map_keys(components)) AS component,
                     unnest(map_values(components)) AS value
              FROM {relation} WHERE cardinality(components) > 0)
        GROUP BY run_id, step, component
        """
    )


# The tallies of `monitor_step_tallies`, per run and step of a relation; {relation} is a table name
# or a subquery of ours, never input.
STEP_TALLIES_SQL = """
    WITH t AS (
        SELECT run_id, step, coalesce(reward, 0.0) AS reward, coalesce(violation, false) AS flagged,
               coalesce(success, false) AS success, coalesce(vetoed, false) AS vetoed
        FROM {relation}
    ), best AS (  -- a grouped max joined back: half the time of max() OVER (PARTITION BY step)
        SELECT run_id, step, max(reward) AS best FROM t GROUP BY run_id, step
    )
    SELECT run_id, step, count(*)::INTEGER AS n, count(*) FILTER (flagged AND NOT vetoed)::INTEGER AS taught,
           count(*) FILTER (flagged)::INTEGER AS flagged, coalesce(sum(reward) FILTER (flagged), 0.0) AS flagged_reward,
           count(*) FILTER (NOT flagged)::INTEGER AS clean, coalesce(sum(reward) FILTER (NOT flagged), 0.0) AS clean_reward,
           count(*) FILTER (NOT flagged AND success)::INTEGER AS clean_success,
           coalesce(sum(reward) FILTER (NOT flagged AND success), 0.0) AS clean_success_reward,
           any_value(best) AS best,
           count(*) FILTER (reward >= best - 1e-9)::INTEGER AS top,
           count(*) FILTER (reward >= best - 1e-9 AND flagged)::INTEGER AS top_flagged
    FROM t JOIN best USING (run_id, step) GROUP BY run_id, step
"""


def aggregate_step_tallies(cur: Con, relation: str = "chunk_rows") -> None:
    """Add the onset monitor's per-step tallies of the trajectories registered as `relation`."""
    if relation not in ("chunk_rows", "trajectories"):  # the reader passes its own subquery, never input
        raise ValueError(f"unknown relation {relation!r}")
    cur.execute(
        "INSERT INTO step_tallies (run_id, step, n, taught, flagged, flagged_reward, clean, clean_reward, clean_success, "
        "clean_success_reward, best, top, top_flagged) " + STEP_TALLIES_SQL.format(relation=relation)
    )


# `agentrl.record.behaviour.default_behaviour` in SQL: what a row without a behaviour gets at ingest.
BEHAVIOUR_SQL = """
    CASE WHEN coalesce(len(list_filter(actions, lambda a: a IS NOT NULL)), 0) = 0 THEN '(no tool calls)'
         WHEN length(array_to_string(actions, ' > ')) > 500 THEN left(array_to_string(actions, ' > '), 499) || '…'
         ELSE array_to_string(actions, ' > ') END
"""


def with_default_behaviours(chunk):
    """`chunk` (an Arrow table of trajectories) with `BEHAVIOUR_SQL`'s behaviour filled in by Arrow
    where it is plain (calls joined, none null, 1 to 500 characters) and none was given: the two
    statements below then skip the SQL for those rows, which each would run on every row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "behaviour" not in chunk.column_names or "actions" not in chunk.column_names:
        return chunk
    joined = pc.binary_join(chunk.column("actions"), " > ")  # null where any call is null: left to the SQL
    length = pc.utf8_length(joined)
    plain = pc.if_else(pc.and_(pc.greater(length, 0), pc.less_equal(length, 500)), joined, pa.scalar(None, pa.string()))
    index = chunk.schema.get_field_index("behaviour")
    return chunk.set_column(index, chunk.schema.field(index), pc.coalesce(chunk.column("behaviour"), plain))


def insert_trajectories(cur: Con, relation: str = "chunk_rows") -> None:
    """Insert the trajectories registered as `relation`, each without a behaviour given its
    tool calls' (`BEHAVIOUR_SQL`)."""
    if relation != "chunk_rows":
        raise ValueError(f"unknown relation {relation!r}")
    cur.execute(f"INSERT INTO trajectories BY NAME SELECT * REPLACE (coalesce(behaviour, {BEHAVIOUR_SQL}) AS behaviour) "
                f"FROM {relation}")


def name_behaviours(cur: Con) -> None:
    """Give each behaviour of `run_behaviours` that has no number in `behaviour_names` the next
    ones (in name order, after the greatest given). The small table, not the trajectories: it
    holds every behaviour ingest has seen, and is kept before `step_behaviours` in a transaction."""
    cur.execute(
        """
        INSERT INTO behaviour_names (code, behaviour)
        SELECT (SELECT coalesce(max(code), -1) FROM behaviour_names) + row_number() OVER (ORDER BY behaviour), behaviour
        FROM (SELECT DISTINCT behaviour FROM run_behaviours) AS seen
        WHERE behaviour NOT IN (SELECT behaviour FROM behaviour_names)
        """
    )


def aggregate_step_behaviours(cur: Con, relation: str = "chunk_rows") -> None:
    """Add the per-step tallies of each behaviour of the trajectories registered as `relation`,
    with the behaviour's number: `run_behaviours` must have them already (`aggregate_run_behaviours`
    of the same relation, in the same transaction), and they are named here first. (A row whose
    name has no number keeps a null code rather than being dropped; no caller leaves one, which
    the store tests check after ingest, rebuild and each migration.)"""
    if relation not in ("chunk_rows", "trajectories"):
        raise ValueError(f"unknown relation {relation!r}")
    name_behaviours(cur)
    cur.execute(
        f"""
        INSERT INTO step_behaviours (run_id, step, behaviour, n, reward_total, flagged, success, code)
        WITH tallies AS (
            SELECT run_id, step, coalesce(behaviour, {BEHAVIOUR_SQL}) AS behaviour, count(*)::INTEGER AS n,
                   coalesce(sum(coalesce(reward, 0.0)), 0.0) AS reward_total,
                   count(*) FILTER (coalesce(violation, false))::INTEGER AS flagged,
                   count(*) FILTER (coalesce(success, false))::INTEGER AS success
            FROM {relation} GROUP BY ALL)
        SELECT t.*, c.code FROM tallies t LEFT JOIN behaviour_names c USING (behaviour)
        """
    )


def aggregate_run_behaviours(cur: Con, relation: str = "chunk_rows") -> None:
    """Add each behaviour's first and last step and counts of the trajectories registered as `relation`."""
    if relation not in ("chunk_rows", "trajectories"):
        raise ValueError(f"unknown relation {relation!r}")
    cur.execute(
        f"""
        INSERT INTO run_behaviours (run_id, behaviour, first_step, last_step, n, flagged)
        SELECT run_id, coalesce(behaviour, {BEHAVIOUR_SQL}) AS behaviour, min(step), max(step), count(*),
               count(*) FILTER (coalesce(violation, false))
        FROM {relation} GROUP BY ALL
        """
    )


def aggregate_behaviour_actions(cur: Con, relation: str = "chunk_rows") -> None:
    """Add the uses of each (behaviour, state, action) of the trajectories registered as `relation`
    (at the recorded state when the states line up with the actions, else at '*'), and how many of
    them were in flagged trajectories: what the onset monitor's suspect actions read."""
    if relation not in ("chunk_rows", "trajectories"):
        raise ValueError(f"unknown relation {relation!r}")
    # Ingest gives a row without a behaviour its calls' (as `insert_trajectories` stores it); the
    # store's own rows are counted as they are.
    behaviour = f"coalesce(behaviour, {BEHAVIOUR_SQL})" if relation == "chunk_rows" else "behaviour"
    cur.execute(
        f"""
        INSERT INTO behaviour_actions (run_id, behaviour, state, action, uses, flagged)
        SELECT run_id, behaviour, state, action, count(*), count(*) FILTER (flagged)
        FROM (SELECT run_id, behaviour, flagged, unnest(actions) AS action,
                     unnest(coalesce(states, list_transform(actions, lambda x: '*'))) AS state
              FROM (SELECT run_id, {behaviour} AS behaviour, actions, coalesce(violation, false) AS flagged,
                           CASE WHEN len(states) = len(actions) THEN states END AS states
                    FROM {relation} WHERE len(actions) > 0))
        GROUP BY ALL
        """
    )


def migration_applied(con: Con, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM store_migrations WHERE name = ?", [name]).fetchall()[0][0])


def fill_behaviours(cur: Con) -> None:
    """Every stored trajectory without a behaviour gets its tool calls', and `step_behaviours` is
    tallied again from all of them (trajectories that went in by SQL, not ingest: migrations, benchmarks)."""
    cur.execute(f"UPDATE trajectories SET behaviour = {BEHAVIOUR_SQL} WHERE behaviour IS NULL")
    cur.execute("DELETE FROM run_behaviours")  # first: the step tallies take the behaviours' numbers from it
    aggregate_run_behaviours(cur, "trajectories")
    cur.execute("DELETE FROM step_behaviours")
    aggregate_step_behaviours(cur, "trajectories")
    cur.execute("DELETE FROM behaviour_actions")  # counted by behaviour, so again with the filled-in ones
    aggregate_behaviour_actions(cur, "trajectories")


def code_behaviours(cur: Con) -> None:
    """Number every behaviour of `run_behaviours` and set the number on each `step_behaviours` row
    still without one (a store made before the numbers: ~2.5 s on the 10M-row bench store)."""
    name_behaviours(cur)
    cur.execute("UPDATE step_behaviours SET code = c.code FROM behaviour_names c "
                "WHERE step_behaviours.code IS NULL AND step_behaviours.behaviour = c.behaviour")


# What a store made by an older agentrl lacks, in the order it is filled (a name is its
# `store_migrations` row): each aggregate table from every stored trajectory; "behaviours" is the
# trajectories' behaviours themselves, with every table counted by them; "behaviour_codes" the
# behaviours' numbers in `step_behaviours`.
MIGRATIONS = {
    "step_components": aggregate_step_components,
    "step_tallies": aggregate_step_tallies,
    "behaviours": fill_behaviours,
    "run_behaviours": aggregate_run_behaviours,
    "behaviour_actions": aggregate_behaviour_actions,
    "behaviour_codes": code_behaviours,
}
WHOLE_STORE = {"behaviours", "behaviour_codes"}  # filled over the stored rows, not one table counted again


def backfill(cur: Con, name: str, applied_at: datetime) -> None:
    """Apply migration `name` (of `MIGRATIONS`) to a store made before it, and record it: its table
    computed again from every stored trajectory (a few seconds on a store of millions of them)."""
    if name in WHOLE_STORE:
        MIGRATIONS[name](cur)
    else:
        cur.execute(f"DELETE FROM {name}")  # a name of MIGRATIONS, not input
        MIGRATIONS[name](cur, "trajectories")
    cur.execute("INSERT INTO store_migrations (name, applied_at) VALUES (?, ?)", [name, applied_at])


def take_without_rows(cur: Con, key: str, tables: str, run_id: str, rows: int, at: datetime) -> None:
    """Enter a commit in the ledger whose rows the store already holds (a compacted commit)."""
    cur.execute(
        "INSERT OR REPLACE INTO ingested_files (path, table_name, run_id, rows, ingested_at) VALUES (?, ?, ?, ?, ?)",
        [key, tables, run_id, rows, at],
    )


def forget_ledger_keys(cur: Con, keys: list[str]) -> int:
    """Drop ledger entries of commits whose files are gone (replaced by a compacted commit)."""
    if not keys:
        return 0
    return int(cur.execute("DELETE FROM ingested_files WHERE list_contains(?, path)", [list(keys)]).fetchall()[0][0])


def ledger_keys(con: Con, run_id: str) -> list[str]:
    return [r[0] for r in con.execute("SELECT path FROM ingested_files WHERE run_id = ?", [run_id]).fetchall()]


def ingest_error_keys(con: Con, run_id: str) -> list[str]:
    return [r[0] for r in con.execute("SELECT path FROM ingest_errors WHERE starts_with(path, ?)", [f"{run_id}/"]).fetchall()]
