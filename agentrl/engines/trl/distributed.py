"""A `trl` run on several processes: this run process starts `accelerate launch` and keeps the run's lifecycle.

`python -m agentrl train` -> `agentrl.engines.trl.engine.run_trl` (`distributed.num_processes` >
1) -> **here** -> `accelerate launch` -> N processes of `agentrl.engines.trl.rank` -> chunks (the
main process only) -> store. Who owns what, as with the script engine:

- this process (the one the launcher and the supervisor watch) owns status.json: `running` with
  its own pid, then the final status, `ended_at`, the exit code and, when a process failed, why
  ("rank 1 of 2 failed: RuntimeError: ..."). It never trains and never writes chunks.
- the main process (rank 0) opens the `Run` writer (supervised: it reports its outcome as
  `reported_status`) and records the run: the whole batch of every step, evaluations, hardware
  samples of every process of the run (its sampler starts at this process), budgets. The other
  processes train and write nothing but, if they fail, one line in `ranks/<rank>.error`.

`accelerate launch` is started from an argument list, with TRL's shipped config of the chosen
strategy (`trl/accelerate_configs/`: multi_gpu.yaml for ddp, zero1-3.yaml, fsdp2.yaml), the
process count, one machine, 127.0.0.1 and a free port, and no mixed precision (the run trains in
float32, as the budget counts it). On a machine without CUDA the same ddp config starts N local
processes through torchrun and each trains on the CPU over gloo (TRL's `use_cpu`): accelerate's
multi-CPU mode.

Stopping: a stop request (the stop file; SIGTERM or SIGINT to this process, which writes the stop
file) is seen by rank 0 after the current step and broadcast, so every process stops after the
same step and the run ends `cancelled`. If they have not exited `STOP_WAIT_S` later, accelerate
gets SIGTERM (torch's elastic agent passes it on, then SIGKILLs after 30 s); `KILL_AFTER_S` after
that, the whole process tree gets SIGKILL. A process that crashes makes the elastic agent stop
the others (gloo also fails their next collective), accelerate exits non-zero, and the run is
`failed` with the first failure's line. If this process dies, accelerate gets SIGKILL from the
kernel (PR_SET_PDEATHSIG), and so do the training processes when accelerate dies.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from agentrl.engines.child import Escalation, end_run, wait_for_child
from agentrl.paths import PACKAGE_DIR
from agentrl.record.rundir import RUN_DIR_ENV, SUPERVISOR_ENV, TERMINAL_STATUSES, RunDir, iso, utc_now

RANK_MODULE = "agentrl.engines.trl.rank"
RANK_ERRORS = "ranks"  # run folder: <rank>.error, one JSON line per failed process
STRATEGY_CONFIGS = {"ddp": "multi_gpu.yaml", "zero1": "zero1.yaml", "zero2": "zero2.yaml", "zero3": "zero3.yaml", "fsdp": "fsdp2.yaml"}
STOP_WAIT_S = 120.0  # after a stop request: time for the processes to finish their step, evaluate and save
KILL_AFTER_S = 45.0  # after SIGTERM to accelerate (its agent waits 30 s before SIGKILL): SIGKILL to every process
_PR_SET_PDEATHSIG = 1


# -- the machine --------------------------------------------------------------------------------


def gpu_memory() -> tuple[int, ...]:
    """Memory of each GPU this process may use, in bytes; () without CUDA. Asks torch when it is
    already loaded (a training process), else `nvidia-smi` once (the Launch page must not pay for
    importing torch)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if not torch.cuda.is_available():
                return ()
            return tuple(int(torch.cuda.get_device_properties(i).total_memory) for i in range(torch.cuda.device_count()))
        except Exception:
            return ()
    return _nvidia_smi_memory(os.environ.get("CUDA_VISIBLE_DEVICES"))


