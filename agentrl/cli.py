"""The command line: `python -m agentrl train | ingest | runs | presets | export | budget |
build-tiny-model | export-schema`.

Every error a user can cause (unknown preset, invalid values, unreadable config, unwritable runs
directory, a held database) ends as one line on stderr and exit status 2, before anything is
written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .config import SCHEMA_PATH, ConfigError, json_schema_text, load_config_file, load_preset, preset_names
from .rundir import RunDir, RunsDirError, default_runs_dir, ensure_writable


class UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agentrl", description="Train and inspect agent-RL runs.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="run one training run in the foreground")
    source = train.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", help=f"a built-in config: {', '.join(preset_names())}")
    source.add_argument("--config", help="a JSON run config (see schemas/run_config.schema.json)")
    train.add_argument("--runs-dir", help="where runs are stored (default $AGENTRL_RUNS_DIR or runs/)")
    train.add_argument("--name", help="override the run's name")
    train.add_argument("--step-delay", type=float, help="seconds to pause after each round, to watch a run live")
    train.add_argument("--run-id", help=argparse.SUPPRESS)  # set by the launcher, which made the folder
    train.add_argument("--quiet", action="store_true", help="print only the run id and the final status, not every step")

    ingest = sub.add_parser("ingest", help="copy pending run chunks into the DuckDB store")
    ingest.add_argument("--runs-dir", help="where runs are stored (default $AGENTRL_RUNS_DIR or runs/)")

    runs = sub.add_parser("runs", help="list runs with their status, newest first")
    runs.add_argument("--runs-dir", help="where runs are stored (default $AGENTRL_RUNS_DIR or runs/)")

    sub.add_parser("presets", help="list the built-in presets")

    export = sub.add_parser("export", help="write one run's tables (steps, trajectories, reviews, ...) as files")
    export.add_argument("run_id", help="the run to export (see `python -m agentrl runs`)")
    export.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="file format (default parquet)")
    export.add_argument("--out", required=True, help="folder to write into; one file per table")
    export.add_argument("--runs-dir", help="where runs are stored (default $AGENTRL_RUNS_DIR or runs/)")

    tiny = sub.add_parser("build-tiny-model", help="build the tiny offline refund LM (tokenizer, model, warm start)")
    tiny.add_argument("--out", help="folder to write (default: the committed build, agentrl/assets/tiny-refund-lm)")
    tiny.add_argument("--seed", type=int, default=0, help="seed of the build (default 0; the committed build)")
    tiny.add_argument("--bc-steps", type=int, help="behaviour-cloning steps of the warm start (default: the committed build's)")

    budget = sub.add_parser("budget", help="print the memory budget of a LoRA GRPO run (SPEC section 11)")
    budget.add_argument("--model", required=True, help="a local Hugging Face model directory (its config.json is read)")
    budget.add_argument("--rank", type=int, default=8, help="LoRA rank (default 8)")
    budget.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                        help="comma-separated adapted projections (default: all seven)")
    budget.add_argument("--rollouts", type=int, default=8, help="sequences generated together (default 8)")
    budget.add_argument("--tokens", type=int, default=2048, help="tokens per sequence, prompt plus completion (default 2048)")
    budget.add_argument("--machine-gb", type=float, help="memory to plan for in GB (default: this machine's total)")
    budget.add_argument("--bytes-per-param", type=int, default=2, help="2 for BF16 (default), 4 for FP32")

    schema = sub.add_parser("export-schema", help="write schemas/run_config.schema.json from RunConfig")
    schema.add_argument("--check", action="store_true", help="exit 1 if the file on disk differs")
    return parser


def _runs_dir(value: str | None) -> Path:
    return Path(value) if value else default_runs_dir()


def cmd_train(args: argparse.Namespace) -> int:
    from .launcher import create_run
    from .store import StoreLockedError, ingest_once

    overrides = {"name": args.name, "step_delay": args.step_delay}
    config = load_preset(args.preset, **overrides) if args.preset else load_config_file(args.config, **overrides)
    if config.kind == "trl":
        check_lm_budget(config)  # refused before a folder is made or a model is loaded
    runs_dir = ensure_writable(_runs_dir(args.runs_dir))
    if args.run_id:
        run = RunDir(runs_dir / args.run_id)
        if not run.meta_path.is_file():
            raise UsageError(f"--run-id {args.run_id!r}: no run.json in {run.root}")
    else:
        run = create_run(runs_dir, config)
    log = (lambda message: None) if args.quiet else (lambda message: print(message, flush=True))
    print(f"run {run.run_id}: {config.kind} {config.scorer}, {config.total_steps} steps -> {run.root}", flush=True)
    status = engine(config.kind)(config, run, log=log)
    try:
        report = ingest_once(runs_dir, wait_s=0.0)
        print(f"run {run.run_id} {status}; ingested {report.rows} rows from {report.files} chunks", flush=True)
    except StoreLockedError:
        print(f"run {run.run_id} {status}; the store is open elsewhere (the dashboard ingests it)", flush=True)
    return 0 if status == "succeeded" else 3


def engine(kind: str):
    """The run-process function of an engine; each is imported only when its kind runs."""
    if kind == "trl":
        from .trl_runner import run_trl

        return run_trl
    if kind == "coding":
        from .coding_runner import run_coding

        return run_coding
    from .runner import run_tabular

    return run_tabular


def check_lm_budget(config) -> None:
    """A language-model run whose model is missing or whose memory budget does not fit is refused."""
    from .budget import BudgetError, run_budget
    from .trl_runner import ModelDirError, resolve_model_dir

    try:
        budget = run_budget(config, resolve_model_dir(config.lm.model))
    except (ModelDirError, BudgetError) as error:
        raise ConfigError(str(error)) from None
    if not budget.fits:
        raise ConfigError(budget.refusal())


def cmd_ingest(args: argparse.Namespace) -> int:
    from .store import ingest_once

    runs_dir = _runs_dir(args.runs_dir)
    if not runs_dir.is_dir():
        raise RunsDirError(f"runs directory {str(runs_dir)!r} does not exist")
    report = ingest_once(runs_dir)  # its Ingestor names each skipped chunk on stderr as it goes
    print(f"ingested {report.rows} rows from {report.files} chunks in {report.seconds:.2f}s "
          f"({report.runs_synced} run records updated)")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from .launcher import Launcher
    from .rundir import list_run_dirs

    runs_dir = _runs_dir(args.runs_dir)
    if runs_dir.is_dir() and os.access(runs_dir, os.W_OK):
        Launcher(runs_dir).reconcile()
    rows = []
    for run in list_run_dirs(runs_dir):
        meta, status = run.meta() or {}, run.status() or {}
        rows.append((run.run_id, meta.get("scorer", ""), status.get("status", "?"),
                     f"{status.get('step', 0)}/{meta.get('total_steps', '?')}", status.get("error") or ""))
    if not rows:
        print(f"no runs in {runs_dir}")
        return 0
    widths = [max(len(str(r[i])) for r in rows + [("run_id", "scorer", "status", "step", "")]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(("run_id", "scorer", "status", "step"), widths)))
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row[:4], widths)) + (f"  {row[4]}" if row[4] else ""))
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    for name in preset_names():
        config = load_preset(name)
        print(f"{name}: {config.kind}, scorer {config.scorer}, {config.rounds} rounds x group {config.group_size}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import ExportError, export_run
    from .store import connect

    runs_dir = _runs_dir(args.runs_dir)
    if not (runs_dir / "agentrl.duckdb").is_file():
        raise UsageError(f"no store in {runs_dir}; run `python -m agentrl ingest --runs-dir {runs_dir}` first")
    con = connect(runs_dir)
    try:
        paths = export_run(con, args.run_id, args.out, args.format)
    except ExportError as error:
        raise UsageError(str(error)) from None
    finally:
        con.close()
    for path in paths:
        print(path)
    return 0


def cmd_budget(args: argparse.Namespace) -> int:
    import psutil

    from .budget import GB, BudgetError, ModelShape, estimate_budget

    try:
        shape = ModelShape.from_config_dir(args.model)
        machine = args.machine_gb * GB if args.machine_gb else psutil.virtual_memory().total
        budget = estimate_budget(shape, args.rank, [t.strip() for t in args.targets.split(",") if t.strip()],
                                 args.rollouts, args.tokens, machine, bytes_per_param=args.bytes_per_param)
    except BudgetError as error:
        raise UsageError(str(error)) from None
    print(budget.table_text())
    if not budget.fits:
        print(f"error: {budget.refusal()}", file=sys.stderr)
        return 1
    return 0


def cmd_build_tiny_model(args: argparse.Namespace) -> int:
    from .tiny_model import BC_STEPS, MODEL_DIR, build_tiny_model

    if args.bc_steps is not None and args.bc_steps < 1:
        raise UsageError(f"--bc-steps must be at least 1, not {args.bc_steps}")
    out = Path(args.out) if args.out else MODEL_DIR
    try:  # before a minute of training: a folder that cannot be written is said now
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create --out {str(out)!r}: {error.strerror or error}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"--out {str(out)!r} is not writable; choose a folder you can write to")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    out = build_tiny_model(out, seed=args.seed, bc_steps=args.bc_steps or BC_STEPS)
    print(f"wrote {out}")
    return 0


def cmd_export_schema(args: argparse.Namespace) -> int:
    text = json_schema_text()
    if args.check:
        current = SCHEMA_PATH.read_text() if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is out of date; run: python -m agentrl export-schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


COMMANDS = {
    "train": cmd_train, "ingest": cmd_ingest, "runs": cmd_runs,
    "presets": cmd_presets, "export": cmd_export, "budget": cmd_budget, "build-tiny-model": cmd_build_tiny_model, "export-schema": cmd_export_schema,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .store import StoreLockedError

    try:
        return COMMANDS[args.command](args)
    except (ConfigError, RunsDirError, StoreLockedError, UsageError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
