"""Commands about runs: `train` (one run in the foreground), `runs`, `cancel`, `dashboard`, `presets`,
`export-schema`."""

from __future__ import annotations

import argparse
import os
import sys

from agentrl.cli.common import UsageError, add_runs_dir, config_from_args, runs_dir_of
from agentrl.config import SCHEMA_PATH, ConfigError, json_schema_text, load_preset, preset_names
from agentrl.record.rundir import RunDir, ensure_writable


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="run one training run in the foreground")
    source = train.add_mutually_exclusive_group()
    source.add_argument("--preset", help=f"a built-in config: {', '.join(preset_names())}")
    source.add_argument("--config", help="a JSON run config (see schemas/run_config.schema.json)")
    source.add_argument("--config-json", help=argparse.SUPPRESS)  # the config as text: from a launcher on another machine
    train.add_argument("--task", help="the task of a language-model run: 'refund', 'coding', 'path/to/file.py:NAME' or "
                                      "'module:NAME' (alone: the default language-model config on that task)")
    add_runs_dir(train)
    train.add_argument("--name", help="override the run's name")
    train.add_argument("--step-delay", type=float, help="seconds to pause after each step, to watch a run live")
    train.add_argument("--scorer", help="override the scorer: 'outcome' or 'guarded'")
    train.add_argument("--run-id", help=argparse.SUPPRESS)  # set by the launcher, which made the folder
    train.add_argument("--no-ingest", action="store_true",  # a Ray job: the dashboard is the one store writer
                       help="leave the chunks for the dashboard or `agentrl ingest` (a run on another machine)")
    train.add_argument("--quiet", action="store_true", help="print only the run id and the final status, not every step")
    train.add_argument("--chunks-url", help="write the run's chunks under URL/<run_id>/: a shared folder or an fsspec "
                                            "URL such as s3://bucket/chunks (default $AGENTRL_CHUNKS_URL; run.json says where)")
    train.set_defaults(func=cmd_train)

    runs = sub.add_parser("runs", help="list runs with their status, newest first")
    add_runs_dir(runs)
    runs.set_defaults(func=cmd_runs)

    cancel = sub.add_parser("cancel", help="ask a run to stop (as the Live page's Cancel does) and wait for it to end")
    cancel.add_argument("run_id", help="the run's id (see `agentrl runs`)")
    add_runs_dir(cancel)
    cancel.add_argument("--grace", type=float, default=None,
                        help="seconds the run has to stop on its own before its process is killed (default 10)")
    cancel.add_argument("--no-wait", action="store_true",
                        help="only ask: return at once (the dashboard, or a later `agentrl runs`, enforces the grace period)")
    cancel.set_defaults(func=cmd_cancel)

    dashboard = sub.add_parser("dashboard", help="start the dashboard on the runs directory of this folder (as `make run` does)")
    add_runs_dir(dashboard)
    dashboard.add_argument("--port", type=int, default=8501, help="the port to serve on (default 8501)")
    dashboard.set_defaults(func=cmd_dashboard)

    presets = sub.add_parser("presets", help="list the built-in presets")
    presets.set_defaults(func=cmd_presets)

    schema = sub.add_parser("export-schema", help="write schemas/run_config.schema.json from the config classes")
    schema.add_argument("--check", action="store_true", help="exit 1 if the file on disk differs")
    schema.set_defaults(func=cmd_export_schema)


