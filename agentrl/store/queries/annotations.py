"""What people add to runs: a colour fixed per run, tags, a note, and the archived flag.

Dashboard -> **queries.annotations** -> store (`schemas/annotations.sql`). `list_runs` joins these
onto every run; a colour is assigned once, the first time the dashboard sees a run, so a run
keeps its colour on every page whatever else is picked.
"""

from __future__ import annotations

from agentrl.store.db import Con


def assign_run_colors(con: Con) -> int:
    """Give every run without a colour the next ones, in creation order; returns how many."""
    row = con.execute(
        """
        INSERT OR IGNORE INTO run_colors
        SELECT run_id, (SELECT coalesce(max(color_index) + 1, 0) FROM run_colors)
                       + row_number() OVER (ORDER BY created_at, run_id) - 1
        FROM runs WHERE run_id NOT IN (SELECT run_id FROM run_colors)
        """
    ).fetchone()
    return int(row[0]) if row else 0


def run_color_indexes(con: Con, run_ids: list[str]) -> dict[str, int]:
    rows = con.execute("SELECT run_id, color_index FROM run_colors WHERE list_contains(?, run_id)", [list(run_ids)]).fetchall()
    return {run_id: int(index) for run_id, index in rows}


def set_run_notes(con: Con, run_id: str, tags: list[str], note: str | None, archived: bool, updated_by: str | None,
                  updated_at) -> None:
    """Replace a run's tags, note and archived flag (the latest edit counts)."""
    con.execute(
        """
        INSERT INTO run_notes (run_id, tags, note, archived, updated_by, updated_at) VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT (run_id) DO UPDATE SET tags = excluded.tags, note = excluded.note, archived = excluded.archived,
                                           updated_by = excluded.updated_by, updated_at = excluded.updated_at
        """,
        [run_id, list(tags), note, bool(archived), updated_by, updated_at],
    )


def run_notes(con: Con, run_id: str) -> dict:
    """A run's tags, note and archived flag (empty defaults for a run nobody annotated)."""
    row = con.execute("SELECT tags, note, archived FROM run_notes WHERE run_id = ?", [run_id]).fetchone()
    return {"tags": list(row[0]), "note": row[1], "archived": bool(row[2])} if row else {"tags": [], "note": None, "archived": False}


def all_tags(con: Con) -> list[str]:
    rows = con.execute("SELECT DISTINCT unnest(tags) AS tag FROM run_notes ORDER BY tag").fetchall()
    return [r[0] for r in rows]


def decisions_version(con: Con) -> tuple:
    """Changes whenever anyone records a review, a fixture, a promotion or a run note, in any
    session: an open page compares it to redraw with another person's decisions."""
    row = con.execute(
        """
        SELECT (SELECT coalesce(max(review_id), 0) FROM reviews), (SELECT coalesce(max(fixture_id), 0) FROM fixtures),
               (SELECT coalesce(max(promotion_id), 0) FROM promotions), (SELECT max(updated_at) FROM run_notes),
               (SELECT count(*) FROM runs)
        """
    ).fetchone()
    return tuple(row)



def runs_version(con: Con) -> tuple:
    """Changes whenever a run appears, steps, changes status or is annotated: the runs overview
    redraws when it changed."""
    row = con.execute(
        """
        SELECT (SELECT count(*) FROM runs), (SELECT string_agg(status, ',' ORDER BY run_id) FROM runs),
               (SELECT count(*) FROM steps), (SELECT max(updated_at) FROM run_notes)
        """
    ).fetchone()
    return tuple(row)
