"""Launch: choose a preset or fill the form, then start one run or the outcome-vs-guarded pair."""

import streamlit as st

import ui
from agentrl.config import ConfigError, load_preset, make_config, preset_names
from agentrl.scoring import SCORERS

svc = ui.page("Launch")
st.title("Launch a run")
st.caption("Configs are validated before anything starts. The tabular presets reproduce SPEC section 8.")

presets = preset_names()
preset = st.selectbox("Preset", presets, index=presets.index("refund-outcome") if "refund-outcome" in presets else 0,
                      help="A built-in config; every field below can be changed before starting.")
base = load_preset(preset)
fields = type(base).model_fields


def help_of(name: str) -> str:
    return fields[name].description or ""


with st.form(f"launch-{preset}"):
    left, middle, right = st.columns(3)
    name = left.text_input("Name", base.name, help=help_of("name"))
    scorer = left.selectbox("Scorer", sorted(SCORERS), index=sorted(SCORERS).index(base.scorer), help=help_of("scorer"))
    dagger = left.checkbox("DAgger round before RL", base.dagger, help=help_of("dagger"))
    rounds = middle.number_input("Rounds", value=base.rounds, step=1, help=help_of("rounds"))
    group_size = middle.number_input("Group size", value=base.group_size, step=1, help=help_of("group_size"))
    epochs = middle.number_input("Epochs", value=base.epochs, step=1, help=help_of("epochs"))
    seed = middle.number_input("Seed", value=base.seed, step=1, help=help_of("seed"))
    lr = right.number_input("Learning rate", value=base.lr, step=0.01, format="%.4f", help=help_of("lr"))
    clip = right.number_input("Clip", value=base.clip, step=0.05, format="%.3f", help=help_of("clip"))
    eval_every = right.number_input("Evaluate every N rounds", value=base.eval_every, step=1, help=help_of("eval_every"))
    step_delay = right.number_input(
        "Step delay (s)", value=0.25, step=0.05, format="%.2f",
        help=help_of("step_delay") + " The form defaults to 0.25 s so a run can be watched; 0 trains at full speed.",
    )
    one = st.form_submit_button("Start run", type="primary")
    pair = st.form_submit_button("Start outcome-vs-guarded pair")

settings = dict(
    base.model_dump(), name=name, scorer=scorer, dagger=dagger, rounds=int(rounds), group_size=int(group_size),
    epochs=int(epochs), seed=int(seed), lr=float(lr), clip=float(clip), eval_every=int(eval_every),
    step_delay=float(step_delay),
)

try:
    config = make_config(**settings)
except ConfigError as error:
    config = None
    st.error(str(error))

if config is not None:
    n_tasks = len(config.tasks)
    rollouts = config.rounds * n_tasks * config.group_size
    st.caption(
        f"Cost: {config.rounds} rounds × {n_tasks} tasks × group {config.group_size} = **{rollouts:,} sampled rollouts**, "
        f"each at most {config.max_steps} turns; {config.epochs} update epochs per round; "
        f"at least {config.rounds * config.step_delay:.0f} s of step delay."
    )
    with st.expander("Config as JSON"):
        st.code(config.to_json(), language="json")

started: list[str] = []
if (one or pair) and config is not None:
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
