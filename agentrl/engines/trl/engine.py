"""The run process of kind 'trl': GRPO with a LoRA adapter on a causal LM, on any task, telemetry as chunks.

`python -m agentrl train` lands here for a config of kind 'trl' (launch -> **run process** ->
chunks -> store -> page). It mirrors the tabular engine: status.json goes running -> final, a
stop request (SIGTERM/SIGINT or the stop file) is honoured between optimiser steps, the database
is never opened, and every step streams the same tables the tabular engine writes: `steps`
(with every metric TRL logged in `metrics`), `trajectories` (prompt and completion text, every
reward function's value as a component, the guard's flags and reason), `action_probs` (the
next-tool distribution at the task's decision points, from step 0), `evals` (greedy episodes on
the task's eval rows, and its exploit probes at the end), `hardware` and `budgets`.

The task comes through `agentrl.tasks.load_task` (`config.task`); the training is TRL's:
`VetoGRPOTrainer` with the task's `environment_factory`, its reward functions and the guard
(`agentrl.engines.trl.task_rewards`). One optimiser step per round: `config.rounds` steps, each
on `lm.tasks_per_step` rows x `group_size` rollouts. Torch, transformers, TRL and PEFT are
imported when a run starts, never at import.

With `distributed.num_processes` above 1, `run_trl` hands the run to
`agentrl.engines.trl.distributed`, which starts `accelerate launch`; every process it starts runs
`_train` below (`agentrl.engines.trl.rank`), agreeing through `agentrl.engines.trl.ranks.Ranks`
where they must (the whole batch, the stop decision), and only the main one records.
"""

from __future__ import annotations

import math
import os
import resource
import time
import warnings
from collections.abc import Callable
from pathlib import Path


from agentrl.engines.registry import Preflight
from agentrl.engines.trl.config import TrlConfig as RunConfig
from agentrl.monitor import Episode, RunMonitor
from agentrl.record.behaviour import default_behaviour
from agentrl.record.rows import EvalRecord, EventRecord, StepRecord, TrajectoryRecord, finite
from agentrl.record.run import Run
from agentrl.record.rundir import RunDir
from agentrl.scorers import RolloutScore, call_reward_funcs, score_rollouts
from agentrl.tasks.contract import Task, tool_methods
from agentrl.tasks.loader import load_task

ADAPTER_DIR = "adapter"  # the trained LoRA adapter, beside the run's chunks
CPU_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}


class ModelDirError(ValueError):
    """The configured model cannot be used; the message says which path and what to change."""


def resolve_model_dir(model: str | None, task: Task | None = None) -> Path:
    """`lm.model` as a local directory; when empty, the task's default model (its built tiny model)
    or the built-in refund model. Never a hub id."""
    from agentrl.tasks.refund.tiny_model import default_model_dir

    if model:
        path = Path(model).expanduser()
    elif task is not None and task.default_model:
        path = Path(task.default_model)
    else:
        path = default_model_dir()
    if not path.is_dir():
        raise ModelDirError(f"model directory {str(path)!r} does not exist; set lm.model to a local Hugging Face model folder (nothing is downloaded)")
    if not (path / "config.json").is_file():
        raise ModelDirError(f"{str(path)!r} has no config.json; point lm.model at the folder holding the model's config.json")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ModelDirError(f"{str(path)!r} has no tokenizer (tokenizer.json or tokenizer_config.json); the model folder must include its tokenizer")
    return path


def preflight(config: RunConfig) -> Preflight:
    """Before anything loads: the memory budget (SPEC section 11) as a table, and a refusal when
    the model directory is missing, the budget does not fit, or the machine cannot run the
    processes, sharding or vLLM the config asks for."""
    from agentrl.engines.trl.budget import BudgetError, run_budget
    from agentrl.engines.trl.distributed import machine_refusal

    try:
        task = load_task(config.task)
        budget = run_budget(config, resolve_model_dir(config.lm.model, task), sandbox_bytes=task.sandbox_bytes)
    except (ModelDirError, BudgetError) as error:
        return Preflight(refusal=str(error))
    where = "float32 on CPU" if config.distributed.num_processes == 1 else "float32"
    report = f"Memory budget (SPEC section 11, {where}; GB = 10^9 bytes)\n" + budget.table_text()
    return Preflight(report=report, refusal=machine_refusal(config) or budget.refusal())


