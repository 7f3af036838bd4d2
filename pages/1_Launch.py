"""Launch: choose a preset or fill the form, see the cost (and a language-model run's memory
budget), then start one run or the outcome-vs-guarded pair."""

import streamlit as st

import ui
from agentrl.config import ConfigError, load_preset, make_config, preset_names
from agentrl.scoring import SCORERS

svc = ui.page("Launch")
st.title("Launch a run")
st.caption("Configs are validated before anything starts. The tabular presets reproduce SPEC section 8; "
           "the lm-* presets train a language model with TRL's GRPO and a LoRA adapter.")

presets = preset_names()
preset = st.selectbox("Preset", presets, index=presets.index("refund-outcome") if "refund-outcome" in presets else 0,
                      help="A built-in config; every field below can be changed before starting.")
base = load_preset(preset)
fields = type(base).model_fields
lm_fields = type(base.lm).model_fields
ENGINES = {"tabular": "tabular policy", "trl": "language model (TRL GRPO + LoRA)", "coding": "coding attempts (sandboxed tests)"}


def help_of(name: str) -> str:
    return fields[name].description or ""


st.markdown(f"**Engine:** {ENGINES[base.kind]}")
with st.form(f"launch-{preset}"):
    left, middle, right = st.columns(3)
    name = left.text_input("Name", base.name, help=help_of("name"))
    scorers = ["tests"] if base.kind == "coding" else sorted(SCORERS)
    scorer = left.selectbox("Scorer", scorers, index=scorers.index(base.scorer), help=help_of("scorer"))
    rounds = middle.number_input("Rounds" if base.kind != "coding" else "Passes over the tasks", value=base.rounds, step=1,
                                 help=help_of("rounds"))
    group_size = middle.number_input("Group size", value=base.group_size, step=1, help=help_of("group_size"))
    seed = middle.number_input("Seed", value=base.seed, step=1, help=help_of("seed"))
    lr = right.number_input("Learning rate", value=base.lr, step=base.lr / 4, format="%.6f", help=help_of("lr"))
    eval_every = right.number_input("Evaluate every N rounds", value=base.eval_every, step=1, help=help_of("eval_every"))
    default_delay = 0.25 if base.kind == "tabular" else base.step_delay
    step_delay = right.number_input(
        "Step delay (s)", value=default_delay, step=0.05, format="%.2f",
        help=help_of("step_delay") + " For tabular runs the form starts at 0.25 s so a run can be watched; 0 trains at full speed.",
    )
    extra = {}
    if base.kind == "tabular":
        dagger = left.checkbox("DAgger round before RL", base.dagger, help=help_of("dagger"))
        epochs = middle.number_input("Epochs", value=base.epochs, step=1, help=help_of("epochs"))
        clip = right.number_input("Clip", value=base.clip, step=0.05, format="%.3f", help=help_of("clip"))
        extra = dict(dagger=dagger, epochs=int(epochs), clip=float(clip))
    elif base.kind == "trl":
        st.markdown("**Language model**")
        lm_left, lm_middle, lm_right = st.columns(3)
        lm = base.lm
        model = lm_left.text_input("Model directory", lm.model or "", placeholder="built-in tiny model",
                                   help=lm_fields["model"].description)
        lora_rank = lm_left.number_input("LoRA rank", value=lm.lora_rank, step=1, help=lm_fields["lora_rank"].description)
        lora_alpha = lm_left.number_input("LoRA alpha", value=lm.lora_alpha, step=1, help=lm_fields["lora_alpha"].description)
        tasks_per_step = lm_middle.number_input("Tasks per step", value=lm.tasks_per_step, step=1,
                                                help=lm_fields["tasks_per_step"].description)
        max_completion_length = lm_middle.number_input("Max completion tokens", value=lm.max_completion_length, step=8,
                                                       help=lm_fields["max_completion_length"].description)
        max_tool_calls = lm_middle.number_input("Max tool calls", value=lm.max_tool_calls, step=1,
                                                help=lm_fields["max_tool_calls"].description)
        temperature = lm_right.number_input("Temperature", value=lm.temperature, step=0.1, format="%.2f",
                                            help=lm_fields["temperature"].description)
        beta = lm_right.number_input("KL beta", value=lm.beta, step=0.01, format="%.3f", help=lm_fields["beta"].description)
        machine_gb = lm_right.number_input("Machine memory (GB, 0 = this machine)", value=lm.machine_memory_gb or 0.0,
                                           step=1.0, format="%.1f", help=lm_fields["machine_memory_gb"].description)
        extra = dict(lm=dict(lm.model_dump(), model=model.strip() or None, lora_rank=int(lora_rank), lora_alpha=int(lora_alpha),
                             tasks_per_step=int(tasks_per_step), max_completion_length=int(max_completion_length),
                             max_tool_calls=int(max_tool_calls), temperature=float(temperature), beta=float(beta),
                             machine_memory_gb=float(machine_gb) or None))
    else:
        workers = left.number_input("Parallel test runs (0 = one per core)", value=base.workers or 0, step=1,
                                    help=help_of("workers"))
        extra = dict(workers=int(workers) or None)
    one = st.form_submit_button("Start run", type="primary")
    pair = st.form_submit_button("Start outcome-vs-guarded pair", disabled=base.kind == "coding")

