"""Where a run's chunks live: its own folder (plain `os` calls, as always) or any fsspec URL.

Run -> chunks -> **locations** -> store. A run folder (run.json, status.json, the writer lock)
always stays in the runs directory; its chunks go to `<run_dir>/chunks/` unless the run was
given a chunks URL (`agentrl.init(chunks_url=...)`, `train --chunks-url`, or `$AGENTRL_CHUNKS_URL`):
then they go to `<url>/<run_id>/`, and run.json records that location as `chunks_url`, so
every reader (the store's ingest, `watch`, `rebuild`) finds them by reading run.json.

What "atomic" means where (a reader never sees part of a file under its final name):

- a local folder, or a plain path given as the URL: temporary dot-name, fsync, `os.replace`,
  then fsync of the folder (exactly the path of runs without a URL; fsspec is not imported);
- `file://` through fsspec: the same temporary name and rename (`fs.mv`), with an fsync;
- any other filesystem (memory, s3, gcs, ...): one `fs.pipe_file` per file, a single PUT on an
  object store, which shows the whole object or nothing.

Either way a commit's marker is written only after every table file of it is complete, so a
half-written commit is never visible. Listings through fsspec drop the filesystem's listing
cache first (s3fs and gcsfs keep one), so a new commit is seen at the next look.

Behind an object store the endpoint and credentials come from the backend's own settings
(`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` or `AWS_PROFILE` for s3fs), never
from the URL, so nothing secret is written into a run file. A bucket is never created: a chunks
URL whose bucket does not exist is refused in one line (`check_chunks_url(..., reach=True)`), and
so are missing credentials and an endpoint that refuses the connection. The backend's own errors
(botocore's, aiohttp's) come out of a folder as `StorageUnreachable`, an OSError, so every caller
that already waits out an unreadable folder waits these out too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.record.rundir import temporary_name

CHUNKS_URL_ENV = "AGENTRL_CHUNKS_URL"  # the default base URL of every run's chunks
CHUNKS_URL_KEY = "chunks_url"  # in run.json: the run's own chunk location (base URL + run id)
LOCAL_CHUNKS_DIR = "chunks"
# A run given a chunks URL also publishes these next to its chunks (agentrl.record.published).
RUN_FILES = ("run.json", "status.json", "stop")
# Behind S3 a call fails within seconds rather than after a minute of backoff: a writer then says
# at once that it waits for storage, and it (and the store's ingest) tries again on its own clock.
S3_OPTIONS = {"config_kwargs": {"retries": {"max_attempts": 3, "mode": "standard"}, "connect_timeout": 10,
                                "read_timeout": 60}}
S3_RETRIES = 2  # s3fs's own retries around botocore's (its default is 5, with growing sleeps)
_BACKEND_MODULES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "google", "gcsfs", "s3fs")


class ChunkLocationError(ValueError):
    """A chunks URL that cannot be used; the message names it and says what to change."""


class StorageUnreachable(OSError):
    """The storage behind a chunks URL did not answer or refused (a network, credential or
    endpoint error): nothing is wrong with what it holds, and the call can be tried again."""


def _one_line(error: BaseException) -> str:
    """The error on one line, any http(s) address in it left out (an endpoint may carry a user name)."""
    text = re.sub(r"\"?https?://[^\s\"]+\"?", "(the endpoint)", " ".join(str(error).split()))
    return text[:300] or type(error).__name__


def _storage_error(error: BaseException) -> bool:
    """An error raised by an fsspec backend's client library (botocore, aiohttp, ...)."""
    return type(error).__module__.split(".", 1)[0] in _BACKEND_MODULES


def _is_url(location: str) -> bool:
    return "://" in location


def run_location(base: str, run_id: str) -> str:
    """Where a run given the chunks URL `base` writes: `<base>/<run_id>`."""
    return f"{str(base).rstrip('/')}/{run_id}"


def check_chunks_url(url: str, reach: bool = False) -> str:
    """`url` if fsspec can open it (its protocol known and its package installed); else one
    ChunkLocationError line saying what to install or change. `reach=True` also asks the storage
    (one listing of the bucket behind an object-store URL): no credentials, an endpoint that
    refuses, or a bucket that does not exist are refused here, in one line, before a run starts."""
    url = str(url).strip()
    if not url:
        raise ChunkLocationError("the chunks URL is empty; give a folder or an fsspec URL such as s3://bucket/runs")
    if not _is_url(url):
        return url
    try:
        import fsspec.core

        fsspec.core.url_to_fs(url)
    except ImportError as error:
        raise ChunkLocationError(f"chunks URL {url!r}: fsspec needs a package for it ({error}); install it, "
                                 "or use a shared folder") from None
    except (ValueError, TypeError, OSError) as error:
        raise ChunkLocationError(f"chunks URL {url!r} cannot be opened: {error}") from None
    if reach:
        check_reachable(url)
    return url