def load_tokenizer(model_dir: Path):
    """The model's tokenizer, with a chat template that can call tools."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import supports_tool_calling

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not supports_tool_calling(tokenizer):
        raise ModelDirError(f"the chat template of {str(model_dir)!r} cannot render tool calls; use a model whose template supports tools")
    return tokenizer


def grpo_args(config: RunConfig, output_dir: Path, reward_weights: list[float] | None = None):
    """TRL's `GRPOConfig` for a run: the run config's settings plus the CPU settings measured here.
    On several processes each takes an equal share of the step's rollouts (the config checks that
    they divide evenly), so a step is the same batch whatever the number of processes."""
    import torch
    from trl import GRPOConfig

    lm, distributed = config.lm, config.distributed
    vllm = {"vllm_server_base_url": distributed.vllm_server_url} if distributed.vllm_server_url else {}
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=config.rounds,
        per_device_train_batch_size=lm.tasks_per_step * config.group_size // distributed.num_processes,
        gradient_accumulation_steps=1,  # one generation batch, one optimiser step: on-policy
        num_generations=config.group_size,
        reward_weights=reward_weights,
        learning_rate=config.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        seed=config.seed,
        max_completion_length=lm.max_completion_length,
        max_tool_calling_iterations=lm.max_tool_calls,
        temperature=lm.temperature,
        top_k=0,
        top_p=1.0,
        beta=lm.beta,
        epsilon=config.clip,
        loss_type="dapo",  # the veto's exactness (masked = removed) is measured for this loss
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        disable_tqdm=True,
        logging_steps=1,
        save_strategy="no",
        dataloader_num_workers=0,
        use_vllm=distributed.use_vllm,  # passed through for GPU machines; untested here
        vllm_mode=distributed.vllm_mode,
        **vllm,
    )


def _peak_rss_bytes(sampled_peak: int) -> int:
    # ru_maxrss is in KiB on Linux: the kernel's own peak of this process (children separately).
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return max(sampled_peak, own + children)



def run_trl(config: RunConfig, run_dir: RunDir, log: Callable[[str], None] = print) -> str:
    """Train `config` (kind 'trl') into `run_dir`; returns the final status. Several processes:
    `accelerate launch` starts them, and this process keeps the run's lifecycle."""
    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    if config.distributed.num_processes > 1:
        from agentrl.engines.trl.distributed import run_distributed

        return run_distributed(config, run_dir, log)

    with Run(run_dir, config.total_steps, config.step_delay, handle_signals=True,
             before_close=lambda run: record_measured_budget(run, log)) as run:
        run.finish(_train(config, run, log), run.error)
    return run.status


def record_measured_budget(run: Run, log: Callable[[str], None]) -> None:
    """The run's measured peak memory as `budgets` rows (source 'measured'), as the run closes."""
    try:
        from agentrl.engines.trl.budget import measured_rows

        run.log_budget(measured_rows(run.run_id, _peak_rss_bytes(run.peak_rss_bytes), getattr(run, "gpu_peak_bytes", None)))
    except Exception as exc:  # telemetry must not turn a finished run into a failed one
        log(f"budget: no measured rows ({type(exc).__name__}: {exc})")


def _load_model(config: RunConfig, task: Task):
    import torch

    torch.set_num_threads(1)  # two threads gave erratic 0.14-4 s steps on this kind of machine
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    # transformers deprecates the `gradient_checkpointing` name TRL's config still carries.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")
    model_dir = resolve_model_dir(config.lm.model, task)
    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, local_files_only=True)
    return model_dir, tokenizer, model


def _prompt_tokens(task: Task, tokenizer, row: dict) -> int:
    """Tokens of one rollout's prompt: the row's prompt, what `reset` appends, the tool schemas."""
    from agentrl.tasks.episodes import render_ids, start_conversation

    environment = task.environment_factory()
    return len(render_ids(tokenizer, start_conversation(environment, row), tool_methods(environment), add_generation_prompt=True))