settings = dict(
    base.model_dump(), name=name, scorer=scorer, rounds=int(rounds), group_size=int(group_size), seed=int(seed),
    lr=float(lr), eval_every=int(eval_every), step_delay=float(step_delay), **extra,
)

try:
    config = make_config(**settings)
except ConfigError as error:
    config = None
    st.error(str(error))

refusal = None
if config is not None:
    if config.kind == "tabular":
        n_tasks = len(config.tasks)
        rollouts = config.rounds * n_tasks * config.group_size
        st.caption(
            f"Cost: {config.rounds} rounds × {n_tasks} tasks × group {config.group_size} = **{rollouts:,} sampled rollouts**, "
            f"each at most {config.max_steps} turns; {config.epochs} update epochs per round; "
            f"at least {config.rounds * config.step_delay:.0f} s of step delay."
        )
    elif config.kind == "trl":
        rollouts = config.rounds * config.lm.tasks_per_step * config.group_size
        st.caption(
            f"Cost: {config.rounds} optimiser steps × {config.lm.tasks_per_step} tasks × group {config.group_size} = "
            f"**{rollouts:,} multi-turn rollouts** of at most {config.lm.max_completion_length} tokens and "
            f"{config.lm.max_tool_calls} tool calls each, plus a greedy held-out evaluation every {config.eval_every} steps."
        )
        with ui.shown_errors("estimate the memory budget"):
            from agentrl.budget import BudgetError, run_budget
            from agentrl.trl_runner import ModelDirError, resolve_model_dir

            try:
                budget = run_budget(config, resolve_model_dir(config.lm.model))
                st.markdown("**Memory budget** (SPEC section 11, float32 on CPU; GB = 10⁹ bytes)")
                st.code(budget.table_text(), language="text")
                refusal = budget.refusal()
            except (ModelDirError, BudgetError) as error:
                refusal = str(error)
            if refusal:
                st.error(f"This run cannot start: {refusal}")
    else:
        from agentrl.coding_tasks import CODING_TASKS

        st.caption(f"Cost: {config.rounds} pass(es) over {len(CODING_TASKS)} coding tasks, each a group of scripted "
                   f"attempts whose test suites run in the sandbox, {config.workers or 'one per core'} at a time.")
    with st.expander("Config as JSON"):
        st.code(config.to_json(), language="json")

started: list[str] = []
if (one or pair) and config is not None and refusal is None:
    with ui.shown_errors("start the run"):
        if one:
            started = [svc.launcher.start(config)]
        else:
            base_name = config.name.removesuffix("-outcome").removesuffix("-guarded")
            outcome = make_config(**dict(settings, scorer="outcome", name=f"{base_name}-outcome"))
            guarded = make_config(**dict(settings, scorer="guarded", name=f"{base_name}-guarded"))
            started = list(svc.launcher.start_pair(outcome, guarded))
        svc.ingestor.ingest()  # the new runs are in the store before the Live link is followed

if started:
    st.success("Started " + ", ".join(f"`{run_id}`" for run_id in started))
    st.page_link("pages/2_Live.py", label="Watch it live", icon=":material/monitoring:", query_params={"run": started[-1]})
