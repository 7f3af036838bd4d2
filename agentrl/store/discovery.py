"""Which commits of a run the store has not taken yet, found without listing its folder every tick.

Chunks -> **discovery** -> ingest -> store. A writer numbers its commits without gaps, so once a
run's folder has been listed (when the Ingestor first sees the run), a tick only asks whether
the marker of the next number exists: one `stat` (one HEAD behind an object store) per running
run, whatever the run's length. The folder is listed again after the run ends (what a tick
missed, and a record-schema-1 run's part files, are found then) and when more than
`PROBE_LIMIT` new commits wait (a backlog is cheaper to list than to look for one by one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentrl.record.chunks import CHUNKS_DIR, LEGACY_GLOB, Commit, marker_name, read_commit, scan_commits, superseded_out
from agentrl.record.locations import ChunkFolder, LocalFolder
from agentrl.record.rows import CHUNK_TABLES
from agentrl.record.rundir import RunDir

PROBE_LIMIT = 64  # new commits a tick finds by number, one look each, before listing the folder is cheaper


@dataclass(frozen=True)
class Unit:
    """What one ingest transaction entry takes: a commit (every table of one flush) or a legacy part file."""

    key: str  # the ledger's name for it: <run_id>/chunks/<n>.commit or <run_id>/<table>/part-N.parquet
    where: str  # the marker's path or URL, as messages name it
    folder: ChunkFolder  # where `marker` and the files are
    marker: str  # the file whose size and mtime identify it (the commit marker)
    files: tuple[tuple[str, str], ...]  # (table, file name in `folder`)


@dataclass
class Cursor:
    """Where the Ingestor stands in one run's commits."""

    folder: ChunkFolder
    next: int = 0  # the number of the next commit to look for
    scanned: bool = False  # listed once since the Ingestor first saw the run


def new_commits(cursor: Cursor, ended: bool, taken, highest_taken: int) -> tuple[list[Commit], bool]:
    """The run's visible commits not in `taken` (marker names), and whether the folder was listed
    (new to the cursor, ended, or a backlog). Moves the cursor past what it found."""
    commits = None if not cursor.scanned or ended else probe(cursor, taken)
    listed = commits is None
    if listed:
        commits = superseded_out(scan_commits(cursor.folder, skip=taken))
        cursor.scanned = True
    cursor.next = max(cursor.next, highest_taken + 1, max((c.number for c in commits), default=-1) + 1)
    return commits, listed


def probe(cursor: Cursor, taken) -> list[Commit] | None:
    """Commits numbered from `cursor.next` on, found one look at a time; None past PROBE_LIMIT."""
    found = []
    number = cursor.next
    while cursor.folder.exists(marker_name(number)):
        if len(found) >= PROBE_LIMIT:
            return None
        if marker_name(number) not in taken:
            found.append(read_commit(cursor.folder, number))
        number += 1
    return superseded_out(found)


def commit_unit(run_id: str, commit: Commit, folder: ChunkFolder) -> Unit:
    return Unit(f"{run_id}/{CHUNKS_DIR}/{commit.name}", str(commit.marker), folder, commit.name,
                tuple((table, commit.file_name(table)) for table in commit.files))


def legacy_units(run: RunDir) -> list[Unit]:
    """Part files of a record-schema-1 run (one folder per table)."""
    units = []
    for table in CHUNK_TABLES:
        for path in sorted((run.root / table).glob(LEGACY_GLOB)):
            units.append(Unit(f"{run.run_id}/{table}/{path.name}", str(path), LocalFolder(path.parent), path.name,
                              ((table, path.name),)))
    return units


def replaced_markers(commit: Commit) -> list[str]:
    """Marker names of the commits a compacted commit replaces."""
    return [marker_name(n) for first, last in commit.replaces for n in range(first, last + 1)]


def path_signature(path: Path) -> tuple[int | None, int | None]:
    try:
        stat = Path(path).stat()
    except OSError:
        return (None, None)
    return (stat.st_size, stat.st_mtime_ns)


def mtime_ns(path: Path) -> int | None:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return None
