"""A running run's own files: where its chunks go, run.json and status.json kept, and published beside the chunks.

Launch -> run process -> `agentrl.record.run.Run` (**upkeep**: its files, once a second from the flusher)
-> chunks -> store -> page. A `Run` picks its chunk location when it opens (`chunk_location`: what
run.json records, else `<chunks_url or $AGENTRL_CHUNKS_URL>/<run_id>`, else the run folder's
chunks/) and tells run.json before the first flush lands, since the store reads it there.

Once a second the flusher ticks (`_tick`): status.json's step when it moved, and a check that
run.json and the run folder are still there: one removed under the running run stops it at its
next step, `failed` and saying so ("run.json was removed at step 11"), and run.json is put back
after the final status so the store finds the run and can delete it.

A run whose chunks go to an object store (`s3://...`) publishes its run.json and status.json
there too and honours a `stop` file found there (`agentrl.record.published`), so a head that
shares nothing but the URL sees it and can cancel it. When that storage stops answering, the run
goes on, says in status.json (`waiting_for_storage`) and its log that it waits, and sends what it
kept once the storage answers.
"""

from __future__ import annotations

import contextlib
import os

from agentrl.record.locations import (
    CHUNKS_URL_ENV,
    ChunkFolder,
    ChunkLocationError,
    check_chunks_url,
    folder_at,
    recorded_location,
    run_location,
)
from agentrl.record.published import STOP_FILE, publish, publishes
from agentrl.record.rundir import RunDir, write_json_atomic


class RunUpkeep:
    """The `Run`'s care of its own files (mixed into `agentrl.record.run.Run`, which sets `dir`,
    `run_id`, `step`, `stop`, `writer`, `_meta`, `_closed`, `_status_lock`, `_status_step` and
    `_files_lock`, and provides `sample_hardware` and `_watch_stop`)."""

    def _place_chunks(self, run_dir: RunDir, chunks_url: str | None) -> tuple[ChunkFolder | None, bool]:
        """Where the chunks go, before the writer claims the folder: sets `chunks_location` (None:
        the run folder's chunks/) and `_published`; the folder for the writer, and whether run.json must be told."""
        location, record = chunk_location(run_dir, chunks_url)
        self.chunks_location = location  # None: the run folder's chunks/
        folder = folder_at(location) if location else None
        self._published = folder if publishes(location) else None  # run files beside the chunks, for a head elsewhere
        return folder, record

    def _record_place(self, run_dir: RunDir, record: bool) -> None:
        """Once the writer holds the folder: run.json told where the chunks go (before the first
        flush lands: the store reads run.json to find them), and published beside them."""
        meta = None
        if record:
            meta = run_dir.update_meta(chunks_url=self.chunks_location)
        if self._published is not None:
            publish(self._published, "run.json", meta if record else (run_dir.meta() or {}))
        self._meta = run_dir.meta()  # put back if someone removes run.json mid-run (`_check_files`)

    def _tick(self) -> None:
        """Once a second, in the flusher: a hardware sample, status.json's step when it moved, and
        for a script's own run (`agentrl.init`) a stop request it has not honoured (`agentrl cancel`), and
        a look for a stop file beside published chunks."""
        self._check_files()
        self.sample_hardware()
        self._write_step()
        if (self._published is not None and not self.stop.signalled and self.writer.waiting_since is None
                and self._published.exists(STOP_FILE)):
            self.stop.signalled = True  # a cancel from a head that sees only the URL
        self._watch_stop()

    def _check_files(self) -> None:
        """run.json or the whole run folder removed under the running run: the run stops at its
        next step and ends `failed` saying so ("run.json was removed at step 11"); the store's
        ingest says the same of a run it holds as running meanwhile."""
        if self.stop.lost is not None or self.dir.meta_path.is_file():
            return
        with self._files_lock:
            if self.stop.lost is None:
                what = "run.json" if self.dir.root.is_dir() else "the run folder"
                self.stop.lost = f"{what} was removed at step {self.step}"

    def _put_back_meta(self) -> None:
        """After the final status is written: a folder that still holds it gets its run.json back,
        so the store finds the run, takes every commit it made, sees it `failed` and can delete
        it. Not before: an `rm -r` of the folder under way must not find new files in it."""
        if self._meta is not None and self.dir.status_path.is_file() and not self.dir.meta_path.exists():
            with contextlib.suppress(OSError):
                write_json_atomic(self.dir.meta_path, self._meta)

    def _write_step(self) -> None:
        with self._status_lock:
            if self.step != self._status_step and not self._closed:
                self.dir.update_status(step=self.step)
                self._status_step = self.step
                self._publish_status()

    def _publish_status(self) -> bool:
        """Copy status.json beside the published chunks; False when storage does not answer now
        (the flusher says so, and the next tick or the end publishes it)."""
        if self._published is None:
            return True
        try:
            publish(self._published, "status.json", self.dir.status() or {})
            return True
        except OSError as error:
            self.writer.storage_failed(error)  # the run says it waits, as when a commit cannot be written
            return False

    def _storage_changed(self, error: OSError | None) -> None:
        """From the flusher: storage behind the chunks URL stopped answering (`error`), or is back (None)."""
        if error is not None:
            reason = " ".join(str(error).split())[:300]
            message = f"waiting for storage at {self.chunks_location}: {reason}; rows are kept and sent when it answers"
            print(f"agentrl: run {self.run_id} is {message}", flush=True)
            self.dir.update_status(waiting_for_storage=message)
        else:
            print(f"agentrl: run {self.run_id}: storage at {self.chunks_location} answers again; what was kept is sent",
                  flush=True)
            self.dir.update_status(waiting_for_storage=None)
            self._publish_status()


def chunk_location(run_dir: RunDir, chunks_url: str | None) -> tuple[str | None, bool]:
    """Where this run's chunks go, and whether run.json must be told: the location run.json
    records (a run written before), else `<chunks_url or $AGENTRL_CHUNKS_URL>/<run_id>`, else None
    (the run folder's chunks/). A run asked to write elsewhere than it already does is refused."""
    recorded = recorded_location(run_dir.meta())
    base = chunks_url if chunks_url is not None else os.environ.get(CHUNKS_URL_ENV) or None
    wanted = run_location(check_chunks_url(base, reach=recorded is None), run_dir.run_id) if base else None
    if recorded is not None:
        if chunks_url is not None and wanted != recorded:
            raise ChunkLocationError(f"run {run_dir.run_id} already writes its chunks to {recorded!r}, not {wanted!r}; "
                                     "leave chunks_url out to go on writing there")
        return recorded, False
    return wanted, wanted is not None