def cmd_train(args: argparse.Namespace) -> int:
    import duckdb

    from agentrl.engines.registry import engine_of
    from agentrl.launcher import create_run
    from agentrl.store.ingest import StoreError, StoreLockedError, ingest_once
    from agentrl.supervisor import supervise

    config = config_from_args(args, "train")
    engine = engine_of(config)
    refusal = engine.preflight(config).refusal  # before a folder is made or a model is loaded
    if refusal:
        raise ConfigError(refusal)
    from agentrl.record.locations import CHUNKS_URL_ENV, ChunkLocationError, check_chunks_url

    chunks_url = args.chunks_url or os.environ.get(CHUNKS_URL_ENV)
    if chunks_url:  # checked (and the storage asked) before a folder is made; the run process finds it in its environment
        try:
            os.environ[CHUNKS_URL_ENV] = check_chunks_url(chunks_url, reach=True)
        except ChunkLocationError as error:
            raise UsageError(str(error)) from None
    runs_dir = ensure_writable(runs_dir_of(args))
    from agentrl.launcher import with_fixtures

    if not args.run_id:
        config = with_fixtures(runs_dir, config)  # the config the run uses is the one its folder records
    if args.run_id:
        run = _launched_run(runs_dir, args.run_id, config, chunks_url)
    else:
        run = create_run(runs_dir, config)
    log = (lambda message: None) if args.quiet else (lambda message: print(message, flush=True))
    print(f"run {run.run_id}: {config.kind} {config.scorer}, {config.total_steps or 'an unknown number of'} steps -> {run.root}", flush=True)
    # The engine runs in a worker process; this one records its end even when it is killed.
    supervise(run, lambda: engine.run(config, run, log=log))
    final = run.status() or {}
    status = final.get("status", "failed")
    if not run.root.is_dir():  # removed under the run: nothing of it is left to say how it ended
        final = {"error": "the run folder was removed while it ran"}
    if status != "succeeded" and final.get("error"):
        status += f" ({' '.join(str(final['error']).split())[:300]})"
    if args.no_ingest:
        print(f"run {run.run_id} {status}; its chunks wait in {run.root} for the dashboard to ingest", flush=True)
        return 0 if status == "succeeded" else 3
    try:
        report = ingest_once(runs_dir, wait_s=0.0, chunks_url="")  # this run; runs of other machines are a head's
        print(f"run {run.run_id} {status}; ingested {report.rows} rows from {report.files} chunks", flush=True)
    except StoreLockedError:
        print(f"run {run.run_id} {status}; the store is open elsewhere (the dashboard ingests it)", flush=True)
    except StoreError as error:  # damaged, full: the run's chunks wait on disk, and the line says what to do
        print(f"run {run.run_id} {status}; not ingested now: {error}", flush=True)
    except (duckdb.Error, OSError) as error:
        reason = " ".join(str(error).split())[:300]
        print(f"run {run.run_id} {status}; not ingested now ({reason}); "
              f"`python -m agentrl ingest --runs-dir {runs_dir}` takes it later", flush=True)
    return 0 if status == "succeeded" else 3


def _launched_run(runs_dir, run_id: str, config, chunks_url: str | None) -> RunDir:
    """The folder a launcher made for this run; or, for a run launched from a machine that shares
    only an object-store chunks URL with this one (a Ray job on another node), a new folder here
    with the id that launcher gave it."""
    from agentrl.launcher import create_run
    from agentrl.record.published import is_copy, publishes, valid_run_id
    from agentrl.record.rundir import RunsDirError, read_json

    if not valid_run_id(run_id):
        raise UsageError(f"--run-id {run_id!r} cannot name a run folder; use letters, digits, '.', '_' and '-'")
    run = RunDir(runs_dir / run_id)
    if run.meta_path.is_file() and publishes(chunks_url) and is_copy(read_json(run.meta_path)):
        raise UsageError(f"--run-id {run_id!r}: {run.root} is the launcher's copy of this run: this node shares its runs "
                         "directory with the launcher; give the node a runs directory of its own ($AGENTRL_RUNS_DIR "
                         "where `ray start` runs), or launch without a chunks URL")
    if run.meta_path.is_file():
        return run
    if not publishes(chunks_url):
        raise UsageError(f"--run-id {run_id!r}: no run.json in {run.root}")
    try:
        return create_run(runs_dir, config, run_id=run_id)
    except RunsDirError as error:
        raise UsageError(str(error)) from None


