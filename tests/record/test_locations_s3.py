"""Chunks through the S3 protocol: moto's server on 127.0.0.1, reached by s3fs with the usual AWS
variables. A run writes its commits and run files to the bucket and nothing secret into any file;
a missing bucket, missing credentials and a refusing endpoint are one line each, before a run
folder is made; a path cut for 10 s mid-run loses nothing and takes nothing twice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from s3_endpoint import TEST_KEY_ID, TEST_SECRET, TcpProxy, aws_env, child_env, endpoint, free_port, moto_url  # noqa: F401

import agentrl
from agentrl.record.locations import ChunkLocationError, check_chunks_url
from agentrl.store.db import connect
from agentrl.store.ingest import ingest_once

REPO = Path(__file__).resolve().parents[2]


def bucket_keys(endpoint) -> list[str]:
    import boto3

    listing = boto3.client("s3", endpoint_url=endpoint.url).list_objects_v2(Bucket=endpoint.bucket)
    return sorted(item["Key"] for item in listing.get("Contents", []))


def bucket_text(endpoint, key: str) -> str:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint.url).get_object(Bucket=endpoint.bucket, Key=key)["Body"].read().decode()


def counts(runs_dir: Path, run_id: str) -> dict[str, int]:
    con = connect(runs_dir)
    try:
        return {table: con.execute(f"SELECT count(*), count(DISTINCT (step, traj_idx)) FROM {table} WHERE run_id = ?"
                                   if table == "trajectories" else f"SELECT count(*), count(DISTINCT step) FROM {table} "
                                   "WHERE run_id = ?", [run_id]).fetchone()
                for table in ("steps", "trajectories")}
    finally:
        con.close()


def log_steps(run, steps: int, per_step: int, first: int = 1) -> None:
    for step in range(first, first + steps):
        run.log_trajectories(step, [{"traj_idx": i, "task_id": f"t{i}", "reward": float(i % 2)} for i in range(per_step)])
        run.log_step(step, {"loss": 1.0 / step})


def test_a_run_writes_commits_and_run_files_to_the_bucket_and_no_secret_anywhere(endpoint, tmp_path):
    url = f"s3://{endpoint.bucket}/runs"
    run = agentrl.init(name="s3-run", config={"lr": 0.1}, runs_dir=tmp_path / "a", total_steps=3, chunks_url=url, flush_interval=0.2)
    log_steps(run, 3, 4)
    run.finish()

    keys = bucket_keys(endpoint)
    prefix = f"runs/{run.run_id}/"
    assert f"{prefix}run.json" in keys and f"{prefix}status.json" in keys
    assert any(key.endswith(".commit") for key in keys) and any(key.endswith(".trajectories.parquet") for key in keys)
    assert json.loads(bucket_text(endpoint, f"{prefix}status.json"))["status"] == "succeeded"
    assert json.loads(bucket_text(endpoint, f"{prefix}run.json"))["chunks_url"] == f"{url}/{run.run_id}"
    assert ingest_once(tmp_path / "a").rows > 0
    assert counts(tmp_path / "a", run.run_id) == {"steps": (3, 3), "trajectories": (12, 12)}

    written = [p.read_text(errors="replace") for p in (tmp_path / "a" / run.run_id).iterdir() if p.is_file()]
    written += [bucket_text(endpoint, key) for key in keys if key.endswith((".json", ".commit"))]
    for text in written:
        for secret in (TEST_SECRET, TEST_KEY_ID, endpoint.url, "127.0.0.1"):
            assert secret not in text


def test_a_bucket_that_does_not_exist_is_refused_in_one_line_and_never_created(endpoint, tmp_path):
    missing = f"{endpoint.bucket}-typo"
    with pytest.raises(ChunkLocationError, match=f"bucket '{missing}' does not exist.*never creates one") as caught:
        agentrl.init(name="typo", runs_dir=tmp_path / "a", chunks_url=f"s3://{missing}/runs")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())  # no run folder was made
    import boto3

    assert missing not in [b["Name"] for b in boto3.client("s3", endpoint_url=endpoint.url).list_buckets()["Buckets"]]


def test_an_endpoint_that_refuses_and_missing_credentials_are_one_line(endpoint, monkeypatch):
    import s3fs

    url = f"s3://{endpoint.bucket}/runs"
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nobody listens there
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(ChunkLocationError, match="cannot be reached") as refused:
        check_chunks_url(url, reach=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint.url)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(ChunkLocationError, match="cannot be reached.*credentials") as no_credentials:
        check_chunks_url(url, reach=True)
    for error in (refused.value, no_credentials.value):
        assert "\n" not in str(error) and "AWS_ENDPOINT_URL" in str(error)


@pytest.mark.slow
def test_train_says_each_storage_refusal_in_one_line_before_a_run_folder_is_made(endpoint, tmp_path):
    cases = {
        "no credentials": (aws_env(endpoint.url, tmp_path, credentials=False), endpoint.bucket, "credentials"),
        "refused": (aws_env(f"http://127.0.0.1:{free_port()}", tmp_path), endpoint.bucket, "cannot be reached"),
        "no bucket": (aws_env(endpoint.url, tmp_path), f"{endpoint.bucket}-typo", "does not exist"),
    }
    for case, (env, bucket, said) in cases.items():
        runs_dir = tmp_path / case.replace(" ", "-")
        done = subprocess.run([sys.executable, "-m", "agentrl", "train", "--preset", "refund-outcome", "--runs-dir",
                               str(runs_dir), "--chunks-url", f"s3://{bucket}/runs"], cwd=REPO, env=child_env(env),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (case, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: chunks URL") and said in lines[0], (case, done.stderr)
        assert not runs_dir.exists() or not [p for p in runs_dir.iterdir() if p.is_dir()], case


WRITER = textwrap.dedent("""
    import sys, time
    import agentrl
    runs_dir, url, steps, per_step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    run = agentrl.init(name="cut", runs_dir=runs_dir, total_steps=steps, chunks_url=url, flush_interval=0.2)
    print("RUN", run.run_id, flush=True)
    for step in range(1, steps + 1):
        run.log_trajectories(step, [{"traj_idx": i, "task_id": f"t{i}", "reward": 1.0} for i in range(per_step)])
        run.log_step(step, {"loss": 1.0})
        time.sleep(0.1)
    run.finish()
    print("DONE", flush=True)