def _train(config: RunConfig, run: Run, log: Callable[[str], None], ranks=None) -> str:
    """The run, in one process or in each of several (`ranks`; the others pass a `SilentRun`)."""
    from agentrl.engines.trl.ranks import Ranks

    ranks = ranks or Ranks()
    stop = run.stop
    started_load = time.monotonic()
    task = load_task(config.task)
    model_dir, tokenizer, model = _load_model(config, task)
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback

    from agentrl.engines.trl.model_count import lora_config

    from agentrl.engines.trl.task_rewards import TaskRewards
    from agentrl.engines.trl.veto import VetoGRPOTrainer
    from agentrl.tasks.episodes import candidate_calls, next_call_distribution, play_greedy

    lm = config.lm
    base_parameters = sum(p.numel() for p in model.parameters())  # before PEFT adds the adapter
    rows, eval_rows, probes = task.train_dataset(), task.eval_dataset(), task.exploit_probes()
    prompt_tokens = _prompt_tokens(task, tokenizer, rows[0])
    budget = _write_budget_estimate(config, model_dir, prompt_tokens, task.sandbox_bytes, run, log)
    gpu = _gpu_peaks()

    # Every batch holds `tasks_per_step` distinct dataset rows; repeat the rows when there are fewer.
    repeats = max(1, math.ceil(lm.tasks_per_step / len(rows)))
    rewards = TaskRewards(task, config.scorer, fixtures=config.fixtures or (), scanners=config.scanners or ())
    trainer = VetoGRPOTrainer(
        model=model,
        reward_funcs=rewards.functions(),
        args=grpo_args(config, run.dir.root / "trl", reward_weights=rewards.weights()),
        train_dataset=Dataset.from_list(rows * repeats),
        processing_class=tokenizer,
        # The same LoraConfig the budget counted: expert parameters go to PEFT's target_parameters.
        peft_config=lora_config(model, lm.lora_rank, list(lm.lora_targets), alpha=lm.lora_alpha),
        environment_factory=task.environment_factory,
        eligibility=rewards.eligibility,
    )
    trainer.remove_callback(PrinterCallback)  # our own one line per step instead of TRL's dicts
    log(f"task {task.name}: {len(rows)} train rows, {len(eval_rows)} eval rows, {len(probes)} exploit probes; "
        f"model {model_dir} ({base_parameters:,} parameters, "
        f"{sum(p.numel() for p in trainer.model.parameters() if p.requires_grad):,} trainable), "
        f"prompt {prompt_tokens} tokens; loaded in {time.monotonic() - started_load:.1f}s")

    points = task.decisions()
    tools = tool_methods(task.environment_factory())
    recorded = [points[name] for name in (config.decision_points or list(points))]

    def record_policy(step: int) -> dict[str, dict[str, float]]:
        distributions = {}
        for point in recorded:
            distributions[point.name] = next_call_distribution(
                trainer.model, tokenizer, point.conversations, tools, candidate_calls(point, tools))
            run.log_action_probs(step, point.name, distributions[point.name])
        return distributions

    evaluated: set[tuple[int, str]] = set()

    def record_eval(step: int, split: str = "held_out") -> list | None:
        if (step, split) in evaluated:
            return None  # a run cancelled on an evaluation step was already evaluated there
        evaluated.add((step, split))
        on = eval_rows if split == "held_out" else probes
        if not on:
            return None
        episodes = play_greedy(trainer.model, tokenizer, task, on, max_turns=lm.max_tool_calls, max_new_tokens=lm.max_completion_length)
        scores = _score_episodes(task, config.scorer, episodes, config.fixtures or (), rewards.scanners)
        ids = [str(e.row.get("task_id", f"{split}-{i}")) for i, e in enumerate(episodes)]
        run.log_evals([EvalRecord(step, split, task_id, s.actions, s.success, s.violation) for task_id, s in zip(ids, scores)])
        if split == "held_out":
            log(f"eval step {step}: {sum(s.success for s in scores)}/{len(scores)} succeed, {sum(s.violation for s in scores)} violate")
        return scores

    monitor = RunMonitor()
    monitor.start(record_policy(0))
    record_eval(0)
    onset_stop: list[str] = []  # the reason, once an onset stops the run
    run.writer.flush_soon()
    run.start_clock()

    from agentrl.integrations.trl import AgentrlCallback  # transformers, loaded with the run

    class EngineCallback(AgentrlCallback):
        """The same callback a user's GRPO script adds (agentrl.integrations.trl), writing into this
        run: a step's trajectories come from the vetoed batch (with every reward component, the
        guard's flags and the veto), then its decision-point distributions and evaluations, then its
        step row; a stop request ends training after the step."""

        def before_step_row(self, step):
            distributions = record_policy(step)
            if config.eval_every and step % config.eval_every == 0 and step != config.rounds:
                record_eval(step)
            probes = None
            if config.probe_every and step % config.probe_every == 0 and step != config.rounds:
                scores = record_eval(step, split="probe")  # the exploit probes now, not only at the end
                probes = [s.violation for s in scores] if scores else None
            rows = self.logged_trajectories
            onset = monitor.observe(step, [(t.reward, t.violation, t.success, t.vetoed) for t in rows], distributions, probes,
                                    episodes=[Episode(step, t.behaviour or default_behaviour(t.actions), tuple(t.states or ()),
                                                      tuple(t.actions or ()), bool(t.violation)) for t in rows],
                                    components=[t.components or {} for t in rows])
            if onset is not None:
                run.log("events", [EventRecord(step, "onset", onset.signal, onset.value, onset.threshold, onset.message)])
                log(onset.message + ("; stopping the run (on_onset: stop)" if config.on_onset == "stop" else ""))
                if config.on_onset == "stop":
                    onset_stop.append(onset.message)

        def trajectories(self, step, completions, logs):
            # Several processes: each holds a slice of the batch; every one gathers the whole here.
            self.logged_trajectories, self.step_batch = ranks.whole_step(
                _trajectory_records(step, trainer.last_batch, rewards), trainer.last_batch)
            return self.logged_trajectories

        def step_row(self, step, logs, trajectories):
            logs = {**logs, **_gpu_step_metrics(ranks, gpu)}  # every process's GPU peak of this step
            self.last_row, self.last_logs = _step_record(step, self.step_batch, trajectories, logs), logs
            return self.last_row

        def step_recorded(self, step):
            batch, row, logs = self.step_batch, self.last_row, self.last_logs
            log(f"step {step}/{config.rounds} success {row.success_rate:.2f} violation {row.violation_rate:.2f} "
                f"reward {logs['reward']:.3f} vetoed {batch.n_vetoed} updates {batch.updates} "
                f"vetoed updates {batch.vetoed_updates} ({logs.get('step_time', float('nan')):.2f}s)")
            run.step_done(step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "reward" not in logs or trainer.last_batch is None:
                return control  # the end-of-training summary, not a step
            if ranks.many:  # every process records the step (the others silently): its collectives line up
                self._pending.setdefault(state.global_step, {}).update(logs)
                self._record_ready()
            else:
                super().on_log(args, state, control, logs=logs, **kwargs)
            # Asked during this step (TRL logs after its on_step_end): stop now, not a step later.
            # The main process decides for all of them, so they stop after the same step.
            if ranks.agree(stop() or bool(onset_stop)):
                control.should_training_stop = True
            return control

        def on_step_end(self, args, state, control, **kwargs):
            if ranks.many:
                return control  # the main process alone would stop here; `on_log` stops them all
            return super().on_step_end(args, state, control, **kwargs)

    trainer.add_callback(EngineCallback(run=run, scorer=config.scorer))
    if not ranks.agree(stop()):
        trainer.train()
    completed = trainer.state.global_step
    record_eval(completed)
    record_eval(completed, split="probe")  # the promotion gate's exploit probes
    ranks.save_adapter(trainer, run.dir.root / ADAPTER_DIR)  # what a promotion bundles
    vetoed, vetoed_updates = ranks.sums([trainer.vetoed_total, trainer.vetoed_updates_total])
    _record_gpu_peaks(ranks, gpu, budget, run)
    log(f"totals: steps {completed} vetoed {vetoed} vetoed updates {vetoed_updates}")
    if onset_stop:
        run.error = f"stopped: {onset_stop[0]}"
        return "cancelled"
    return "cancelled" if completed < config.rounds else "succeeded"


def _score_episodes(task: Task, scorer: str, episodes, fixtures=(), scanners=()) -> list[RolloutScore]:
    """Greedy episodes scored as a training batch is: every reward function, then the guard."""
    prompts = [e.messages[: e.prompt_length] for e in episodes]
    completions = [e.completion for e in episodes]
    environments = [e.environment for e in episodes]
    values = call_reward_funcs(task, prompts, completions, environments, [e.row for e in episodes])
    return score_rollouts(task, scorer, values, completions, environments, fixtures=fixtures, scanners=scanners)


def _trajectory_records(step: int, batch, rewards) -> list[TrajectoryRecord]:
    rows = []
    for i, score in enumerate(rewards.scores):
        fields = score.fields
        rows.append(TrajectoryRecord(
            step=step, traj_idx=i, task_id=rewards.task_ids[i], amount=fields.get("amount"),
            states=list(fields.get("states") or []), actions=score.actions,
            behavior_logps=None,  # token log-probs live in TRL; a tool call has no single one
            # One sequence-level advantage, the same for every turn of the completion.
            advantages=[batch.advantages[i]] * max(1, len(score.actions)),
            reward=score.reward, components=score.components, success=score.success, violation=score.violation,
            duplicate_effect=bool(fields.get("duplicate_effect", False)), eligible=score.eligible,
            vetoed=batch.vetoed[i], updated=batch.updated[i], prompt=batch.prompts[i], completion=batch.completions[i],
            verifier_reason=score.reason or None, behaviour=score.behaviour,
        ))
    return rows


def _step_record(step: int, batch, trajectories: list[TrajectoryRecord], logs: dict) -> StepRecord:
    # TRL reports the clipped share of loss tokens; as a count it is that share of the tokens in the loss.
    clipped = round(float(logs.get("clip_ratio/region_mean") or 0.0) * batch.loss_tokens)
    return StepRecord.from_trajectories(
        step, trajectories, vetoed=batch.n_vetoed, vetoed_updates=batch.vetoed_updates, updates=batch.updates,
        clipped=clipped, clipped_by_epoch=[clipped], metrics=finite(logs),
    )


def _gpu_peaks():
    """This process's GPU peak tracker, with NVML only where CUDA is (no GPU: no NVML call)."""
    import torch

    from agentrl.record.hardware import GpuPeaks, load_nvml

    return GpuPeaks(nvml=load_nvml() if torch.cuda.is_available() else None)


def _gpu_step_metrics(ranks, gpu) -> dict[str, float]:
    """The step's GPU peaks of every process as step metrics ('gpu/peak_allocated_bytes/rank 0', ...);
    {} without a GPU. Every process calls it at the same point of the step (a gather)."""
    peak = gpu.step()
    if not peak:
        return {}
    metrics = {}
    for rank, each in enumerate(ranks.gather(peak)):
        for name, value in (each or {}).items():
            metrics[f"gpu/peak_{name}/rank {rank}"] = float(value)
    return metrics


def _record_gpu_peaks(ranks, gpu, budget, run) -> None:
    """The run's GPU peak of every process as `budgets` rows beside the budget's per-GPU estimate,
    and their sum for the measured total. Every process calls it (a gather); the main one writes."""
    from agentrl.record.hardware import gpu_rank_rows

    if not gpu.measured:
        return
    peaks = ranks.gather(gpu.run_peak())
    if not ranks.main:
        return
    estimate = getattr(budget, "per_device", None)
    if estimate is None and budget is not None:
        estimate = sum(getattr(budget, name) for name in ("weights", "adapter", "kv_cache", "activations_logits"))
    run.log_budget(gpu_rank_rows(run.run_id, peaks, estimate))
    run.gpu_peak_bytes = sum(int(p.get("allocated_bytes") or 0) for p in peaks if p)


def _write_budget_estimate(config: RunConfig, model_dir: Path, prompt_tokens: int, sandbox_bytes: int, run: Run, log):
    """SPEC 11's estimate for this run (source 'estimate'), from the model's config.json and the
    prompt length the tokenizer measured; the budget, or None when it could not be made."""
    try:
        from agentrl.engines.trl.budget import run_budget

        budget = run_budget(config, model_dir, prompt_tokens=prompt_tokens, sandbox_bytes=sandbox_bytes)
    except Exception as exc:  # an unreadable shape must not stop the run; the Hardware page shows no estimate
        log(f"budget: no estimate ({type(exc).__name__}: {exc})")
        return None
    run.log_budget(budget.rows(run.run_id))
    # In MB, not the table's GB: a tiny model's budget would print as zeros.
    parts = ", ".join(f"{name} {n_bytes / 1e6:.1f} MB" for name, n_bytes in budget.components() if name != "os_reserve")
    log(f"budget estimate: {parts}; run total {budget.run_total / 1e6:.1f} MB, free {budget.free / 1e9:.1f} GB")
    return budget
