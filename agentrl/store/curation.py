"""What a person does to the run list: tag, annotate, archive, and delete runs.

Home page / CLI -> **curation** -> queries.annotations, queries.runs, the runs directory. Archiving
hides a run from the pickers and keeps everything. Tags, notes and the archived flag go to the
decisions log with the store (`agentrl.store.decisions`), so a rebuilt store keeps them. Deleting removes the run's folder (its chunks,
log and policy) and every row it recorded; the decisions about it (reviews, fixtures, promotions)
stay in their append-only log. A run still running cannot be deleted: cancel it first.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from agentrl.record.locations import FsspecFolder, recorded_location
from agentrl.record.rundir import TERMINAL_STATUSES, read_json, utc_now
from agentrl.store import decisions, queries


class CurationError(ValueError):
    """A change to the run list that cannot be made; the message says why."""


def _clean_tags(tags) -> list[str]:
    seen = []
    for tag in tags or []:
        tag = str(tag).strip()
        if tag and tag not in seen:
            seen.append(tag)
    return seen


def annotate(con, run_id: str, tags=None, note: str | None = None, archived: bool | None = None, by: str | None = None) -> dict:
    """Change a run's tags, note or archived flag (None leaves one as it is); returns the result."""
    if queries.get_run(con, run_id) is None:
        raise CurationError(f"no run {run_id!r} in the store")
    current = queries.run_notes(con, run_id)
    updated = {
        "tags": current["tags"] if tags is None else _clean_tags(tags),
        "note": current["note"] if note is None else (note.strip() or None),
        "archived": current["archived"] if archived is None else bool(archived),
    }
    with decisions.recording(con) as written:  # the store and the decisions log, together
        queries.set_run_notes(con, run_id, updated["tags"], updated["note"], updated["archived"],
                              (by or "").strip() or None, utc_now())
        written.append((decisions.NOTES, run_id))
    return updated


# Two browser sessions (threads of the dashboard) pressing Delete on one run at once both found it,
# and the later rmtree crashed on files the first had removed. One lock for the process: only one
# process holds the store to write.
_deletions = threading.Lock()


def delete_run(con, runs_dir: Path, run_id: str) -> dict[str, int]:
    """Delete a finished run's folder and rows; returns rows deleted per table."""
    with _deletions:
        return _delete_run(con, runs_dir, run_id)


def _delete_run(con, runs_dir: Path, run_id: str) -> dict[str, int]:
    run = queries.get_run(con, run_id)
    if run is None:
        raise CurationError(f"no run {run_id!r} in the store")
    if run["status"] not in TERMINAL_STATUSES:
        raise CurationError(f"run {run_id} is {run['status']}; cancel it and wait for it to stop before deleting it")
    runs_dir = Path(runs_dir).resolve()
    folder = (runs_dir / run_id).resolve()
    if folder.parent != runs_dir:
        raise CurationError(f"run id {run_id!r} does not name a folder of {runs_dir}")
    # The folder goes first: rows deleted while it stayed would be ingested again. Chunks behind a
    # URL go before it (a head's copy of a published run would otherwise come back at the next ingest).
    remote = recorded_location(read_json(folder / "run.json"))
    if remote is not None and "://" in remote:
        try:
            FsspecFolder(remote).remove_all()
        except OSError as error:
            raise CurationError(f"run {run_id}: its chunks at {remote} cannot be deleted now ({error}); nothing was deleted") from None
    if folder.exists():
        shutil.rmtree(folder)
    return queries.delete_run_rows(con, run_id)
