"""Commands of the language-model engine: `budget` (SPEC section 11 before a run) and
`build-tiny-model` (a task's offline model: the committed refund and coding builds, rebuilt byte
for byte, or one for a user's task with demonstrations)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentrl.cli.common import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    tiny = sub.add_parser("build-tiny-model", help="build a tiny offline LM for a task (tokenizer, model, warm start by cloning)")
    tiny.add_argument("--task", default="refund", help="the task: 'refund' (default), 'coding', or a task with demonstrations "
                                                      "('path/to/file.py:NAME')")
    tiny.add_argument("--out", help="folder to write (default: the task's own default model, e.g. agentrl/assets/tiny-refund-lm)")
    tiny.add_argument("--seed", type=int, default=0, help="seed of the build (default 0; the committed build)")
    tiny.add_argument("--bc-steps", type=int, help="behaviour-cloning steps of the warm start (default: the committed build's)")
    tiny.set_defaults(func=cmd_build_tiny_model)

    budget = sub.add_parser("budget", help="print the memory budget of a LoRA GRPO run (SPEC section 11)")
    budget.add_argument("--model", required=True, help="a local Hugging Face model directory (its config.json is read)")
    budget.add_argument("--rank", type=int, default=8, help="LoRA rank (default 8)")
    budget.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                        help="comma-separated LoRA targets as PEFT takes them: module names (qkv_proj, gate_up_proj), "
                             "expert parameters (mlp.experts.gate_up_proj) or 'all-linear' (default: the seven Llama/Qwen projections)")
    budget.add_argument("--rollouts", type=int, default=8, help="sequences generated together (default 8)")
    budget.add_argument("--tokens", type=int, default=2048, help="tokens per sequence, prompt plus completion (default 2048)")
    budget.add_argument("--machine-gb", type=float, help="memory to plan for in GB (default: this machine's total)")
    budget.add_argument("--bytes-per-param", type=int, default=2, help="2 for BF16 (default), 4 for FP32")
    budget.add_argument("--json", action="store_true", help="print parameters, active_parameters, trainable and every row in bytes as JSON")
    budget.set_defaults(func=cmd_budget)


def cmd_budget(args: argparse.Namespace) -> int:
    import psutil

    import json

    from agentrl.engines.trl.budget import GB, BudgetError, estimate_budget
    from agentrl.engines.trl.model_count import load_counts

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not targets:
        raise UsageError(f"--targets {args.targets!r} names no module; give at least one, such as q_proj,v_proj")
    for name, value in (("--rank", args.rank), ("--rollouts", args.rollouts), ("--tokens", args.tokens)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1, not {value}")
    if args.bytes_per_param not in (1, 2, 4, 8):
        raise UsageError(f"--bytes-per-param must be 1, 2, 4 or 8, not {args.bytes_per_param}")
    if args.machine_gb is not None and not (0 < args.machine_gb < 1e6):
        raise UsageError(f"--machine-gb must be a positive number of GB, not {args.machine_gb}; leave it out for this machine's memory")
    model = Path(args.model)
    if model.exists() and not model.is_dir():
        raise UsageError(f"--model {args.model!r} is a file; give the model's folder (the one holding config.json)")
    try:
        counts = load_counts(model, args.rank, targets)
        machine = args.machine_gb * GB if args.machine_gb is not None else psutil.virtual_memory().total
        budget = estimate_budget(counts, args.rank, targets, args.rollouts, args.tokens, machine,
                                 bytes_per_param=args.bytes_per_param)
    except BudgetError as error:
        raise UsageError(str(error)) from None
    print(json.dumps(budget.to_json(), indent=2) if args.json else budget.table_text())
    if not budget.fits:
        print(f"error: {budget.refusal()}", file=sys.stderr)
        return 1
    return 0


def cmd_build_tiny_model(args: argparse.Namespace) -> int:
    from agentrl.tasks.loader import TaskError, load_task
    from agentrl.tasks.refund.tiny_model import BC_STEPS, build_tiny_model
    from agentrl.tasks.tiny_lm import build_task_model

    if args.bc_steps is not None and args.bc_steps < 1:
        raise UsageError(f"--bc-steps must be at least 1, not {args.bc_steps}")
    try:
        task = load_task(args.task)
    except TaskError as error:
        raise UsageError(str(error)) from None
    if args.task != "refund" and task.demonstrations is None:
        raise UsageError(f"task {args.task!r} has no demonstrations to clone a model on; give the Task a demonstrations function")
    if not args.out and not task.default_model:
        raise UsageError(f"task {args.task!r} has no default_model folder; give --out")
    out = Path(args.out) if args.out else Path(task.default_model)
    try:  # before a minute of training: a folder that cannot be written is said now
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create --out {str(out)!r}: {error.strerror or error}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"--out {str(out)!r} is not writable; choose a folder you can write to")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    if args.task == "refund":
        out = build_tiny_model(out, seed=args.seed, bc_steps=args.bc_steps or BC_STEPS)
    else:
        out = build_task_model(task, out, task.demonstrations(), seed=args.seed, bc_steps=args.bc_steps or BC_STEPS)
    print(f"wrote {out}")
    return 0
