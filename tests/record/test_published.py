"""A head that shares nothing with the writers but the chunks URL: runs publish run.json and
status.json beside their chunks, a head's ingest copies them into its own (empty) runs directory
and takes every row, and a cancel and a delete from the head reach the run through the URL."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from s3_endpoint import aws_env, child_env, endpoint, moto_url  # noqa: F401

import agentrl
from agentrl.launcher import Launcher
from agentrl.record.published import PUBLISHED_KEY
from agentrl.store.curation import delete_run
from agentrl.store.db import connect
from agentrl.store.ingest import ingest_once

REPO = Path(__file__).resolve().parents[2]


def store_counts(runs_dir: Path) -> dict[str, object]:
    con = connect(runs_dir)
    try:
        return {"runs": con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall(),
                "steps": con.execute("SELECT count(*) FROM steps").fetchone()[0],
                "trajectories": con.execute("SELECT count(*) FROM trajectories").fetchone()[0],
                "distinct trajectories": con.execute("SELECT count(DISTINCT (run_id, step, traj_idx)) FROM trajectories")
                .fetchone()[0]}
    finally:
        con.close()


def test_a_head_copies_a_run_published_under_the_url_and_takes_every_row(tmp_path):
    url = f"memory://agentrl-{secrets.token_hex(4)}/runs"  # one process: the writer and the head share it
    run = agentrl.init("elsewhere", runs_dir=tmp_path / "writer", total_steps=4, chunks_url=url, flush_interval=0.2)
    for step in range(1, 5):
        run.log_trajectories(step, [{"traj_idx": i, "task_id": "t", "reward": 1.0} for i in range(5)])
        run.log_step(step, {"loss": 0.5})
    run.finish()

    head = tmp_path / "head"
    head.mkdir()
    report = ingest_once(head, chunks_url=url)
    assert report.published == 1
    copy = json.loads((head / run.run_id / "run.json").read_text())
    assert copy[PUBLISHED_KEY] == url and copy["chunks_url"] == f"{url}/{run.run_id}"
    assert store_counts(head) == {"runs": [(run.run_id, "succeeded")], "steps": 4, "trajectories": 20,
                                  "distinct trajectories": 20}
    assert ingest_once(head, chunks_url=url).rows == 0  # nothing taken twice

    # The writer's own runs directory, ingested with the same URL: its own folder is never replaced by a copy.
    ingest_once(tmp_path / "writer", chunks_url=url)
    assert PUBLISHED_KEY not in json.loads((tmp_path / "writer" / run.run_id / "run.json").read_text())
    assert store_counts(tmp_path / "writer")["trajectories"] == 20


def test_a_name_under_the_url_that_is_no_published_run_is_left_alone(tmp_path):
    import fsspec

    url = f"memory://agentrl-{secrets.token_hex(4)}/runs"
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"{url}/not-a-run/readme.txt", b"hello")
    fs.pipe_file(f"{url}/bad-run/run.json", b"{not json")
    fs.pipe_file(f"{url}/bad-run/status.json", b"{}")
    head = tmp_path / "head"
    head.mkdir()
    ingest_once(head, chunks_url=url)
    assert sorted(p.name for p in head.iterdir() if p.is_dir()) == []


@pytest.mark.slow
def test_train_on_one_machine_and_ingest_on_a_head_with_an_empty_runs_dir_give_the_same_rows(endpoint, tmp_path):
    url = f"s3://{endpoint.bucket}/runs"
    env = child_env(aws_env(endpoint.url, tmp_path))
    trained = subprocess.run([sys.executable, "-m", "agentrl", "train", "--preset", "refund-outcome", "--quiet",
                              "--runs-dir", str(tmp_path / "a"), "--chunks-url", url], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    head = tmp_path / "b"
    head.mkdir()
    ingested = subprocess.run([sys.executable, "-m", "agentrl", "ingest", "--runs-dir", str(head), "--chunks-url", url],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert ingested.returncode == 0, ingested.stderr
    assert "1 runs published under" in ingested.stdout
    run_id = next(p.name for p in (tmp_path / "a").iterdir() if (p / "run.json").is_file())
    expected = {"runs": [(run_id, "succeeded")], "steps": 30, "trajectories": 960, "distinct trajectories": 960}
    assert store_counts(head) == expected  # refund-outcome: 30 steps of 32 trajectories
    assert store_counts(tmp_path / "a") == expected  # the writer's own ingest, from the same chunks


STOPPABLE = textwrap.dedent("""
    import sys, time
    import agentrl
    run = agentrl.init("stoppable", runs_dir=sys.argv[1], chunks_url=sys.argv[2], flush_interval=0.2)
    print("RUN", run.run_id, flush=True)
    step = 0
    deadline = time.monotonic() + 90
    while not run.stop_requested() and time.monotonic() < deadline:
        step += 1
        run.log_trajectories(step, [{"traj_idx": 0, "task_id": "t", "reward": 1.0}])
        run.log_step(step, {"loss": 1.0})
        time.sleep(0.1)
    run.finish("cancelled" if run.stop_requested() else "failed", error="stopped from the head")
""")


@pytest.mark.slow
def test_cancel_and_delete_on_the_head_reach_a_run_written_elsewhere(endpoint, tmp_path):
    import boto3

    url = f"s3://{endpoint.bucket}/runs"
    writer = subprocess.Popen([sys.executable, "-c", STOPPABLE, str(tmp_path / "a"), url], cwd=REPO,
                              env=child_env(aws_env(endpoint.url, tmp_path)), stdout=subprocess.PIPE, text=True)
    try:
        run_id = writer.stdout.readline().split()[1]
        head = tmp_path / "b"
        head.mkdir()
        deadline = time.monotonic() + 60
        while not (head / run_id / "run.json").is_file():
            assert time.monotonic() < deadline, "the head never saw the run"
            ingest_once(head, chunks_url=url)
            time.sleep(0.3)
        assert Launcher(head).reconcile() == []  # a run of another machine: not judged dead here
        Launcher(head).cancel(run_id)
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    ingest_once(head, chunks_url=url)
    assert store_counts(head)["runs"] == [(run_id, "cancelled")]
    ingest_once(tmp_path / "a")  # the writer's own store: the head took exactly what the run wrote
    rows = store_counts(head)["trajectories"]
    assert rows > 0 and rows == store_counts(tmp_path / "a")["trajectories"] == store_counts(head)["distinct trajectories"]

    con = connect(head)
    try:
        delete_run(con, head, run_id)
    finally:
        con.close()
    listing = boto3.client("s3", endpoint_url=endpoint.url).list_objects_v2(Bucket=endpoint.bucket, Prefix=f"runs/{run_id}/")
    assert listing.get("KeyCount", 0) == 0 and not (head / run_id).exists()
    ingest_once(head, chunks_url=url)
    assert not (head / run_id).exists() and store_counts(head)["runs"] == []
