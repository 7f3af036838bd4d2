"""An S3 endpoint on 127.0.0.1 for tests: moto's server (data in memory), a bucket per test, and a
TCP proxy in front of it whose path can be cut and restored (the server itself must keep running,
or its data would go). Nothing here talks to anything but 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

TEST_KEY_ID = "agentrl-test-key-id"
TEST_SECRET = "agentrl-test-secret-d41d8cd98f00b204"  # must never appear in a run file


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Endpoint:
    url: str  # http://127.0.0.1:PORT of the moto server
    bucket: str  # made for this test

    def env(self, endpoint_url: str | None = None, home: Path | None = None) -> dict[str, str]:
        """The variables a process needs to reach the bucket (through `endpoint_url` when given)."""
        return aws_env(endpoint_url or self.url, home)


def aws_env(endpoint_url: str | None, home: Path | None = None, credentials: bool = True) -> dict[str, str]:
    """AWS variables for a child process: this endpoint, test credentials (or none), no config files,
    and no instance-metadata lookups (which would leave 127.0.0.1)."""
    nowhere = str((home or Path("/nonexistent")) / "no-aws-config")
    env = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": nowhere,
           "AWS_SHARED_CREDENTIALS_FILE": nowhere}
    if endpoint_url:
        env["AWS_ENDPOINT_URL"] = endpoint_url
    if credentials:
        env.update(AWS_ACCESS_KEY_ID=TEST_KEY_ID, AWS_SECRET_ACCESS_KEY=TEST_SECRET)
    return env


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without any AWS variable of its own, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "AGENTRL_CHUNKS_URL"}
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def moto_url():
    pytest.importorskip("s3fs", reason="s3fs is installed by requirements-s3.txt (make test)")
    server_module = pytest.importorskip("moto.server", reason="moto[server] is installed by requirements-s3.txt")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def endpoint(moto_url, monkeypatch, tmp_path):
    """A fresh bucket on the moto server; this process's AWS variables point at it."""
    import boto3
    import s3fs

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in aws_env(moto_url, tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AGENTRL_CHUNKS_URL", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()  # an instance made under other variables keeps its endpoint
    bucket = f"agentrl-{secrets.token_hex(4)}"
    boto3.client("s3", endpoint_url=moto_url).create_bucket(Bucket=bucket)
    yield Endpoint(moto_url, bucket)
    s3fs.S3FileSystem.clear_instance_cache()


class TcpProxy:
    """127.0.0.1:port -> target port, byte for byte; `cut()` closes the listener and every open
    connection (a client then gets refused), `restore()` listens on the same port again."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            connections, self._open = self._open, set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
