"""What a run may see when bubblewrap is here: an allow-list of the file system, not the whole of
it minus a hide-list.

Sandbox runner -> **bubblewrap** -> stub (whose worker execs `bwrap`, which execs the stub's copy
inside the view, which applies the limits, the user switch and the seccomp filter and execs the
command). bubblewrap (Debian's `bubblewrap`, `/usr/bin/bwrap`; what Flatpak and Anthropic's
sandbox-runtime use on Linux) builds the view from nothing: an empty root with, read-only, the
system's programs and libraries (`/usr` and the merged-/usr links), a few files of `/etc`
(`ETC_FILES`, and a `passwd` and `group` naming only root, the run's user and nobody), the
interpreters the run needs (prefix, virtual environment, site-packages); its own directory
writable, the protected paths and the harness read-only on top; a private `/tmp`, `/var/tmp`,
`/dev` and `/proc`. Anything else (other checkouts of the package and their answer keys, `/mnt`,
`/srv`, `/root`, `/home`, model weights, the runs directory, the trainer's files) is simply not
there. It runs in namespaces of its own: network (loopback only), IPC, UTS, cgroup and PID (its
own init and `/proc`: the trainer's processes are neither visible nor signalable), with
`--die-with-parent`, `--new-session` and every capability dropped.

As root it enters every namespace but the user namespace (`--unshare-all` less `--unshare-user`):
the run's sandbox user must be a real uid, so the kernel's own permission checks on the copy
(root-owned, sticky, read-only protected paths) hold as they do without bubblewrap; the stub's
copy inside keeps CAP_SETUID and CAP_SETGID only to become that user, which drops them. Without
root it adds a user namespace (where the kernel allows unprivileged ones).

The seccomp filter stays the stub's own (`stub._install_seccomp`, installed by the stub's copy
inside, after the user switch, right before the exec) rather than bubblewrap's `--seccomp FD`:
one filter and one code path for both views, tested by the same test, and the filter denies the
very calls (`unshare`, `mount`) bubblewrap needs for its set-up, so it must come after it either
way. Where `bwrap` is missing or refuses to start here, the runner falls back to the stub's own
namespaces and hide-list (`agentrl.sandbox.isolation`) and says so in the result (`WEAKER_NOTE`);
`scripts/ensure-bwrap.sh` installs it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from agentrl.sandbox import stub
from agentrl.sandbox.isolation import Availability, hidden_paths, kept_paths
from agentrl.sandbox.users import SANDBOX_UID_BASE

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The system's programs and libraries, read-only (on a merged-/usr system all but /usr are links)."""
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/nsswitch.conf",
             "/etc/alternatives", "/etc/mime.types")
"""What a test run needs of /etc: the dynamic loader's cache, the time zone, how names resolve,
Debian's alternatives links; nothing else of /etc (no hostname, no machine-id, no credentials)."""
WEAKER_NOTE = ("weaker isolation: without bubblewrap (bwrap is not here, or bubblewrap=False) the run sees the whole file "
               "system but a hide-list (home directories, this checkout, the runs directory); scripts/ensure-bwrap.sh installs it")
"""The result's note when the run fell back to the stub's own namespaces."""
NO_NAMESPACES_NOTE = ("weaker isolation: no namespaces here (the kernel refuses them, or namespaces=False), so the run "
                      "shares the network and sees the whole file system; only the limits and the sandbox user hold")
PRIVATE_TMPFS = ("/tmp", "/var/tmp")
_PROBED: dict[str, Availability] = {}
_PROBE_LOCK = threading.Lock()


def bwrap_executable() -> str | None:
    return shutil.which("bwrap", path=os.environ.get("PATH", os.defpath) + ":/usr/bin:/bin")


def _namespace_flags(as_root: bool) -> list[str]:
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"] \
        + ([] if as_root else ["--unshare-user"])


