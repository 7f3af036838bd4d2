"""One training process of a multi-process `trl` run: `accelerate launch` starts N of these.

The run process (`agentrl.engines.trl.distributed`, which owns status.json) -> `accelerate
launch` -> **`python -m agentrl.engines.trl.rank`** -> chunks (rank 0 only) -> store. Each finds
its run in `AGENTRL_RUN_DIR`, reads the run's config.json and runs the engine's own `_train`:

- rank 0 (the main process) opens the `Run` writer, supervised (it reports its outcome as
  `reported_status`; the run process writes the final status), samples the memory of every
  process of the run (from the run process down), and records every step's whole batch;
- every other rank trains with a `SilentRun`: it writes nothing, ignores SIGTERM and SIGINT
  (rank 0 decides when all of them stop, `Ranks.agree`), and prints nothing of its own.

A rank that fails writes one line to `ranks/<rank>.error` in the run folder (the run process
reports the first) and exits non-zero; a rank whose accelerate launcher dies gets SIGKILL
(nobody is left to report to). Torch, TRL and accelerate load here, in the rank.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from agentrl.record.rundir import RUN_DIR_ENV, SUPERVISOR_ENV, RunDir


def main() -> int:
    from agentrl.engines.trl.distributed import die_with_parent, record_rank_failure

    die_with_parent(signal.SIGKILL)  # accelerate launch is gone: no one would report this process
    run_dir = RunDir(Path(os.environ[RUN_DIR_ENV]))
    rank, count = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    try:
        if rank == 0:
            _main_process(run_dir, count)
        else:
            _other_process(run_dir, rank, count)
    except BaseException as error:
        record_rank_failure(run_dir, rank, error)
        raise
    import torch.distributed

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()  # every process got here: leave the group together
    return 0


def _config(run_dir: RunDir):
    from agentrl.config import load_config_file

    return load_config_file(run_dir.root / "config.json")


def _ranks(config, rank: int, count: int):
    from agentrl.engines.trl.config import STRATEGIES
    from agentrl.engines.trl.ranks import Ranks

    return Ranks(rank, count, sharded_weights="parameters" in STRATEGIES[config.distributed.strategy])


def _main_process(run_dir: RunDir, count: int) -> None:
    from agentrl.engines.trl.engine import _train, record_measured_budget
    from agentrl.record.hardware import ProcessTreeSampler
    from agentrl.record.run import Run

    config = _config(run_dir)
    log = lambda message: print(message, flush=True)  # noqa: E731
    with Run(run_dir, config.total_steps, config.step_delay, handle_signals=True, supervised=True,
             before_close=lambda run: record_measured_budget(run, log)) as run:
        supervisor = int(os.environ.get(SUPERVISOR_ENV) or os.getpid())
        try:
            run.sampler = ProcessTreeSampler(supervisor)  # every process of the run, not only this one
        except Exception:  # the run process is already gone; sample this one
            pass
        run.finish(_train(config, run, log, _ranks(config, 0, count)), run.error)


def _other_process(run_dir: RunDir, rank: int, count: int) -> None:
    from agentrl.engines.trl.engine import _train
    from agentrl.engines.trl.ranks import SilentRun

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)  # rank 0 decides when every process stops
    config = _config(run_dir)
    _train(config, SilentRun(run_dir), lambda message: None, _ranks(config, rank, count))


if __name__ == "__main__":
    code = main()
    # Everything is written and the process group left; skip the interpreter's teardown, where a
    # training process sometimes aborts ("terminate called without an active exception": a torch
    # thread destroyed while joinable), which made accelerate report a failed process (exit code 1)
    # for a run that ended cleanly (seen once in five full test runs here).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