def check_reachable(url: str) -> None:
    """One ChunkLocationError line unless the storage behind `url` answers and its bucket exists.
    A local path, `file://` and `memory://` always do."""
    if not _is_url(url):
        return
    folder = FsspecFolder(url)
    if folder.local or folder.fs.protocol in ("memory", ("memory",)):
        return
    bucket = folder.root.split("/", 1)[0]
    try:
        folder.fs.invalidate_cache(bucket)
        folder.fs.ls(bucket, detail=False)
    except FileNotFoundError:
        raise ChunkLocationError(f"chunks URL {url!r}: bucket {bucket!r} does not exist{_endpoint_note()}; create it "
                                 "first (agentrl never creates one), or fix the name") from None
    except Exception as error:  # noqa: BLE001 - the backend's own classes (botocore is not imported here)
        if not (isinstance(error, OSError) or _storage_error(error)):
            raise
        raise ChunkLocationError(f"chunks URL {url!r} cannot be reached{_endpoint_note()}: {_one_line(error)} "
                                 "(the endpoint and credentials come from AWS_ENDPOINT_URL and AWS_ACCESS_KEY_ID/"
                                 "AWS_SECRET_ACCESS_KEY or AWS_PROFILE)") from None


def _endpoint_note() -> str:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return f" at {endpoint}" if endpoint else ""