def cmd_runs(args: argparse.Namespace) -> int:
    from agentrl.launcher import Launcher
    from agentrl.record.rundir import list_run_dirs
    from agentrl.record.runfiles import RunFileError, read_meta, read_status

    runs_dir = runs_dir_of(args)
    if runs_dir.is_dir() and os.access(runs_dir, os.W_OK):
        Launcher(runs_dir).reconcile()
    rows = []
    for run in list_run_dirs(runs_dir):
        try:
            meta, status = read_meta(run) or {}, read_status(run) or {}
        except RunFileError as error:  # that run only, named with its file
            rows.append((run.run_id, "?", "unreadable", "?", str(error)))
            continue
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


def cmd_cancel(args: argparse.Namespace) -> int:
    """Write the run's stop file; a run honours it between steps (a script recording through
    `agentrl.init` is interrupted as by Ctrl-C). Then wait: once the grace period has passed,
    the run's process group is killed and the run marked cancelled."""
    import time

    from agentrl.launcher import CANCEL_GRACE_S, Launcher
    from agentrl.record.rundir import TERMINAL_STATUSES
    from agentrl.record.runfiles import RunFileError, read_status

    runs_dir = runs_dir_of(args)
    grace = CANCEL_GRACE_S if args.grace is None else args.grace
    if not grace >= 0:
        raise UsageError(f"--grace must be a number of seconds, 0 or more, not {args.grace}")
    run = RunDir(runs_dir / args.run_id)
    if "/" in args.run_id or args.run_id in ("", ".", "..") or not run.meta_path.is_file():
        raise UsageError(f"no run {args.run_id!r} in {runs_dir} (see `agentrl runs --runs-dir {runs_dir}`)")
    try:
        status = (read_status(run) or {}).get("status")
    except RunFileError as error:
        raise UsageError(str(error)) from None
    if status in TERMINAL_STATUSES:
        print(f"run {args.run_id} already ended: {status}")
        return 0
    launcher = Launcher(runs_dir)
    launcher.cancel(args.run_id)
    if args.no_wait:
        print(f"asked run {args.run_id} to stop; it stops at its next step")
        return 0
    print(f"asked run {args.run_id} to stop; waiting up to {grace:g}s before killing it", flush=True)
    deadline = time.monotonic() + grace + 5.0
    while time.monotonic() < deadline:
        launcher.reconcile(grace_s=grace)  # kills it once the grace period has passed, and marks it
        status = (run.status() or {}).get("status")
        if status in TERMINAL_STATUSES:
            error = (run.status() or {}).get("error")
            print(f"run {args.run_id} {status}" + (f": {error}" if error else ""))
            return 0
        time.sleep(0.2)
    print(f"run {args.run_id} has not ended yet; its stop file stays, and `agentrl runs` will mark it once it has")
    return 1


def cmd_dashboard(args: argparse.Namespace) -> int:
    """`streamlit run app.py` from the project's folder (its .streamlit/config.toml applies), on the
    runs directory of the folder the command was given in, not the project's."""
    import subprocess

    from agentrl.paths import PROJECT_ROOT
    from agentrl.record.rundir import RUNS_DIR_ENV

    app = PROJECT_ROOT / "app.py"
    if not app.is_file():
        raise UsageError(f"no dashboard beside this agentrl ({app} is missing): install it from a checkout with `pip install -e`")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be between 1 and 65535, not {args.port}")
    runs_dir = ensure_writable(runs_dir_of(args)).resolve()
    env = dict(os.environ, **{RUNS_DIR_ENV: str(runs_dir)})
    env.setdefault("HF_HUB_OFFLINE", "1")
    print(f"agentrl dashboard on http://127.0.0.1:{args.port} (runs in {runs_dir})", flush=True)
    try:
        return subprocess.call([sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(args.port)],
                               cwd=PROJECT_ROOT, env=env)
    except KeyboardInterrupt:
        return 130


def cmd_presets(args: argparse.Namespace) -> int:
    for name in preset_names():
        config = load_preset(name)
        print(f"{name}: {config.kind}, scorer {config.scorer}, {config.total_steps} steps")
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
