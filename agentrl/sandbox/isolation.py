"""What a run may see: its own network, mount and IPC namespaces, and the plan of its file system
view (what is hidden, what stays reachable, what is writable).

Sandbox runner -> **isolation** -> stub (which carries the plan out in the run's worker, before
the limits and the user switch). When the kernel lets this process create namespaces (as root,
or as any user where unprivileged user namespaces are allowed), each run gets:

- a network namespace of its own with only loopback, up: nothing outside the run answers, not
  the dashboard on 127.0.0.1, not the internet, not an abstract UNIX socket of the host;
- an IPC namespace of its own (System V IPC, POSIX message queues);
- a PID namespace of its own where the kernel allows it (`Availability.pid`), with a /proc of its
  own: the run sees its own processes alone, never the trainer's, and cannot signal it;
- a mount namespace in which every mount is read-only, `/tmp`, `/var/tmp` and `/dev/shm` are
  fresh private tmpfs that vanish with the run (so nothing is left in any world-writable
  directory), and the home directories (`/root`, `/home`, `$HOME`), the agentrl package (where
  the answer keys live), its checkout, the runs directory (`$AGENTRL_RUNS_DIR`) and the
  trainer's working directory are hidden under empty read-only tmpfs. Put back on top of those,
  read-only: the interpreters the run needs (their prefix, virtual environment and
  site-packages), and, writable, the run's own directory (its copy, HOME and TMPDIR).

`isolation_plan` computes the view; `namespaces_available` asks the kernel once per process.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentrl.sandbox import stub

WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
"""Replaced by a private tmpfs in each run: what the run writes there is gone when it ends."""
PRIVATE_TMPFS_SIZE = "256m"
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/var", "/dev", "/proc", "/sys", "/run", "/tmp")
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Availability:
    available: bool
    why_not: str = ""
    pid: bool = False
    """A PID namespace of its own, with its own /proc, works here too."""


_PROBED: dict[bool, Availability] = {}
_PROBE_LOCK = threading.Lock()


def namespaces_available(user_namespace: bool | None = None) -> Availability:
    """Whether a run can enter its own network, mount and IPC namespaces here (with a user
    namespace when `user_namespace`, default: when not root). Asked once per process."""
    if user_namespace is None:
        user_namespace = os.geteuid() != 0
    with _PROBE_LOCK:
        if user_namespace not in _PROBED:
            result = Availability(False)
            for pid in (True, False):  # with a PID namespace and its /proc if the kernel allows, else without
                spec = {"user": user_namespace, "cwd": "/", "pid": pid, "ops": [
                    {"op": "tmpfs", "path": "/tmp", "mode": "1777", "size": "1m", "rw": True}]}
                try:
                    done = subprocess.run([sys.executable, "-I", "-S", str(Path(stub.__file__).resolve()), "--probe",
                                           json.dumps(spec)], capture_output=True, text=True, timeout=30, cwd="/")
                    why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
                    result = Availability(done.returncode == 0, why if result.why_not == "" else result.why_not, pid=pid)
                except (OSError, subprocess.TimeoutExpired) as err:
                    result = Availability(False, str(err))
                if result.available:
                    break
            _PROBED[user_namespace] = result
        return _PROBED[user_namespace]


def _is_under(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


def _never_hidden(path: Path) -> bool:
    """'/' and anything holding the system's own directories stay visible."""
    return any(_is_under(Path(system), path) for system in _SYSTEM)


def hidden_paths(extra: Iterable[str | Path] = ()) -> list[Path]:
    """The directories a run must not read: home directories, the agentrl package and its
    checkout, the runs directory, the trainer's working directory, and `extra`; outermost only."""
    candidates: list[str | Path | None] = ["/root", "/home", Path.home(), os.environ.get("HOME"), _PACKAGE_DIR,
                                           os.environ.get("AGENTRL_RUNS_DIR"), Path.cwd(), *extra]
    checkout = _PACKAGE_DIR.parent
    if (checkout / "pyproject.toml").exists() or (checkout / ".git").exists():
        candidates.append(checkout)
    found: list[Path] = []
    for candidate in candidates:
        if not candidate:
            continue
        path = Path(os.path.realpath(candidate))
        if path.is_dir() and not _never_hidden(path) and path not in found:
            found.append(path)
    return sorted(found, key=lambda p: len(p.parts))


def _prefix(executable: Path) -> Path:
    """The installation an interpreter belongs to: `<prefix>/bin/python` -> `<prefix>`."""
    return executable.parent.parent if executable.parent.name == "bin" else executable.parent