def _removed(remove, path) -> bool:
    """Whether `path` is gone after `remove(path)`: already gone counts; any other failure does not."""
    try:
        remove(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


class LocalFolder:
    """A chunk folder on this machine, read and written with `os` (the default)."""

    remote = False

    def __init__(self, path: Path):
        self.path = Path(path)
        self.url = str(self.path)

    def locate(self, name: str) -> Path:
        return self.path / name

    def names(self) -> list[str]:
        try:
            return os.listdir(self.path)
        except OSError:
            return []

    def exists(self, name: str) -> bool:
        return os.path.exists(self.path / name)

    def signature(self, name: str) -> tuple[int | None, int | None]:
        """(size, mtime in ns) of a file: what says it changed since it was found bad."""
        try:
            stat = os.stat(self.path / name)
        except OSError:
            return (None, None)
        return (stat.st_size, stat.st_mtime_ns)

    def size(self, name: str) -> int:
        try:
            return os.stat(self.path / name).st_size
        except OSError:
            return 0

    def read_text(self, name: str) -> str:
        return (self.path / name).read_text()

    def read_table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        with pq.ParquetFile(self.path / name) as parquet:  # one file: half the cost of read_table's datasets
            return parquet.read(columns=columns)

    def num_rows(self, name: str) -> int:
        with pq.ParquetFile(self.path / name) as parquet:
            return parquet.metadata.num_rows

    def write_table(self, name: str, data: pa.Table, **options) -> None:
        self._write_atomic(name, lambda tmp: pq.write_table(data, tmp, **options))

    def write_text(self, name: str, text: str) -> None:
        self._write_atomic(name, lambda tmp: tmp.write_text(text))

    def write_with(self, name: str, write: Callable[[object], None]) -> None:
        """Write a file with `write(sink)` (a path here), published atomically."""
        self._write_atomic(name, write)

    def _write_atomic(self, name: str, write: Callable[[Path], None]) -> None:
        path = self.path / name
        tmp = temporary_name(path)
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)  # atomic: readers see the whole file or nothing

    def makedirs(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def remove(self, name: str) -> bool:
        return _removed(os.unlink, self.path / name)

    def sync(self) -> None:
        """Make the renames durable (a power cut after a commit must not lose its files)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def __eq__(self, other) -> bool:
        return isinstance(other, LocalFolder) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)


class FsspecFolder:
    """A chunk folder behind an fsspec URL (`file://`, `memory://`, `s3://`, ...)."""

    remote = True

    def __init__(self, url: str):
        import fsspec.core
        from fsspec.implementations.local import LocalFileSystem

        self.url = str(url).rstrip("/")
        s3 = self.url.split("://", 1)[0] in ("s3", "s3a")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **(S3_OPTIONS if s3 else {}))
        if s3:
            self.fs.retries = S3_RETRIES  # an instance of its own (the options are part of fsspec's cache key)
        self.root = self.root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)  # has an atomic rename; else one PUT per file

    def locate(self, name: str) -> str:
        return f"{self.url}/{name}"

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _do(self, call: Callable, *args, **kwargs):
        """`call(*args)` on the filesystem, its client library's errors raised as StorageUnreachable."""
        try:
            return call(*args, **kwargs)
        except OSError:
            raise
        except Exception as error:  # noqa: BLE001 - botocore's and aiohttp's classes, not imported here
            if _storage_error(error):
                raise StorageUnreachable(_one_line(error)) from None
            raise

    def names(self) -> list[str]:
        try:
            self.fs.invalidate_cache(self.root)
            return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self._do(self.fs.ls, self.root, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def exists(self, name: str) -> bool:
        """Whether `name` is there; False also when the storage cannot be asked now (a later look finds it)."""
        try:
            self.fs.invalidate_cache(self.root)
            return bool(self._do(self.fs.exists, self._path(name)))
        except OSError:
            return False

    def signature(self, name: str) -> tuple[int | None, int | None]:
        try:
            info = self._do(self.fs.info, self._path(name))
        except (OSError, ValueError):
            return (None, None)
        stamp = info.get("mtime") or info.get("created") or info.get("LastModified") or info.get("updated")
        if hasattr(stamp, "timestamp"):
            stamp = stamp.timestamp()
        try:
            stamp = int(float(stamp) * 1e9) if stamp is not None else None
        except (TypeError, ValueError):
            stamp = None
        return (info.get("size"), stamp)

    def size(self, name: str) -> int:
        return self.signature(name)[0] or 0

    def read_text(self, name: str) -> str:
        return self._do(self.fs.cat_file, self._path(name)).decode()

    def read_table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        data = self._do(self.fs.cat_file, self._path(name))  # one GET, then parsed in memory
        with pq.ParquetFile(pa.BufferReader(data)) as parquet:
            return parquet.read(columns=columns)

    def num_rows(self, name: str) -> int:
        with pq.ParquetFile(pa.BufferReader(self._do(self.fs.cat_file, self._path(name)))) as parquet:
            return parquet.metadata.num_rows

    def write_table(self, name: str, data: pa.Table, **options) -> None:
        self.write_with(name, lambda sink: pq.write_table(data, sink, **options))

    def write_text(self, name: str, text: str) -> None:
        self._put(name, text.encode())

    def write_with(self, name: str, write: Callable[[object], None]) -> None:
        sink = pa.BufferOutputStream()
        write(sink)
        self._put(name, sink.getvalue().to_pybytes())

    def _put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        if not self.local:
            self._do(self.fs.pipe_file, path, data)  # one PUT: the whole object or nothing
            return
        tmp = self._path(temporary_name(Path(name)).name)
        self.fs.pipe_file(tmp, data)
        with open(tmp, "rb") as handle:  # a LocalFileSystem path is a path of this machine
            os.fsync(handle.fileno())
        self.fs.mv(tmp, path)  # a rename on one filesystem: atomic

    def makedirs(self) -> None:
        """A folder where the filesystem has folders; nothing on an object store, where a key needs
        none (and where s3fs's makedirs would create a missing bucket: a typo would go unseen)."""
        if self.local:
            self.fs.makedirs(self.root, exist_ok=True)

    def remove(self, name: str) -> bool:
        return _removed(lambda path: self._do(self.fs.rm_file, path), self._path(name))

    def remove_all(self) -> None:
        """Every file under this folder (a deleted run's chunks and files); gone already counts."""
        try:
            self._do(self.fs.rm, self.root, recursive=True)
        except FileNotFoundError:
            pass

    def sync(self) -> None:
        if self.local:
            LocalFolder(Path(self.root)).sync()

    def __eq__(self, other) -> bool:
        return isinstance(other, FsspecFolder) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)


ChunkFolder = LocalFolder | FsspecFolder


def folder_at(location: str | os.PathLike) -> ChunkFolder:
    """The chunk folder at a location: an fsspec URL, or a path of this machine."""
    location = str(location)
    return FsspecFolder(location) if _is_url(location) else LocalFolder(Path(location))


def recorded_location(meta: dict | None) -> str | None:
    """The chunk location a run's run.json records, if any."""
    value = (meta or {}).get(CHUNKS_URL_KEY) if isinstance(meta, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def chunk_folder(run_dir: Path, meta: dict | None = None) -> ChunkFolder:
    """Where the run in `run_dir` keeps its chunks: the location its run.json records, else
    `<run_dir>/chunks`. `meta` is run.json when the caller has read it already."""
    if meta is None:
        from agentrl.record.rundir import read_json

        meta = read_json(Path(run_dir) / "run.json")
    location = recorded_location(meta)
    return folder_at(location) if location else LocalFolder(Path(run_dir) / LOCAL_CHUNKS_DIR)
