"""A run's own files published beside its chunks, so a machine that shares nothing but the URL sees the run.

Run -> **published** -> another machine's runs directory -> store. A run whose chunks go to a URL
behind an object store (`s3://...`; `memory://` too) copies its run.json and status.json to
`<url>/<run_id>/` whenever it writes them (its step at most once a second, its end after its last
commit) and looks there for a `stop` file once a second, so a cancel can come from anywhere.

A head (the dashboard's or `agentrl ingest`'s Ingestor given `$AGENTRL_CHUNKS_URL` or
`--chunks-url`) lists `<url>/` and keeps a copy of each run's folder in its own runs directory:
run.json with `published_at: <url>` added, and status.json as last read. The store, the pages,
cancel and delete then treat it as any other run; the launcher leaves its liveness to the
machine that runs it. A local folder that is not such a copy (the writer's own, on the writer's
machine) is never touched, and a name in the listing that is not a run id is skipped.

A launcher that submits a run to another node (a Ray job, `agentrl.ray_backend`) makes the copy
itself, before the run exists (`make_copy`); it follows the job, reads the status the run
published (`refresh_copy`), and when the job ended without one, publishes the end it recorded
(`publish_status`), so every head that lists the URL sees the same end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from agentrl.record.locations import FsspecFolder, _is_url, run_location
from agentrl.record.rundir import TERMINAL_STATUSES, RunDir, read_json, write_json_atomic

PUBLISHED_KEY = "published_at"  # in a head's copy of run.json: the chunks URL the run was found under
STOP_FILE = "stop"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


def valid_run_id(text: str) -> bool:
    """Whether `text` can name a run folder (no path separator, no dot-name)."""
    return bool(_RUN_ID.match(text)) and text not in (".", "..")


def publishes(location: str | None) -> bool:
    """Whether a run writing its chunks to `location` publishes its run files there: a URL with
    no shared filesystem behind it (a `file://` URL or a plain path is a folder both machines see)."""
    if not location or not _is_url(location):
        return False
    return not FsspecFolder(location).local


def publish(folder: FsspecFolder, name: str, payload: dict) -> None:
    """One run file, one PUT (raises OSError, StorageUnreachable among them, when storage does not answer)."""
    folder.write_text(name, json.dumps(payload, indent=2, default=str))


def is_copy(meta: dict | None) -> bool:
    """Whether a run.json is a head's copy of a run published from elsewhere."""
    return isinstance(meta, dict) and isinstance(meta.get(PUBLISHED_KEY), str)


def folder_of_copy(meta: dict) -> FsspecFolder:
    """Where the run a head's copy stands for publishes its files."""
    return FsspecFolder(run_location(meta[PUBLISHED_KEY], meta["run_id"]))


def request_stop(meta: dict) -> None:
    """Ask the run a head's copy stands for to stop: a `stop` file beside its chunks."""
    folder_of_copy(meta).write_text(STOP_FILE, "")


def _read(path: Path) -> dict | None:
    try:
        return read_json(path)
    except ValueError:  # not UTF-8: no copy this head made
        return None


def sync_published(runs_dir: Path, base_url: str, log: Callable[[str], None]) -> list[str]:
    """Copy into `runs_dir` every run published under `base_url` that is new or has not ended in
    its copy; returns the ids whose copy changed. Storage that does not answer raises OSError."""
    base = FsspecFolder(base_url)
    changed = []
    for run_id in base.names():
        if not _RUN_ID.match(run_id) or run_id in (".", ".."):
            continue
        local = RunDir(Path(runs_dir) / run_id)
        known = _read(local.meta_path)
        if local.root.exists() and not is_copy(known):
            continue  # this machine's own run (or a folder that is no copy): never overwritten
        if known is not None and (_read(local.status_path) or {}).get("status") in TERMINAL_STATUSES:
            continue  # its end is copied already: nothing more will change
        folder = FsspecFolder(run_location(base_url, run_id))
        try:
            meta = json.loads(folder.read_text("run.json")) if known is None else known
            status = json.loads(folder.read_text("status.json"))
        except FileNotFoundError:
            continue  # not published (yet): a run of an older agentrl, or one starting right now
        except ValueError:
            log(f"published run {run_id} under {base_url}: its run.json or status.json cannot be read; skipped")
            continue
        if not isinstance(meta, dict) or not isinstance(status, dict) or meta.get("run_id") != run_id:
            log(f"published run {run_id} under {base_url}: its run.json does not describe run {run_id}; skipped")
            continue
        local.root.mkdir(parents=True, exist_ok=True)
        if _read(local.status_path) != status:
            write_json_atomic(local.status_path, status)
            changed.append(run_id)
        if known is None:  # last: a folder is a run once its run.json is there, and its status is then too
            write_json_atomic(local.meta_path, {**meta, PUBLISHED_KEY: str(base_url).rstrip("/"), "chunks_url": folder.url})
    return changed


def make_copy(run: RunDir, base_url: str) -> None:
    """Turn a run folder this machine made for a run that runs elsewhere into a head's copy of it."""
    meta = read_json(run.meta_path)
    write_json_atomic(run.meta_path, {**meta, PUBLISHED_KEY: str(base_url).rstrip("/"),
                                      "chunks_url": run_location(base_url, run.run_id)})


def refresh_copy(run: RunDir) -> bool:
    """Copy the status the run published into the copy's status.json; True when it changed. Nothing
    published yet is no change; storage that does not answer raises OSError."""
    try:
        status = json.loads(folder_of_copy(read_json(run.meta_path)).read_text("status.json"))
    except FileNotFoundError:
        return False
    except ValueError:
        return False  # a status.json cut short is read again at the next look
    if not isinstance(status, dict) or _read(run.status_path) == status:
        return False
    write_json_atomic(run.status_path, status)
    return True


def publish_status(run: RunDir) -> None:
    """Publish the copy's status.json (an end this head recorded) beside the run's chunks."""
    publish(folder_of_copy(read_json(run.meta_path)), "status.json", read_json(run.status_path))