@functools.lru_cache(maxsize=4)
def _nvidia_smi_memory(visible: str | None) -> tuple[int, ...]:
    program = shutil.which("nvidia-smi")
    if program is None:
        return ()
    # NVML first: it counts a MIG device as itself, where nvidia-smi's CSV gives the whole GPU's memory.
    from agentrl.record.hardware import load_nvml

    sizes = nvml_memory(load_nvml(), visible)
    if sizes:
        return sizes
    try:
        out = subprocess.run([program, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        sizes = [int(float(line)) * 2**20 for line in out.split()]  # MiB
    except (OSError, ValueError, subprocess.SubprocessError):
        return ()
    if visible is None:
        return tuple(sizes)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if all(v.isdigit() for v in ids):
        return tuple(sizes[int(v)] for v in ids if int(v) < len(sizes))
    return tuple(sizes[: len(ids)])  # GPU UUIDs: as many as named


def nvml_memory(nvml, visible: str | None) -> tuple[int, ...]:
    """Memory of each CUDA device `visible` names (every GPU when None), per NVML (`nvml`: pynvml,
    or None); () when NVML cannot tell."""
    from agentrl.record.hardware import nvml_device_memory

    if nvml is None:
        return ()
    try:
        count = len([v for v in visible.split(",") if v.strip()]) if visible else int(nvml.nvmlDeviceGetCount())
    except Exception:
        return ()
    devices = [nvml_device_memory(nvml, visible, i) for i in range(count)]
    return tuple(d["total_bytes"] for d in devices) if devices and all(devices) else ()


def machine_refusal(config) -> str | None:
    """Why this machine cannot run what `config.distributed` asks (one line), or None. Checked in
    the preflight, not in the config, so a config stays loadable on any machine."""
    settings = config.distributed
    n = settings.num_processes
    if n == 1 and not settings.use_vllm:
        return None
    gpus = gpu_memory()
    if settings.use_vllm:
        if not gpus:
            return "vLLM (use_vllm) needs a GPU and this machine has none (no CUDA device found); turn vLLM off"
        if importlib.util.find_spec("vllm") is None:
            return "vLLM (use_vllm) is not installed here; pip install vllm (with -c constraints.txt), or turn vLLM off"
    if n == 1:
        return None
    if importlib.util.find_spec("accelerate") is None:
        return "accelerate is not installed here; pip install accelerate, or set processes to 1"
    if settings.strategy != "ddp" and not gpus:
        sharder = "FSDP" if settings.strategy == "fsdp" else "DeepSpeed ZeRO"
        return (f"sharding strategy {settings.strategy!r} needs GPUs ({sharder} shards across CUDA devices) and this "
                f"machine has none; use 'ddp', which runs the {n} processes on the CPU over gloo")
    if settings.strategy.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
        return f"sharding strategy {settings.strategy!r} needs DeepSpeed, which is not installed here; pip install deepspeed, or use 'ddp' or 'fsdp'"
    if gpus and n > len(gpus):
        return f"{n} processes need {n} GPUs (one each) and this machine has {len(gpus)}; set processes to at most {len(gpus)}"
    cores = os.cpu_count() or 1
    if not gpus and n > cores:
        return f"{n} CPU processes are more than this machine's {cores} cores (no GPU found); set processes to at most {cores}"
    return None


# -- the command ----------------------------------------------------------------------------------


def accelerate_config(strategy: str) -> Path:
    """TRL's shipped accelerate config of `strategy`, found without importing TRL (which loads torch)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("TRL is not installed here; it ships the accelerate configs (pip install trl)")
    path = Path(list(spec.submodule_search_locations)[0]) / "accelerate_configs" / STRATEGY_CONFIGS[strategy]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; TRL ships it in trl/accelerate_configs/ (reinstall trl)")
    return path


def launch_argv(config) -> list[str]:
    """`accelerate launch` of the rank module, as an argument list (no shell reads it)."""
    settings = config.distributed
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(accelerate_config(settings.strategy)),
        "--num_processes", str(settings.num_processes), "--num_machines", "1",
        "--main_process_ip", "127.0.0.1", "--main_process_port", "0",  # 0: a free port
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "-m", RANK_MODULE,
    ]


def rank_environment(run_dir: RunDir, gpus: int) -> dict[str, str]:
    """This process's environment, plus: the run folder and this process's pid (the rank module
    finds its run and its supervisor there), this agentrl importable, the CPU settings."""
    from agentrl.engines.trl.engine import CPU_ENV

    python_path = [str(PACKAGE_DIR.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**CPU_ENV, **os.environ, "PYTHONPATH": os.pathsep.join(python_path), "PYTHONUNBUFFERED": "1",
           RUN_DIR_ENV: str(run_dir.root.resolve()), SUPERVISOR_ENV: str(os.getpid())}
    if not gpus and sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: gloo talks over loopback only
    return env


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Ask the kernel for `signum` when this process's parent dies (Linux; elsewhere nothing)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), signum)


# -- the run ----------------------------------------------------------------------------------------


def run_distributed(config, run_dir: RunDir, log: Callable[[str], None] = print) -> str:
    """Run `config` on `config.distributed.num_processes` processes; returns the final status."""
    n = config.distributed.num_processes
    run_dir.update_status(status="running", pid=os.getpid(), create_time=psutil.Process().create_time(),
                          started_at=iso(utc_now()), step=0, total_steps=config.total_steps, error=None)
    signalled: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: signalled.append(number))
    shutil.rmtree(run_dir.root / RANK_ERRORS, ignore_errors=True)
    gpus = len(gpu_memory())
    try:
        argv = launch_argv(config)
        # This process has one thread (the supervisor forked it), so preexec_fn is safe here.
        child = subprocess.Popen(argv, env=rank_environment(run_dir, gpus), stdin=subprocess.DEVNULL, close_fds=True,
                                 preexec_fn=die_with_parent)
    except OSError as error:  # accelerate or TRL's config missing, or no process could start
        return end_run(run_dir, "failed", f"cannot start accelerate launch: {error.strerror or error}", None, log)
    on = f"{n} GPUs" if gpus else f"{n} CPU processes over gloo"
    log(f"accelerate launch: {n} processes, {config.distributed.strategy}, on {on} (pid {child.pid}): {shlex.join(argv)}")
    code = _wait(child, run_dir, signalled, log)
    stopped = bool(signalled) or run_dir.stop_requested()
    reported = run_dir.status() or {}
    status, error = reported.get("reported_status"), reported.get("error")
    if code == 0 and status in TERMINAL_STATUSES:
        return end_run(run_dir, status, error, code, log)
    if stopped:
        return end_run(run_dir, "cancelled", error or f"cancelled; the {n} processes were stopped", code, log)
    detail = rank_failure(run_dir, n) or (error if status == "failed" and error else None)
    if detail is None:
        last = [line for line in run_dir.tail_log(5) if line.strip()]
        detail = (f"accelerate launch exited with code {code} and no process said why (killed by a signal, or out of memory?)"
                  if code else "the main process ended without a final status") + (f"; last output: {last[-1][:300]}" if last else "")
    return end_run(run_dir, "failed", detail, code, log)


def _wait(child: subprocess.Popen, run_dir: RunDir, signalled: list[int], log: Callable[[str], None]) -> int:
    """accelerate's exit code, after asking the processes to stop when the run is cancelled."""
    def ask_rank_0() -> float:
        log("stop requested: every process stops after the current step")
        try:
            if not run_dir.stop_requested():
                run_dir.request_stop()  # a signal to this process: rank 0 learns of it from the stop file
        except OSError:
            return STOP_WAIT_S  # the stop file cannot be written: go straight to SIGTERM
        return 0.0

    return wait_for_child(child, run_dir, signalled, log, [
        Escalation(STOP_WAIT_S, "the processes did not stop: SIGTERM to accelerate launch",
                   lambda c: _signal(c.pid, signal.SIGTERM)),
        Escalation(STOP_WAIT_S + KILL_AFTER_S, "the processes still run: SIGKILL to every one", lambda c: kill_tree(c.pid)),
    ], on_stop=ask_rank_0)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process under it (the training processes have sessions of their own)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in tree:
        try:
            proc.kill()
        except psutil.Error:
            pass


def record_rank_failure(run_dir: RunDir, rank: int, error: BaseException) -> None:
    """One failed process's line, for the run process to report (called by the rank module)."""
    folder = run_dir.root / RANK_ERRORS
    text = " ".join(f"{type(error).__name__}: {error}".split())[:500]
    try:
        folder.mkdir(exist_ok=True)
        (folder / f"{rank}.error").write_text(json.dumps({"rank": rank, "error": text, "time": time.time()}) + "\n")
    except OSError:
        pass  # the run process still reports the exit code


def rank_failure(run_dir: RunDir, processes: int) -> str | None:
    """The first failure a process recorded, as one line ("rank 1 of 2 failed: ..."), or None.
    The first, because the others usually fail as a consequence (a collective with a dead peer)."""
    found = []
    for path in sorted((run_dir.root / RANK_ERRORS).glob("*.error")):
        try:
            item = json.loads(path.read_text())
            found.append((float(item["time"]), int(item["rank"]), str(item["error"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not found:
        return None
    _, rank, error = min(found)
    return f"rank {rank} of {processes} failed: {error}"