""")


@pytest.mark.slow
def test_a_path_cut_for_ten_seconds_mid_run_loses_nothing_and_takes_nothing_twice(endpoint, tmp_path):
    proxy = TcpProxy(int(endpoint.url.rsplit(":", 1)[1]))
    proxy.restore()
    steps, per_step = 200, 8  # about 20 s of steps: the cut falls in the middle
    runs_dir = tmp_path / "a"
    url = f"s3://{endpoint.bucket}/runs"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(runs_dir), url, str(steps), str(per_step)], cwd=REPO,
                              env=child_env(aws_env(proxy.url, tmp_path)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        run_id = writer.stdout.readline().split()[1]
        status_path = runs_dir / run_id / "status.json"
        head = tmp_path / "head"
        head.mkdir()
        deadline = time.monotonic() + 60
        while ingest_once(head, chunks_url=url).rows == 0:  # the head takes commits while the run goes on
            assert time.monotonic() < deadline and writer.poll() is None, "no commit reached the bucket"
            time.sleep(0.3)
        proxy.cut()
        cut_at = time.monotonic()
        said = None
        # Ten seconds, and on a loaded machine until the run has said so (a first failing request
        # can take longer than that to give up: the fresh-clone suite met one)
        while time.monotonic() - cut_at < 10 or (not said and time.monotonic() - cut_at < 40):
            ingest_once(head, chunks_url=url)  # the head sees what landed before the cut, and no more
            said = said or json.loads(status_path.read_text()).get("waiting_for_storage")
            time.sleep(0.5)
        proxy.restore()
        assert said and said.startswith(f"waiting for storage at {url}/{run_id}"), said
        output, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0, output
    finally:
        if writer.poll() is None:
            writer.kill()
        proxy.cut()
    assert f"agentrl: run {run_id} is waiting for storage" in output and "answers again" in output
    status = json.loads(status_path.read_text())
    assert status["status"] == "succeeded" and status.get("waiting_for_storage") is None
    for _ in range(3):
        ingest_once(head, chunks_url=url)
    ingest_once(runs_dir)  # the writer's own store, from its own folder
    expected = {"steps": (steps, steps), "trajectories": (steps * per_step, steps * per_step)}
    assert counts(head, run_id) == expected
    assert counts(runs_dir, run_id) == expected
