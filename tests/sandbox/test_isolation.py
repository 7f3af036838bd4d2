"""Isolation (agentrl/sandbox/isolation.py and the stub's namespaces): a run has its own network
with only loopback, cannot read the home directories, the dashboard's files or the answer keys,
and leaves nothing in any world-writable directory.

Each test is the attack: the code under test tries to reach the dashboard on 127.0.0.1, the
internet, the runs directory, the home directory, the answer keys on disk, and to leave files
wherever the machine lets anyone write. Without root the same walls stand on user namespaces
where the kernel allows them (the last test runs the check as `nobody`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from agentrl.sandbox import SandboxLimits, run_tests
from agentrl.sandbox.bubblewrap import WEAKER_NOTE
from agentrl.sandbox.isolation import hidden_paths, isolation_plan, namespaces_available

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
ANSWER_KEY = REPO / "agentrl" / "tasks" / "coding" / "repos" / "slugify" / "keys" / "reference.py"
needs_namespaces = pytest.mark.skipif(not namespaces_available().available, reason="this kernel refuses namespaces here")


@pytest.fixture
def workspace(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "check.py").write_text("pass\n")
    return root


def probe(workspace, tmp_path, program: str, **kwargs) -> tuple[dict, object]:
    """Run `program` (which prints one JSON line last) in the sandbox; its findings and the result."""
    root = tmp_path / "copies"
    root.mkdir(exist_ok=True)
    root.chmod(0o711)
    result = run_tests(workspace, {"probe.py": textwrap.dedent(program)}, [PY, "probe.py"], ["check.py"],
                       SandboxLimits(timeout_s=30), temp_root=root, writable=["probe.py"], **kwargs)
    assert result.passed, result.output_tail
    return json.loads(result.output_tail.strip().splitlines()[-1]), result


@needs_namespaces
def test_a_run_has_only_loopback_and_reaches_nothing_outside(workspace, tmp_path):
    dashboard = socket.create_server(("127.0.0.1", 0))  # stands in for the dashboard on 127.0.0.1
    port = dashboard.getsockname()[1]
    try:
        found, result = probe(workspace, tmp_path, f"""
            import json, os, socket
            out = {{"devices": sorted(name for _, name in socket.if_nameindex())}}
            for name, address in [("dashboard", ("127.0.0.1", {port})), ("internet", ("1.1.1.1", 53))]:
                try:
                    socket.create_connection(address, timeout=2).close()
                    out[name] = "connected"
                except OSError as err:
                    out[name] = type(err).__name__
            server = socket.create_server(("127.0.0.1", 0))  # its own loopback works
            socket.create_connection(server.getsockname(), timeout=2).close()
            out["own loopback"] = "connected"
            print(json.dumps(out))
        """)
    finally:
        dashboard.close()
    assert found == {"devices": ["lo"], "dashboard": "ConnectionRefusedError", "internet": "OSError", "own loopback": "connected"}
    assert {"network", "mount", "ipc"} <= set(result.isolation)


@pytest.mark.skipif(not namespaces_available().pid, reason="this kernel refuses a PID namespace here")
def test_a_run_sees_only_its_own_processes_and_cannot_signal_the_trainer(workspace, tmp_path):
    found, result = probe(workspace, tmp_path, f"""
        import json, os, signal
        out = {{"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "me": os.getpid()}}
        try:
            os.kill({os.getpid()}, 0)
            out["trainer"] = "reachable"
        except OSError as err:
            out["trainer"] = type(err).__name__
        print(json.dumps(out))
    """)
    assert "pid" in result.isolation
    assert found["trainer"] == "ProcessLookupError", found
    assert found["me"] in found["pids"] and max(found["pids"]) < 100, found  # its init, the harness, the child: no other


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the seccomp filter is written for x86_64")
def test_system_calls_that_reach_beyond_the_run_fail_with_eperm(workspace, tmp_path):
    found, result = probe(workspace, tmp_path, """
        import ctypes, json, os
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        for name, call in [("unshare", lambda: libc.unshare(0x10000000)), ("ptrace", lambda: libc.ptrace(0, 0, 0, 0)),
                           ("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
                           ("keyctl", lambda: libc.syscall(250, 0, 0, 0, 0, 0))]:
            out[name] = os.strerror(ctypes.get_errno()) if call() != 0 else "allowed"
        out["getpid"] = os.getpid() > 0
        print(json.dumps(out))
    """)
    assert "seccomp" in result.isolation
    assert found == {"unshare": "Operation not permitted", "ptrace": "Operation not permitted",
                     "mount": "Operation not permitted", "keyctl": "Operation not permitted", "getpid": True}


@needs_namespaces
def test_without_bubblewrap_a_run_cannot_read_home_the_dashboards_files_or_the_answer_keys(workspace, tmp_path, monkeypatch):
    # the fallback where bwrap is missing: the stub's own mount namespace and its hide-list
    # (bubblewrap's allow-list: tests/sandbox/test_bubblewrap.py)
    runs = tmp_path / "dashboard-runs"
    runs.mkdir()
    (runs / "agentrl.duckdb").write_text("the dashboard's database")
    monkeypatch.setenv("AGENTRL_RUNS_DIR", str(runs))
    home = Path.home()
    found, result = probe(workspace, tmp_path, f"""
        import json, os
        out = {{}}
        for path in [{str(runs / "agentrl.duckdb")!r}, {str(ANSWER_KEY)!r}, {str(REPO / "README.md")!r}, "/etc/hostname"]:
            try:
                open(path).read()
                out[path] = "read"
            except OSError as err:
                out[path] = type(err).__name__
        for directory in ["/home", {str(home)!r}, {str(REPO)!r}]:
            try:
                out[directory] = sorted(os.listdir(directory))
            except OSError as err:
                out[directory] = type(err).__name__
        print(json.dumps(out))
    """, bubblewrap=False)
    assert "allow-list" not in result.isolation and result.note == WEAKER_NOTE
    assert found[str(runs / "agentrl.duckdb")] == "FileNotFoundError"
    assert found[str(ANSWER_KEY)] == "FileNotFoundError"
    assert found[str(REPO / "README.md")] == "FileNotFoundError"
    assert found["/etc/hostname"] == "read"  # the rest of the system stays as it was, read-only
    assert found["/home"] == []
    # what is left of the home directory is the way to the interpreter, nothing else
    assert all(str(Path(sys.base_prefix)).startswith(str(home / name)) for name in found[str(home)])


@needs_namespaces
def test_nothing_is_left_in_any_world_writable_directory(workspace, tmp_path):
    tag = f"agentrl-left-behind-{os.getpid()}"
    found, _ = probe(workspace, tmp_path, f"""
        import json, os, stat
        written = []
        for top in ["/tmp", "/var", "/dev", "/run", "/srv", "/opt", "/usr", "/etc", "/home", "/mnt", "/media", "/"]:
            for directory, dirs, _ in os.walk(top):
                if directory.count("/") > 3:
                    dirs[:] = []
                try:
                    if not os.stat(directory).st_mode & stat.S_IWOTH:
                        continue
                    path = os.path.join(directory, {tag!r})
                    with open(path, "w") as handle:
                        handle.write("left behind")
                    written.append(path)
                except OSError:
                    pass
        print(json.dumps({{"written": sorted(set(written))}}))
    """)
    assert "/tmp/" + tag in found["written"]  # it may write to its private /tmp ...
    for path in found["written"]:
        assert not os.path.exists(path), f"{path} survived the run"  # ... and nothing is left anywhere


def test_the_plan_hides_home_the_package_and_puts_back_the_interpreter(tmp_path):
    run_dir = tmp_path / "run-x"
    ops = isolation_plan(run_dir, run_dir / "workspace", [PY], read_only=[run_dir / "harness"])
    tmpfs = {op["path"]: op["rw"] for op in ops if op["op"] == "tmpfs"}
    assert tmpfs["/tmp"] is True and tmpfs.get("/var/tmp", True) is True
    hidden = {str(p) for p in hidden_paths()}
    assert str(REPO / "agentrl") in hidden or str(REPO) in hidden
    assert all(tmpfs[h] is False for h in hidden if h in tmpfs)
    binds = {op["path"]: op["rw"] for op in ops if op["op"] == "bind"}
    assert binds[str(run_dir.resolve())] is True and binds[str((run_dir / "harness").resolve())] is False
    real_prefix = Path(os.path.realpath(sys.base_prefix))
    if any(real_prefix.is_relative_to(h) for h in map(Path, hidden)):
        assert binds[str(real_prefix)] is False  # put back read-only


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user to test needs root")
def test_without_root_the_namespaces_still_hold(tmp_path):
    # As `nobody`, with the system's Python 3 (the one here lives under /root, closed to others) and
    # psutil from the project's environment; skipped where that cannot be put together.
    system_python = Path("/usr/bin/python3")
    site_packages = next((p for p in map(Path, sys.path) if (p / "psutil").is_dir()), None)
    check = subprocess.run([str(system_python), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True) \
        if system_python.exists() else None
    if check is None or check.stdout.strip() != str(sys.version_info[:2]) or site_packages is None or not shutil.which("setpriv"):
        pytest.skip("no system Python matching this one to run the check as an unprivileged user")
    scratch = Path(tempfile.mkdtemp(prefix="agentrl-nonroot-"))
    scratch.chmod(0o777)
    # `nobody` imports agentrl and psutil from copies: a checkout or virtualenv under a directory
    # closed to others (a `mktemp -d` clone) would not be importable, whatever the sandbox does.
    lib = scratch / "lib"
    skip = shutil.ignore_patterns("__pycache__", "tiny-*-lm")
    shutil.copytree(REPO / "agentrl", lib / "agentrl", ignore=skip)
    shutil.copytree(site_packages / "psutil", lib / "psutil", ignore=skip)
    for path in [lib, *lib.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    answer_key = lib / ANSWER_KEY.relative_to(REPO)  # the answer key of the package the sandbox runs from
    (scratch / "probe.py").write_text(textwrap.dedent(f"""
        import json, os, socket
        out = {{"uid": os.getuid(), "devices": sorted(name for _, name in socket.if_nameindex())}}
        for path in [{str(answer_key)!r}, "/root"]:
            try:
                out[path] = "read" if os.path.isfile(path) and open(path).read() else sorted(os.listdir(path))
            except OSError as err:
                out[path] = type(err).__name__
        try:
            open("/var/tmp/agentrl-nonroot-left", "w").write("x")
        except OSError:
            pass
        out["caps"] = int([line for line in open("/proc/self/status") if line.startswith("CapEff")][0].split()[1], 16)
        print(json.dumps(out))
    """))
    script = scratch / "check.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from agentrl.sandbox import SandboxLimits, run_tests
        from agentrl.sandbox.isolation import namespaces_available
        scratch = Path({str(scratch)!r})
        workspace = scratch / "repo"
        workspace.mkdir()
        (workspace / "check.py").write_text("pass\\n")
        result = run_tests(workspace, {{"probe.py": (scratch / "probe.py").read_text()}}, [sys.executable, "probe.py"],
                           ["check.py"], SandboxLimits(timeout_s=30), temp_root=scratch / "copies", writable=["probe.py"])
        print(json.dumps({{"available": namespaces_available().available, "isolation": result.isolation,
                          "reason": result.reason, "tail": result.output_tail}}))
    """))
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(system_python), str(script)],
                          capture_output=True, text=True, timeout=120, cwd=str(scratch),
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(lib), "HOME": str(scratch)})
    try:
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        if not report["available"]:
            pytest.skip("unprivileged user namespaces are not allowed here")
        assert report["reason"] == "tests passed", report
        assert [i for i in report["isolation"] if i not in ("pid", "seccomp", "allow-list")] == [
            "user namespace", "network", "mount", "ipc", "process boundary"]
        found = json.loads(report["tail"].strip().splitlines()[-1])
        assert found["uid"] == 65534 and found["devices"] == ["lo"] and found["caps"] == 0
        # hidden (an empty tmpfs) without bubblewrap; not in its allow-listed view at all with it
        assert found[str(answer_key)] == "FileNotFoundError" and found["/root"] in ([], "FileNotFoundError")
        assert not Path("/var/tmp/agentrl-nonroot-left").exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
