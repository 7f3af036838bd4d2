"""Launch: choose a preset, change any field (the form is generated from the engine's config), see
the cost and the engine's preflight (a language-model run's memory budget), then start one run or
the outcome-vs-guarded pair, each as N seeds if asked. The Start buttons sit above the long form;
runs started together share a launch group, and a pair (or several seeds) opens on Compare at once."""

import streamlit as st

import ui
from agentrl.analysis import duration
from agentrl.config import ConfigError, config_from_json, load_preset, make_config, preset_names
from agentrl.engines.registry import engine_of
from agentrl.launch_configs import MAX_SEEDS, pair_configs, seed_configs
from agentrl.store import queries
from ui.forms import config_form
from ui.guard import SCRIPT_ENGINE_ENV, script_engine_allowed

svc = ui.page("Launch")
st.title("Launch a run")
st.caption("Configs are validated as you change them, and nothing starts on an invalid one. The tabular presets "
           "reproduce SPEC section 8; the lm-* presets train a language model with TRL's GRPO and a LoRA adapter.")

presets = preset_names()
preset = st.selectbox("Preset", presets, index=presets.index("refund-outcome") if "refund-outcome" in presets else 0,
                      help="A built-in config; every field below can be changed before starting.")
base = load_preset(preset)
engine = engine_of(base)
if engine.form_step_delay and not base.step_delay:
    # A tabular run trains in about a second: start the form slow enough to watch it live.
    base = base.model_copy(update={"step_delay": engine.form_step_delay})
st.markdown(f"**Engine:** {engine.title}")
st.caption(svc.launcher.describe())  # AGENTRL_BACKEND=ray: "Runs start as Ray jobs on ADDR; ..."
actions = st.container()  # the Start buttons, above the form: drawn once the form below is validated

as_json = st.toggle("Edit as JSON", key=f"json-{preset}", help="Every field, including the task lists, as the JSON a config file holds.")
config, error = None, None
if as_json:
    text = st.text_area("Config (JSON)", base.to_json(), height=400, key=f"json-text-{preset}")
    try:
        config = config_from_json(text)
    except ConfigError as problem:
        error = ui.plain(problem)  # JSON is edited by key: the message names the keys
else:
    values = config_form(base, key=f"form-{preset}", choices={"scorer": list(engine.scorers)})
    try:
        config = make_config(**values)
    except ConfigError as problem:  # the form names fields by their labels
        error = "\n".join(f"- **{p.label}**: {ui.plain(p.message)}" for p in problem.problems) or ui.plain(problem)

preflight, confirmed = None, True
if config is not None and engine_of(config).runs_any_command and not script_engine_allowed():
    # The script engine runs any command typed here: only the person who started the dashboard turns it on.
    error = (f"The script engine runs the command typed here, so it is off in the dashboard. Start the dashboard "
             f"with {SCRIPT_ENGINE_ENV}=1 (or `python -m ui.serve --allow-script-engine`) to use it; "
             f"`python -m agentrl train` runs it from a terminal either way.")
    config = None
if error:
    st.error(error)
else:
    st.caption("Cost: " + engine.cost(config))
    took = duration.estimate(config.total_steps, config.step_delay, queries.past_step_seconds(ui.cursor(), config.kind))
    st.caption("Time: " + took.text)
    if took.long:
        st.warning(took.warning, icon=":material/schedule:")
        confirmed = st.checkbox("Start it anyway", key=f"long-{preset}", help="A long run can be cancelled on the Live page.")
    with ui.shown_errors("check the run before it starts"):
        preflight = engine_of(config).preflight(config)
        if preflight.report:
            st.code(preflight.report, language="text")
        if preflight.refusal:
            st.error(f"This run cannot start: {ui.plain(preflight.refusal)}")
    if not as_json:
        with st.expander("Config as JSON"):
            st.code(config.to_json(), language="json")

can_start = config is not None and preflight is not None and not preflight.refusal and confirmed
may_act = ui.may_act()  # the browser holds the dashboard's key (ui.guard)
row = actions.container(horizontal=True, vertical_alignment="bottom")
seeds = row.number_input("Seeds", 1, MAX_SEEDS, 1, step=1, key="seeds", width=120,
                         help="Start this many runs of the config (or of each side of the pair), seeds "
                              "seed, seed + 1, ...: Compare draws them as one line with a band.")
why_not = None if may_act else ui.VIEW_ONLY
if may_act and not can_start:
    why_not = "Fix the settings below first (the error says which)." if error else "See below: the run cannot start as it is."
one = row.button("Start run" if seeds == 1 else f"Start {seeds} seeds", type="primary", key="start-one",
                 disabled=not (can_start and may_act), help=why_not)
pair = row.button("Start outcome-vs-guarded pair" if seeds == 1 else f"Start the pair × {seeds} seeds", key="start-pair",
                  disabled=not (can_start and may_act and engine_of(config).pair), help=why_not)

started: list[str] = []
if (one or pair) and can_start and ui.allowed("start a run"):
    with ui.shown_errors("start the run"):
        if pair:
            started = svc.launcher.start_pair(*pair_configs(config), seeds=int(seeds))
        elif seeds > 1:
            started = svc.launcher.start_group(seed_configs(config, int(seeds)))
        else:
            started = [svc.launcher.start(config)]
        svc.ingestor.ingest()  # the new runs are in the store before Live or Compare opens them

if len(started) > 1:  # a pair or several seeds: straight to Compare, side by side (seeds as one line)
    st.switch_page("pages/3_Compare.py", query_params={"run": started})
if started:
    actions.success("Started " + ", ".join(f"`{run_id}`" for run_id in started))
    actions.page_link("pages/2_Live.py", label="Watch it live", icon=":material/monitoring:", query_params={"run": started[0]})
