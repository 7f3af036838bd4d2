"""bubblewrap's allow-listed view (agentrl/sandbox/bubblewrap.py): a run sees the interpreter, the
system's libraries and its own directory, nothing else.

The workspace is user-shaped (tests that import the solution, under the script, unittest and
pytest runners). Outside it, as on a real machine, lie a secret file and another checkout of a
package holding the answer key; the attack reads them to pass, and scores 0 under every runner,
while the honest fix still scores full. One probe also looks for the trainer in /proc, signals
it, and tries the network; and the fallback (no bwrap) says its isolation is weaker.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from agentrl.sandbox import SandboxLimits, run_tests
from agentrl.sandbox.bubblewrap import WEAKER_NOTE, bubblewrap_available, bubblewrap_config, bwrap_command
from agentrl.sandbox.isolation import namespaces_available

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(timeout_s=60)
pytestmark = pytest.mark.skipif(not (namespaces_available().available and bubblewrap_available().available),
                                reason="bubblewrap cannot run here (scripts/ensure-bwrap.sh installs it)")

HONEST = "def area(width, height):\n    return width * height\n"
BUGGY = "def area(width, height):\n    return width + height\n"
SUITES = {
    "check.py": "from geometry import area\nassert area(3, 4) == 12\nassert area(2, 5) == 10\n",
    "tests/test_unittest.py": textwrap.dedent("""
        import unittest
        from geometry import area

        class T(unittest.TestCase):
            def test_area(self):
                self.assertEqual(area(3, 4), 12)
                self.assertEqual(area(2, 5), 10)
    """),
    "tests/test_pytest.py": "from geometry import area\n\n\ndef test_area():\n    assert area(3, 4) == 12\n    assert area(2, 5) == 10\n",
}
COMMANDS = {
    "script": [PY, "check.py"],
    "unittest": [PY, "-m", "unittest", "discover", "-s", "tests", "-p", "test_unittest.py"],
    "pytest": [PY, "-m", "pytest", "-q", "tests/test_pytest.py"],
}


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """A workspace, and beside it what a machine holds that no run may read: a secret, and another
    checkout of a package whose answer key is the honest fix, world-readable as checkouts are. In
    /srv where this user may write there (the tmpfs over /tmp would hide them from any run anyway)."""
    root = Path(tempfile.mkdtemp(prefix="agentrl-machine-", dir="/srv")) if os.access("/srv", os.W_OK) \
        else tmp_path_factory.mktemp("machine")
    root.chmod(0o755)
    workspace = root / "repo"
    for path, content in {**SUITES, "geometry.py": BUGGY}.items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(content)
    secret = root / "secrets" / "token.txt"
    secret.parent.mkdir()
    secret.write_text("s3cret-token")
    key = root / "other-checkout" / "mypkg" / "keys" / "geometry.py"
    key.parent.mkdir(parents=True)
    key.write_text(HONEST)
    copies = tmp_path_factory.mktemp("copies")
    yield {"workspace": workspace, "secret": secret, "key": key, "copies": copies}
    shutil.rmtree(root, ignore_errors=True)


def run(machine, files, runner, **kwargs):
    return run_tests(machine["workspace"], files, COMMANDS[runner], ["check.py", "tests"], LIMITS,
                     temp_root=machine["copies"], writable=["geometry.py"], **kwargs)


def thief(machine) -> str:
    """The buggy solution, unless the answer key or the secret can be read: then the honest one."""
    return BUGGY.replace("def area(", "def _buggy(") + textwrap.dedent(f"""
        _found = {{}}
        for _path in [{str(machine["key"])!r}, {str(machine["secret"])!r}]:
            try:
                _text = open(_path).read()
                print("READ", _path)
                exec(_text if "def area" in _text else {HONEST!r}, _found)
            except OSError:
                pass


        def area(width, height):
            return _found["area"](width, height) if "area" in _found else _buggy(width, height)
    """)


@pytest.mark.parametrize("runner", sorted(COMMANDS))
def test_a_file_outside_the_allow_list_reads_as_nothing_and_scores_0(machine, runner):
    result = run(machine, {"geometry.py": thief(machine)}, runner)
    assert "allow-list" in result.isolation and result.note == ""
    assert not result.passed and result.detector == "tests failed", result.reason
    assert "READ" not in result.output_tail


@pytest.mark.parametrize("runner", sorted(COMMANDS))
def test_the_honest_fix_scores_full_under_every_runner(machine, runner):
    result = run(machine, {"geometry.py": HONEST}, runner)
    assert result.passed, result.output_tail
    assert {"allow-list", "pid", "network", "seccomp", "process boundary"} <= set(result.isolation)


def test_the_same_attack_reads_the_files_without_bubblewrap_and_the_result_says_it_is_weaker(machine):
    # the fallback's hide-list covers home, this checkout and the runs: other checkouts stay readable
    result = run(machine, {"geometry.py": thief(machine)}, "script", bubblewrap=False)
    assert "allow-list" not in result.isolation and result.note == WEAKER_NOTE
    if not str(machine["key"]).startswith("/tmp/"):  # where the fallback's private /tmp would not hide it anyway
        assert "READ " + str(machine["key"]) in result.output_tail and result.passed


def test_a_run_sees_neither_the_trainer_nor_the_network_nor_the_machines_files(machine):
    listener = socket.create_server(("127.0.0.1", 0))  # stands in for the dashboard
    probe = textwrap.dedent(f"""
        import getpass, json, multiprocessing, os, socket
        multiprocessing.Lock()  # a semaphore in its own /dev/shm
        out = {{"user": getpass.getuser(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "trainer_in_proc": os.path.exists("/proc/{os.getpid()}"),
               "devices": sorted(name for _, name in socket.if_nameindex()), "root": sorted(os.listdir("/")),
               "passwd": sorted(line.split(":")[0] for line in open("/etc/passwd"))}}
        try:
            os.kill({os.getpid()}, 0)
            out["signal"] = "delivered"
        except OSError as err:
            out["signal"] = type(err).__name__
        try:
            socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), timeout=2).close()
            out["dashboard"] = "connected"
        except OSError as err:
            out["dashboard"] = type(err).__name__
        for path in ["/mnt", "/srv", "/home", "/etc/hostname", "/etc/shadow", {str(REPO / "README.md")!r}, {str(machine["secret"].parent)!r}]:
            out[path] = os.path.exists(path)
        print(json.dumps(out))
    """)
    try:
        result = run_tests(machine["workspace"], {"probe.py": probe}, [PY, "probe.py"], ["check.py"], LIMITS,
                           temp_root=machine["copies"], writable=["probe.py"])
    finally:
        listener.close()
    assert result.passed, result.output_tail
    found = json.loads(result.output_tail.strip().splitlines()[-1])
    assert found["trainer_in_proc"] is False and found["signal"] == "ProcessLookupError" and max(found["pids"]) < 20
    assert found["devices"] == ["lo"] and found["dashboard"] == "ConnectionRefusedError"
    hidden = ["/mnt", "/srv", "/home", "/etc/hostname", "/etc/shadow", str(REPO / "README.md"), str(machine["secret"].parent)]
    assert {path: found[path] for path in hidden} == dict.fromkeys(hidden, False)
    assert set(found["root"]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", "var",
                                  *[Path(p).parts[1] for p in (sys.base_prefix, sys.prefix, machine["copies"])]}
    assert found["user"] == ("sandbox" if os.geteuid() == 0 else getpass.getuser())
    assert set(found["passwd"]) <= {"root", "nobody", "sandbox", *([] if os.geteuid() == 0 else [os.environ.get("USER", "")])}


def test_the_view_recreates_links_on_the_way_and_opens_closed_parents(tmp_path):
    # /root is 0700 on a host where the interpreter lives under /root/.pyenv: the view's parents are 0755
    target = tmp_path / "real" / "venv"
    (target / "answers").mkdir(parents=True)
    (tmp_path / "link").symlink_to(target)
    passwd, group = tmp_path / "passwd", tmp_path / "group"
    command = bwrap_command(tmp_path / "run-x", tmp_path / "run-x", [str(tmp_path / "link" / "python")], as_root=True,
                            switch_user=True, identity=(passwd, group), hide=[target / "answers"])
    text = " ".join(command)
    assert text.index(f"--tmpfs {target / 'answers'}") > text.index(f"--ro-bind {target}")  # hidden inside what is bound
    assert f"--symlink {target} {tmp_path / 'link'}" in text and f"--ro-bind {target} {target}" in text
    assert f"--perms 0755 --dir {tmp_path}" in text
    assert "--unshare-user" not in command and "--unshare-net" in command and "--unshare-pid" in command
    assert command[command.index("--cap-drop") + 1] == "ALL" and command[-1] == "--"


def test_a_view_bubblewrap_cannot_build_is_a_sandbox_setup_failure_in_one_line(machine, monkeypatch):
    from agentrl.sandbox import runner

    def broken(*args, **kwargs):
        config = bubblewrap_config(*args, **kwargs)
        command = config["command"]
        config["command"] = [*command[:-1], "--ro-bind", "/nonexistent-agentrl-source", "/x", "--"]
        return config

    monkeypatch.setattr(runner, "bubblewrap_config", broken)
    result = run(machine, {"geometry.py": HONEST}, "script")
    assert not result.passed and result.detector == "sandbox setup", result.reason
    assert "bubblewrap could not set the run up" in result.output_tail


def test_a_command_that_is_not_python_gets_the_same_view(machine):
    # `/bin/sh` lives in /bin: its installation is not / (which would put the whole machine back)
    outside = [str(machine["secret"]), "/etc/hostname", str(REPO / "README.md")]
    script = " && ".join(f"test ! -e {path}" for path in outside) + " && test -e /etc/ld.so.cache"
    result = run_tests(machine["workspace"], {}, ["/bin/sh", "-c", script], ["check.py"], LIMITS, temp_root=machine["copies"])
    assert result.passed and "allow-list" in result.isolation, result.output_tail
    assert "--ro-bind / /" not in " ".join(bwrap_command(machine["copies"], machine["copies"], ["/bin/sh"], as_root=True,
                                                          switch_user=True, identity=(machine["secret"],) * 2))
