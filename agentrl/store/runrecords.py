"""Each run's own record in the store: run.json and status.json copied into `runs`, damaged run files named, lost runs ended.

Launch -> run process -> chunks -> store (ingest; **runrecords**: the `runs` table) -> page. At each
pass the Ingestor (`agentrl.store.ingest`) copies a run's record into `runs` when its status
changed, and takes its chunks only when that record can be read. A run.json or status.json that cannot be read costs that
run only, named once in `ingest_errors` (again only when the file changes, and forgotten once it
reads again); a run written with a record schema this agentrl does not know is named and left
out. A run the store holds as queued or running whose run.json or whole folder was removed is
`failed` with why, its rows kept.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from agentrl.record.rows import RECORD_SCHEMA_VERSION
from agentrl.record.rundir import RunDir, utc_now
from agentrl.record.runfiles import RunFileError
from agentrl.store.discovery import path_signature
from agentrl.store.queries.ledger import fail_lost_run, last_stored_step, run_labels, unfinished_runs, upsert_run

if TYPE_CHECKING:
    from agentrl.store.ingest import IngestReport


def _parse_ts(value) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


class RunRecords:
    """The Ingestor's share of the `runs` table (mixed into `agentrl.store.ingest.Ingestor`, which
    sets `con`, `runs_dir`, `log`, `_bad`, `_run_signatures`, `_cursors` and `_drained`, and
    provides `_record_bad`)."""

    def _end_lost_runs(self, listed: set[str], report: IngestReport) -> None:
        """A run the store holds as queued or running whose run.json or whole folder was removed
        would stay `running` for good: it is `failed` with why ("run.json was removed at step 11",
        the last step the store holds), its rows stay, and it can be deleted. (A run that is still
        alive writes its run.json back and says so itself, `agentrl.record.upkeep`.)"""
        for run_id in unfinished_runs(self.con):
            if run_id in listed:
                continue
            what = "run.json" if (self.runs_dir / run_id).is_dir() else "the run folder"
            reason = f"{what} was removed at step {last_stored_step(self.con, run_id)}"
            fail_lost_run(self.con, run_id, reason, utc_now())
            self._run_signatures.pop(run_id, None)  # should it come back, its files are read again
            self._cursors.pop(run_id, None)
            self._drained.pop(run_id, None)
            report.runs_synced += 1
            self.log(f"ingest: run {run_id} failed: {reason}")

    def _bad_run_file(self, run: RunDir, error: RunFileError, report: IngestReport) -> None:
        """Name a damaged run.json or status.json once (again only when the file changes)."""
        path = error.path
        key = f"{run.run_id}/{path.name}"
        try:
            stat = path.stat()
            signature = (stat.st_size, stat.st_mtime_ns)
        except OSError:
            signature = (None, None)
        if self._bad.get(key) != signature:
            self._record_bad(key, str(path), signature, error.detail, report)

    def _run_file_fixed(self, run: RunDir) -> None:
        """A run file named as damaged was rewritten and reads again: its error no longer stands."""
        for path in (run.meta_path, run.status_path):
            key = f"{run.run_id}/{path.name}"
            if key not in self._bad:
                continue
            try:
                stat = path.stat()
            except OSError:
                continue
            if self._bad[key] != (stat.st_size, stat.st_mtime_ns):
                del self._bad[key]
                self.con.execute("DELETE FROM ingest_errors WHERE path = ?", [key])

    def _sync_run(self, run: RunDir, meta: dict | None, status: dict, report: IngestReport) -> bool:
        """Copy the run's record into `runs`; False when its record format cannot be read."""
        if meta is None:
            return False
        version = meta.get("record_schema_version", 1)
        if not isinstance(version, int) or not 1 <= version <= RECORD_SCHEMA_VERSION:
            marker = run.meta_path
            key = f"{run.run_id}/run.json"
            if key not in self._bad:
                self._record_bad(key, str(marker), path_signature(marker), f"run {run.run_id} was written with record "
                                 f"schema {version!r}; this agentrl reads schemas 1 to {RECORD_SCHEMA_VERSION}: "
                                 "upgrade agentrl to read it", report)
            return False
        signature = tuple(sorted((k, str(v)) for k, v in status.items()))
        if self._run_signatures.get(run.run_id) == signature:
            return True
        config = meta.get("config") or {}
        upsert_run(self.con, [
            run.run_id, meta.get("name", run.run_id), meta.get("kind", config.get("kind", "tabular")),
            meta.get("scorer", config.get("scorer", "")), status.get("status", "queued"), json.dumps(config),
            _parse_ts(meta.get("created_at")) or utc_now(), _parse_ts(status.get("started_at")),
            _parse_ts(status.get("ended_at")), status.get("error"), status.get("pid"), meta.get("total_steps"),
            str(run.root), version, *run_labels(meta)])
        self._run_signatures[run.run_id] = signature
        report.runs_synced += 1
        return True
