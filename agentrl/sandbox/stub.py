"""The sandbox's launcher: a second program, run as `python -I -S stub.py --stub CONFIG -- COMMAND...`.

Sandbox runner (`agentrl.sandbox.runner.run_tests`) -> **stub** -> the test command. The stub makes
itself the reaper of everything the command starts, walls the command off with bubblewrap (its
worker execs `bwrap`, and a copy of the stub inside applies the rest: `_inner_main`) or in namespaces of its
own (network, mount, IPC, and PID with an init of its own where the kernel allows: `_become_pid_one`;
and a user namespace when not root: `_enter_namespaces`), applies the limits, drops to the
sandbox user, installs a seccomp filter (x86_64: `_install_seccomp`) and execs the command; asked to stop (SIGTERM), it kills and
reaps the lot and exits as the command did. Doing that in a launcher rather than a `preexec_fn` keeps `run_tests` safe to call
from many threads at once, and lets the kill be atomic (`kill(-1)` as the sandbox user) and leave
no zombie even where PID 1 does not reap orphans.

It runs isolated (`-I -S`): the standard library only, never an agentrl import. The runner
imports it for the constants both sides share.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

_SETUP_FAILED_EXIT = 125  # the launcher could not apply the limits or become the sandbox user
_EXEC_FAILED_EXIT = 127  # the command could not be started (not found, not executable)
_STUB_MARK = "agentrl-sandbox:"  # prefix of the launcher's own messages in the output
_STOP_GRACE_S = 5.0  # how long the launcher gets to kill and reap everything before we do it


_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x10000000, 0x40000000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_NOATIME, _MS_NODIRATIME, _MS_BIND, _MS_REC, _MS_PRIVATE, _MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
# statvfs f_flag bit -> the mount flag that keeps it on a remount (a user namespace may not drop
# a flag its parent locked, so every one is carried over)
_KEPT_FLAGS = ((2, _MS_NOSUID), (4, _MS_NODEV), (8, _MS_NOEXEC), (1024, _MS_NOATIME), (2048, _MS_NODIRATIME), (4096, _MS_RELATIME))
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1

_PR_SET_KEEPCAPS = 8
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 47, 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _StopRequested(Exception):
    pass


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _stub_main(argv: list[str]) -> None:
    """Launch COMMAND under the limits, wait for it, kill and reap whatever it left, and exit as
    it did (same code, or the same signal). SIGTERM means: stop now."""
    import resource

    config = json.loads(argv[2])
    command = argv[4:]
    # Orphans of the run are re-parented to us, not to PID 1, so we can reap them (some PID 1s
    # never do, and a zombie would count against the sandbox user's process limit).
    _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def on_stop(_signum, _frame):
        raise _StopRequested

    signal.signal(signal.SIGTERM, on_stop)
    launcher_pid = os.getpid()
    status = None
    started = os.pipe() if config.get("bubblewrap") else None  # one byte once bubblewrap has set the run up
    try:
        worker = os.fork()
        if worker == 0:
            _become_command(config, command, started[1] if started else None)
        for fd in (config.get("pass_fds") or []) + ([started[1]] if started else []):  # the worker's alone from here
            os.close(fd)
        while status is None:
            pid, wait_status = os.waitpid(-1, 0)
            if pid == worker:
                status = wait_status
    except _StopRequested:
        if os.getpid() != launcher_pid:  # the stop reached the worker before it reset SIGTERM
            os._exit(_SETUP_FAILED_EXIT)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _kill_and_reap_everything_below(config)
    if started is not None and status is not None:
        status = _bubblewrap_status(status, started[0])
    if status is None:
        os._exit(128 + signal.SIGKILL)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            signal.signal(signum, signal.SIG_DFL)  # Python ignores some (SIGXFSZ, SIGPIPE)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def _bubblewrap_status(status: int, started_fd: int) -> int:
    """bubblewrap's exit 1 (no set-up) and 128 + N (killed by signal N) back to what the verdict reads
    (a command that exits 128 + N on its own reads as killed by N: it failed either way)."""
    try:
        began = os.read(started_fd, 1) == b"1"
    except BlockingIOError:
        began = False
    if not os.WIFEXITED(status):
        return status
    code = os.WEXITSTATUS(status)
    if not began:
        os.write(2, f"{_STUB_MARK} bubblewrap could not set the run up (exit {code})\n".encode())
        return _SETUP_FAILED_EXIT << 8
    return code - 128 if code > 128 and code - 128 in signal.valid_signals() else status


def _become_command(config: dict, command: list[str], started_fd: int | None = None) -> None:
    """In the forked worker: namespaces, limits, user, then exec; or, with bubblewrap, exec `bwrap`
    and, inside the view it builds, the stub's copy that does the rest (`_inner_main`). Never
    returns (it must not run on into the launcher's code)."""
    try:
        if config.get("bubblewrap"):
            wrap = config["bubblewrap"]
            os.set_blocking(started_fd, True)
            os.set_inheritable(started_fd, True)
            inner = {**config, "bubblewrap": None, "namespaces": None, "read_search": False, "started_fd": started_fd}
            command = [*wrap["command"], wrap["python"], "-I", "-S", wrap["stub"], "--inner", json.dumps(inner), "--",
                       *command]
            os.execv(command[0], command)
        if config.get("namespaces"):
            _enter_namespaces(config["namespaces"])
            if config["namespaces"].get("pid"):
                _become_pid_one()
        if config["read_search"] == "auto":  # decided in the run's own view of the file system
            config["read_search"] = not all(map(_traversable_by_others, config.get("reachable") or []))
        _apply_limits_and_user(config)
    except BaseException as err:  # noqa: BLE001 - anything here must end the worker, loudly
        os.write(2, f"{_STUB_MARK} {type(err).__name__}: {err}\n".encode())
        os._exit(_SETUP_FAILED_EXIT)
    try:
        os.execvp(command[0], command)
    except BaseException as err:  # noqa: BLE001
        os.write(2, f"{_STUB_MARK} cannot run {command[0]!r}: {getattr(err, 'strerror', err)}\n".encode())
    finally:
        os._exit(_EXEC_FAILED_EXIT)


def _inner_main(argv: list[str]) -> None:
    """`stub.py --inner CONFIG -- COMMAND...`, inside bubblewrap's view: say the set-up is done,
    then limits, user, seccomp, exec."""
    config = json.loads(argv[2])
    os.environ.pop("PWD", None)  # bubblewrap's, after --chdir: the run's environment is the runner's alone
    os.write(config["started_fd"], b"1")
    os.close(config["started_fd"])
    _become_command(config, argv[4:])


def _apply_limits_and_user(config: dict) -> None:
    """Resource limits, then the sandbox user (keeping CAP_DAC_READ_SEARCH when asked), then
    no-new-privileges."""
    import ctypes
    import resource

    for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)  # ignored signals would survive the exec
    cpu_s = int(config["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (config["address_space_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (config["file_size_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = config["max_processes"] if hard == resource.RLIM_INFINITY else min(config["max_processes"], hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    libc = _libc()
    if config["uid"] is not None:
        if config["read_search"]:
            libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0)
        os.setgroups([])
        os.setresgid(config["gid"], config["gid"], config["gid"])
        os.setresuid(config["uid"], config["uid"], config["uid"])
        if config["read_search"]:
            _keep_only_read_search(libc)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # setuid binaries stay powerless
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if config.get("seccomp"):
        _install_seccomp(libc)


# x86_64 system calls a test run has no use for and that reach beyond it: other processes' memory
# (ptrace, process_vm_*), new namespaces and mounts, the kernel's keyring, modules, BPF, perf
# events, userfaultfd, file handles, the clock, reboot. Each fails with EPERM.
_SECCOMP_DENIED_X86_64 = (101, 310, 311, 298, 321, 246, 320, 175, 313, 176, 169, 167, 168, 163, 164, 227, 159, 165,
                          166, 155, 272, 308, 250, 248, 249, 323, 304, 303, 172, 173, 179, 312, 428, 429, 430, 431, 432,
                          433, 442)
_AUDIT_ARCH_X86_64 = 0xC000003E
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_SECCOMP_RET_KILL_PROCESS, _SECCOMP_RET_ERRNO, _SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000


def seccomp_supported() -> bool:
    """The filter is written for x86_64 system-call numbers; elsewhere the run goes without it."""
    return os.uname().machine == "x86_64"


def _install_seccomp(libc) -> None:
    """A seccomp filter: the denied calls fail with EPERM, a call of another ABI (x32, i386) ends
    the process, everything else is allowed."""
    import ctypes
    import errno

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    code = [Filter(load, 0, 0, 4), Filter(jeq, 1, 0, _AUDIT_ARCH_X86_64), Filter(ret, 0, 0, _SECCOMP_RET_KILL_PROCESS),
            Filter(load, 0, 0, 0), Filter(jge, 0, 1, 0x40000000), Filter(ret, 0, 0, _SECCOMP_RET_KILL_PROCESS)]
    for number in _SECCOMP_DENIED_X86_64:
        code += [Filter(jeq, 0, 1, number), Filter(ret, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM)]
    code.append(Filter(ret, 0, 0, _SECCOMP_RET_ALLOW))
    array = (Filter * len(code))(*code)
    program = Program(len(code), ctypes.cast(array, ctypes.POINTER(Filter)))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def _traversable_by_others(path: str) -> bool:
    """Whether a user with no relation to any owner can reach `path` (o+x on every directory)."""
    path = os.path.abspath(path)
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
        directory = "/".join(parts[:i]) or "/"
        try:
            mode = os.stat(directory).st_mode
        except OSError:
            return False
        if (mode & 0o170000) == 0o040000 and not mode & 0o001:
            return False
    return True


def _mount(libc, source, target: str, fstype, flags: int, data=None) -> None:
    import ctypes

    encode = lambda value: value.encode() if isinstance(value, str) else value  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def _kept_flags(path: str) -> int:
    f_flag = os.statvfs(path).f_flag
    return sum(ms for st, ms in _KEPT_FLAGS if f_flag & st)


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo", "rb") as handle:
        for line in handle:
            raw = line.split()[4]
            # mountinfo escapes space, tab, newline and backslash as \ooo
            points.append(raw.decode("unicode_escape").encode("latin-1").decode("utf-8", "replace"))
    return points


def _loopback_up() -> None:
    """The new network namespace has one device, `lo`, and it starts down."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def _make_mount_point(path: str, is_dir: bool) -> None:
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    if is_dir:
        os.mkdir(path, 0o755)
    else:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _enter_namespaces(spec: dict) -> None:
    """Unshare the network (loopback only), mount and IPC namespaces (and the user namespace
    when not root), then give the run its view of the files (`spec['ops']`, planned by
    `agentrl.sandbox.isolation`): every mount read-only, a private tmpfs over each world-writable
    directory, an empty read-only tmpfs over each hidden directory, and back on top of those,
    read-only, what the command needs (its interpreter), and the run's own directory writable."""
    import ctypes

    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | (_CLONE_NEWUSER if spec["user"] else 0) \
        | (_CLONE_NEWPID if spec.get("pid") else 0)
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")
    if spec["user"]:  # the same ids inside as outside; the capabilities end at exec (uid is not 0)
        for name, content in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(content)
    _loopback_up()
    # Nothing done below may reach the host's mounts: first make every mount private to us.
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    ops = spec["ops"]
    sources = {op["path"]: os.open(op["path"], os.O_PATH | os.O_CLOEXEC) for op in ops if op["op"] == "bind"}
    for point in _mount_points():
        if point == "/proc" or point.startswith(("/proc/", "/sys/")) or point == "/sys":
            continue
        try:
            if os.statvfs(point).f_flag & _MS_RDONLY:  # read-only already
                continue
            _mount(libc, None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _kept_flags(point))
        except OSError:
            if not os.path.exists(point):  # shadowed by a later mount on a parent: unreachable anyway
                continue
            raise
    hiding = []
    for op in ops:
        path = op["path"]
        if op["op"] == "tmpfs":
            _make_mount_point(path, True)
            _mount(libc, "tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={op['mode']},size={op['size']}")
            if not op["rw"]:
                hiding.append(path)
        elif op["op"] == "symlink":
            if not os.path.lexists(path):
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                os.symlink(op["target"], path)
        elif op["op"] == "bind":
            _make_mount_point(path, op["dir"])
            _mount(libc, f"/proc/self/fd/{sources[path]}", path, None, _MS_BIND | _MS_REC)
            _mount(libc, None, path, None, _MS_REMOUNT | _MS_BIND | (0 if op["rw"] else _MS_RDONLY) | _kept_flags(path))
    for path in hiding:
        _mount(libc, None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    for fd in sources.values():
        os.close(fd)
    os.chdir(spec["cwd"])  # the working directory again, through the run's writable mount


def _become_pid_one() -> None:
    """After `unshare(CLONE_NEWPID)`: fork the namespace's init, which mounts a /proc of its own
    (its namespace's processes alone), forks the command (which returns from here) and reaps
    every orphan until the command ends; this process waits for the init and leaves as the command
    did. The command is not PID 1 itself, which would ignore every signal it has no handler for
    (SIGXCPU, SIGXFSZ, SIGPIPE at the limits). When the init ends, the kernel kills the rest."""
    read_end, write_end = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read_end)
        _mount(_libc(), "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        command = os.fork()
        if command == 0:
            os.close(write_end)
            return
        _close_all_but(write_end)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == command:
                os.write(write_end, str(status).encode())
                os._exit(0)
    os.close(write_end)
    _close_all_but(read_end)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.waitpid(init, 0)
    data = os.read(read_end, 64)
    status = int(data) if data else None
    if status is None:  # the init itself was killed
        os._exit(128 + signal.SIGKILL)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def _close_all_but(keep: int) -> None:
    for fd in range(3, 1024):
        if fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _probe_main(argv: list[str]) -> None:
    """`stub.py --probe SPEC`: exit 0 when a worker can enter the namespaces SPEC asks for."""
    spec = json.loads(argv[2])
    pid = os.fork()
    if pid == 0:
        try:
            _enter_namespaces(spec)
            if spec.get("pid"):
                _become_pid_one()
                if not os.path.isdir("/proc/1") or os.getpid() != 2:
                    raise OSError("no PID namespace of its own")
        except BaseException as err:  # noqa: BLE001
            os.write(2, f"{type(err).__name__}: {err}\n".encode())
            os._exit(1)
        os._exit(0)
    os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


def _keep_only_read_search(libc) -> None:
    """After the uid switch, keep CAP_DAC_READ_SEARCH alone, ambient so it survives the exec.

    It lets the sandbox user reach an interpreter behind a closed directory (here root's
    /root/.pyenv, mode 0700) and read files, never write them.
    """
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    bit = 1 << _CAP_DAC_READ_SEARCH
    data = (Data * 2)(Data(bit, bit, bit), Data(0, 0, 0))
    if libc.capset(ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset(CAP_DAC_READ_SEARCH) failed")
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAP_AMBIENT_RAISE) failed")


def _descendants(root_pid: int) -> list[int]:
    """Every process below `root_pid`, from /proc (the launcher has no psutil under `-S`)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, frontier = [], [root_pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def _kill_and_reap_everything_below(config: dict) -> None:
    """SIGKILL every process of the run and reap them all, so none outlives the launcher."""
    deadline = time.monotonic() + _STOP_GRACE_S
    while True:
        # kill(-1) as the sandbox user reaches every process of that user in one pass that a
        # fork cannot race (the kernel holds the task list while it signals).
        if config["uid"] is not None and os.fork() == 0:
            try:
                os.setresgid(config["gid"], config["gid"], config["gid"])
                os.setresuid(config["uid"], config["uid"], config["uid"])
                for _ in range(100):
                    os.kill(-1, signal.SIGKILL)
            except BaseException:  # noqa: BLE001, S110 - ESRCH: nothing of that user is left
                pass
            finally:
                os._exit(0)
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return  # no child left: everything below is dead and reaped
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "--stub":
    _stub_main(sys.argv)
elif __name__ == "__main__" and len(sys.argv) > 4 and sys.argv[1] == "--inner":
    _inner_main(sys.argv)
elif __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--probe":
    _probe_main(sys.argv)