def _chain(path: str) -> list[Path]:
    """`path`, every symlink it goes through, and where it ends."""
    seen, current = [], Path(os.path.abspath(path))
    for _ in range(40):
        seen.append(current)
        if not current.is_symlink():
            break
        current = Path(os.path.abspath(os.path.join(current.parent, os.readlink(current))))
    seen.append(Path(os.path.realpath(path)))
    return list(dict.fromkeys(seen))


def kept_paths(executables: Sequence[str]) -> list[Path]:
    """What a run needs to see whatever is hidden: the installations of `executables` and of
    this interpreter (prefix, virtual environment, site-packages)."""
    kept: list[Path] = []
    for executable in [*executables, sys.executable]:
        kept += [_prefix(p) for p in _chain(executable)]
    kept += [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages())]
    return list(dict.fromkeys(p for p in kept if p.exists()))


def isolation_plan(run_dir: Path, cwd: Path, executables: Sequence[str], hide: Iterable[str | Path] = (),
                   read_only: Iterable[Path] = ()) -> list[dict]:
    """The stub's mount operations, in order: private tmpfs over the world-writable directories,
    empty tmpfs over the hidden ones, then symlinks and bind mounts that put back what the run
    needs (read-only) and its own directory (writable; `read_only` paths inside it stay
    read-only), then the hidden directories that lie inside something put back."""
    hidden = hidden_paths(hide)
    covered = [Path(p) for p in WORLD_WRITABLE if Path(p).is_dir()] + hidden
    ops: list[dict] = [{"op": "tmpfs", "path": p, "mode": "1777", "size": PRIVATE_TMPFS_SIZE, "rw": True}
                       for p in WORLD_WRITABLE if Path(p).is_dir() and not Path(p).is_symlink()]
    outer = [h for h in hidden if not any(_is_under(h, c) for c in covered if c != h)]
    ops += [{"op": "tmpfs", "path": str(h), "mode": "0755", "size": "1m", "rw": False} for h in outer]

    def is_covered(path: Path) -> bool:
        return any(_is_under(path, c) for c in covered)

    put_back: list[dict] = []

    def expose(path: Path, rw: bool = False, depth: int = 0) -> None:
        current = Path("/")
        for i, part in enumerate(path.parts[1:], 1):
            current = current / part
            if current.is_symlink() and depth < 40:
                if is_covered(current):
                    put_back.append({"op": "symlink", "path": str(current), "target": os.readlink(current)})
                rest = Path(*path.parts[i + 1:]) if i + 1 < len(path.parts) else None
                target = Path(os.path.abspath(os.path.join(current.parent, os.readlink(current))))
                expose(target / rest if rest else target, rw, depth + 1)
                return
        if is_covered(path) or rw:
            put_back.append({"op": "bind", "path": str(path), "dir": path.is_dir(), "rw": rw})

    for path in kept_paths(executables):
        if not any(_is_under(Path(w), path) for w in WORLD_WRITABLE):
            expose(path)
    expose(Path(os.path.realpath(run_dir)), rw=True)
    for path in read_only:
        put_back.append({"op": "bind", "path": str(Path(os.path.realpath(path))), "dir": Path(path).is_dir(), "rw": False})
    ordered = sorted({json.dumps(op, sort_keys=True): op for op in put_back}.values(),
                     key=lambda op: (len(Path(op["path"]).parts), op["op"] != "symlink"))
    bound = [Path(op["path"]) for op in ordered if op["op"] == "bind"]
    inner = [{"op": "tmpfs", "path": str(h), "mode": "0755", "size": "1m", "rw": False}
             for h in hidden if any(h != b and _is_under(h, b) for b in bound)]
    return ops + ordered + inner


def namespace_spec(run_dir: Path, cwd: Path, executables: Sequence[str], *, user_namespace: bool,
                   hide: Iterable[str | Path] = (), read_only: Iterable[Path] = (), pid: bool = False) -> dict:
    """What the stub needs to enter the namespaces and build the view (`stub._enter_namespaces`);
    `pid`: a PID namespace of its own too, the command its PID 1, with a /proc of its own."""
    return {"user": user_namespace, "pid": pid, "cwd": str(Path(os.path.realpath(cwd))),
            "ops": [{**op, "path": str(op["path"])} for op in isolation_plan(run_dir, cwd, executables, hide, read_only)]}