def bubblewrap_available() -> Availability:
    """Whether `bwrap` is here and can build a run's view (asked once per process and executable)."""
    executable = bwrap_executable()
    if executable is None:
        return Availability(False, "bwrap not found (Debian's bubblewrap: scripts/ensure-bwrap.sh)")
    with _PROBE_LOCK:
        if executable not in _PROBED:
            command = [executable, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                       *_namespace_flags(os.geteuid() == 0), "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                       "--", "/bin/sh", "-c", "test -d /proc/1"]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=30, cwd="/")
                why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
                _PROBED[executable] = Availability(done.returncode == 0, "" if done.returncode == 0 else why, pid=True)
            except (OSError, subprocess.TimeoutExpired) as err:
                _PROBED[executable] = Availability(False, str(err))
        return _PROBED[executable]


def _is_under(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


def _holds_the_system(path: Path) -> bool:
    """`/`, or a directory holding one of the system's own: never put in the view whole."""
    return any(_is_under(Path(system), path) for system in (*SYSTEM_DIRS, "/etc", "/proc", "/dev", "/tmp"))


def write_identity(directory: Path, uid: int, gid: int, home: Path) -> tuple[Path, Path]:
    """`passwd` and `group` for the run: root, the run's own user (home: the run's HOME), nobody."""
    try:
        name = "sandbox" if uid >= SANDBOX_UID_BASE else pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "sandbox"
    users = {0: "root:x:0:0:root:/root:/usr/sbin/nologin", 65534: "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
             uid: f"{name}:x:{uid}:{gid}:agentrl sandbox run:{home}:/usr/sbin/nologin"}
    groups = {0: "root:x:0:", 65534: "nogroup:x:65534:", gid: f"{name}:x:{gid}:"}
    passwd, group = directory / "passwd", directory / "group"
    passwd.write_text("".join(line + "\n" for line in users.values()))
    group.write_text("".join(line + "\n" for line in groups.values()))
    return passwd, group


class _View:
    """bubblewrap's mount options in order, with every directory a later mount needs made first
    (mode 0755: bubblewrap would make a missing parent 0700, and a parent such as /root is 0700
    on the host anyway, either of which would shut the sandbox user out)."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.bound: list[Path] = []  # host paths bound (or linked) into the view: nothing is made inside them
        self.empty: list[Path] = []  # fresh tmpfs: directories are made inside them as needed
        self.made: set[Path] = {Path("/")}

    def _inside(self, path: Path, mounts: list[Path]) -> bool:
        return any(_is_under(path, m) for m in mounts)

    def _parents(self, path: Path) -> None:
        for parent in reversed(path.parents):
            if parent not in self.made and not self._inside(parent, self.bound) and parent not in self.empty:
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self.made.add(parent)

    def expose(self, path: Path, *, rw: bool = False, depth: int = 0) -> None:
        """`path` as it is on the host: each symlink on the way recreated, its target exposed."""
        current = Path("/")
        for i, part in enumerate(path.parts[1:], 1):
            current = current / part
            if self._inside(current, self.bound):
                if not rw:  # the rest is reachable through what is bound already, links included
                    return
                continue
            if current.is_symlink() and depth < 40:
                target = os.readlink(current)
                self._parents(current)
                self.args += ["--symlink", target, str(current)]
                self.bound.append(current)
                rest = Path(*path.parts[i + 1:]) if i + 1 < len(path.parts) else None
                resolved = Path(os.path.abspath(os.path.join(current.parent, target)))
                self.expose(resolved / rest if rest else resolved, rw=rw, depth=depth + 1)
                return
        if os.path.exists(path):
            self.bind(path, rw=rw)

    def bind(self, path: Path, *, rw: bool = False) -> None:
        self._parents(path)
        self.args += ["--bind" if rw else "--ro-bind", str(path), str(path)]
        self.bound.append(path)

    def tmpfs(self, path: Path, mode: str = "1777") -> None:
        self._parents(path)
        self.args += ["--perms", mode, "--tmpfs", str(path)]
        self.empty.append(path)


def bwrap_command(run_dir: Path, cwd: Path, executables: Sequence[str], *, as_root: bool, switch_user: bool,
                  identity: tuple[Path, Path], hide: Iterable[str | Path] = (), read_only: Iterable[Path] = ()) -> list[str]:
    """`bwrap` and its options up to `--`: the run's view (module docstring), its namespaces, and
    its capabilities (none; CAP_SETUID and CAP_SETGID as root when the stub inside must become the
    sandbox user). `read_only`: paths inside the run's directory mounted read-only on top."""
    executable = bwrap_executable()
    if executable is None:
        raise FileNotFoundError("bwrap not found")
    view = _View()
    for directory in SYSTEM_DIRS:
        if os.path.lexists(directory):
            view.expose(Path(directory))
    for path in PRIVATE_TMPFS:
        view.tmpfs(Path(path))
    for name in ETC_FILES:
        if os.path.lexists(name):
            view.expose(Path(name))
    passwd, group = identity
    view.args += ["--ro-bind", str(passwd), "/etc/passwd", "--ro-bind", str(group), "/etc/group"]
    for path in sorted(kept_paths(executables), key=lambda p: len(p.parts)):
        if not _holds_the_system(Path(os.path.abspath(path))):  # `/bin/sh`'s "prefix" is / itself
            view.expose(Path(os.path.abspath(path)))
    real_run_dir = Path(os.path.realpath(run_dir))
    view.expose(Path(os.path.abspath(run_dir)), rw=True)
    for path in read_only:
        view.bind(Path(os.path.realpath(path)))
    # what must stay unreadable but lies inside something exposed (the package installed into
    # site-packages, a runs directory inside a virtual environment): an empty tmpfs on top
    for hidden in hidden_paths(hide):
        if any(hidden != m and _is_under(hidden, m) for m in view.bound) and not _is_under(real_run_dir, hidden):
            view.tmpfs(hidden, "0755")
    capabilities = ["--cap-drop", "ALL"] + (["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if switch_user else [])
    # /dev/shm as the host has it (1777): multiprocessing's semaphores live there
    return [executable, *view.args, "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm",
            *_namespace_flags(as_root),
            "--die-with-parent", "--new-session", *capabilities, "--chdir", str(Path(os.path.realpath(cwd))), "--"]


def bubblewrap_config(run_dir: Path, cwd: Path, executables: Sequence[str], *, uid: int | None, gid: int | None,
                      home: Path, hide: Iterable[str | Path] = (), read_only: Iterable[Path] = ()) -> dict:
    """The stub's `bubblewrap` entry for a run: bwrap's command up to `--`, and the interpreter and
    the stub's copy it runs inside (`stub._inner_main`). `uid`/`gid`: the sandbox user (None: the
    run keeps this process's user). Writes `<run_dir>/system/` (the stub's copy, passwd, group),
    read-only."""
    system = run_dir / "system"
    system.mkdir()
    identity = write_identity(system, os.geteuid() if uid is None else uid, os.getegid() if gid is None else gid, home)
    shutil.copyfile(stub.__file__, system / "agentrl_stub.py")
    for path in system.iterdir():
        path.chmod(0o444)
    system.chmod(0o555)
    command = bwrap_command(run_dir, cwd, executables, as_root=os.geteuid() == 0, switch_user=uid is not None,
                            identity=identity, hide=hide, read_only=[*read_only, system])
    return {"command": command, "python": os.path.realpath(sys.executable), "stub": str(system / "agentrl_stub.py")}
