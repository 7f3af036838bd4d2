"""agentrl/record/runfiles.py: a damaged run file is one RunFileError naming its path, never a crash.

The cases are the issue's (status.json not UTF-8, a pid of "abc" or -5, a bad create_time; run.json
a list, not UTF-8, total_steps "lots"), then hypothesis over arbitrary bytes and JSON values.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.record.rundir import RunDir, create_run_dir
from agentrl.record.runfiles import RunFileError, read_launch, read_meta, read_status

RUN_ID = "20260101-000000-files-0000"

BAD_STATUS = {
    "not-utf8": (b'\xff\xfe{"status": "running"}', "is not UTF-8"),
    "pid-text": (b'{"status": "running", "pid": "abc"}', "'pid' must be a process id"),
    "pid-negative": (b'{"status": "running", "pid": -5}', "'pid' must be a process id"),
    "pid-bool": (b'{"status": "running", "pid": true}', "'pid' must be a process id"),
    "pid-huge": (b'{"status": "running", "pid": 99999999999999999999}', "'pid' must be a process id"),
    "create-time-text": (b'{"status": "running", "pid": 1, "create_time": "yesterday"}', "'create_time'"),
    "create-time-nan": (b'{"status": "running", "pid": 1, "create_time": NaN}', "NaN is not a JSON number"),
    "status-unknown": (b'{"status": "exploded"}', "'status' must be one of"),
    "status-missing": (b'{"step": 3}', "'status' must be one of"),
    "step-negative": (b'{"status": "running", "step": -1}', "'step'"),
    "ended-at-garbage": (b'{"status": "failed", "ended_at": "soon"}', "'ended_at' must be an ISO timestamp"),
    "list": (b"[1, 2]", "must hold a JSON object, not a list"),
    "truncated": (b'{"status": "runn', "is not valid JSON"),
    "empty": (b"", "is not valid JSON"),
}

BAD_META = {
    "list": (b"[1,2]", "must hold a JSON object, not a list"),
    "not-utf8": (b"\xff\xfe", "is not UTF-8"),
    "total-steps-text": (b'{"run_id": "x", "total_steps": "lots"}', "'total_steps' must be a non-negative integer"),
    "config-list": (b'{"config": [1]}', "'config' must be an object"),
    "created-at-number": (b'{"created_at": 5}', "'created_at' must be an ISO timestamp"),
    "schema-text": (b'{"record_schema_version": "2"}', "'record_schema_version'"),
}


@pytest.fixture
def run(tmp_path) -> RunDir:
    return create_run_dir(tmp_path, RUN_ID, {"run_id": RUN_ID, "name": "files", "config": {}})


@pytest.mark.parametrize("case", list(BAD_STATUS))
def test_a_damaged_status_json_is_one_error_naming_its_path(run, case):
    content, expected = BAD_STATUS[case]
    run.status_path.write_bytes(content)
    with pytest.raises(RunFileError) as caught:
        read_status(run)
    message = str(caught.value)
    assert message.startswith(str(run.status_path)) and expected in message
    assert "\n" not in message and caught.value.path == run.status_path


@pytest.mark.parametrize("case", list(BAD_META))
def test_a_damaged_run_json_is_one_error_naming_its_path(run, case):
    content, expected = BAD_META[case]
    run.meta_path.write_bytes(content)
    with pytest.raises(RunFileError) as caught:
        read_meta(run)
    assert str(caught.value).startswith(str(run.meta_path)) and expected in str(caught.value)


def test_what_the_writers_write_reads_back(run):
    assert read_meta(run)["run_id"] == RUN_ID
    assert read_status(run) == {"status": "queued", "step": 0}
    run.update_status(status="running", pid=1234, create_time=1.7e9, started_at="2026-01-01T00:00:00.000000", step=4)
    assert read_status(run)["pid"] == 1234


def test_missing_files_read_as_none_and_a_directory_is_named(run):
    run.status_path.unlink()
    assert read_status(run) is None and read_launch(run) is None
    run.status_path.mkdir()
    with pytest.raises(RunFileError, match="is a directory"):
        read_status(run)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=12,
)
STATUS_LIKE = st.fixed_dictionaries({}, optional={
    "status": st.sampled_from(["queued", "running", "succeeded", "failed", "cancelled", "?"]) | JSON,
    "pid": JSON, "create_time": JSON, "step": JSON, "total_steps": JSON, "exit_code": JSON,
    "started_at": JSON, "ended_at": JSON, "error": JSON,
})


def _read_or_refuse(reader, run, content: bytes):
    path = run.status_path if reader is read_status else run.meta_path if reader is read_meta else run.root / "launch.json"
    path.write_bytes(content)
    try:
        value = reader(run)
    except RunFileError as error:
        assert str(error).startswith(str(path)) and "\n" not in str(error)
        return None
    assert isinstance(value, dict)
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=64) | JSON.map(lambda v: json.dumps(v).encode()) | STATUS_LIKE.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_in_any_run_file_read_as_a_checked_object_or_one_named_error(run, content):
    for reader in (read_status, read_meta, read_launch):
        value = _read_or_refuse(reader, run, content)
        if value is not None and reader is read_status:
            # What passes is what the store and the launcher can use as it is.
            assert value["status"] in ("queued", "running", "succeeded", "failed", "cancelled")
            pid = value.get("pid")
            assert pid is None or (type(pid) is int and 0 < pid < 2**31)


def test_threads_updating_the_status_at_once_lose_no_field_and_raise_nothing(run):
    """A run's flusher thread writes its step while the main thread writes `running`: both land.

    Seen in CI: one temporary name for the process made the second rename fail, and the
    read-change-write could put back a status the other thread had just replaced.
    """
    import threading

    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def update(worker: int) -> None:
        start.wait()
        try:
            for round_ in range(40):
                run.update_status(**{f"field_{worker}": round_})
                run.update_meta(**{f"field_{worker}": round_})
        except BaseException as error:  # noqa: BLE001 - the test reports every thread's failure
            errors.append(error)

    threads = [threading.Thread(target=update, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for written in (run.status(), run.meta()):
        assert {f"field_{worker}": 39 for worker in range(8)}.items() <= written.items()
    assert not [path.name for path in run.root.iterdir() if path.name.endswith(".tmp")]


def test_a_status_update_made_mid_update_on_the_same_thread_does_not_wait_for_itself(run):
    """A user's signal handler that finishes the run runs on the thread it interrupted, perhaps
    inside an update of status.json: it must not wait for the lock that thread holds."""
    import threading

    from agentrl.record.rundir import _update_lock

    def interrupted_update() -> None:
        with _update_lock(run.status_path):  # what the interrupted update holds
            run.update_status(status="cancelled")  # the handler's own update, on the same thread

    worker = threading.Thread(target=interrupted_update, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the update waited for a lock its own thread held"
    assert run.status()["status"] == "cancelled"
