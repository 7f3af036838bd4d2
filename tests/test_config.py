"""agentrl/config.py: the typed, validated run config, presets and the JSON Schema."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agentrl.config import (
    SCHEMA_PATH,
    ConfigError,
    json_schema_text,
    load_config_file,
    load_preset,
    make_config,
    preset_names,
)
from agentrl.tasks.refund.tasksets import EVAL_TASKS, EXPERT_TASKS, TRAIN_TASKS


def as_tuples(specs) -> list[tuple[str, int, str]]:
    return [(t.task_id, t.amount, t.start_state) for t in specs]


def test_defaults_equal_spec_section_8():
    config = make_config()
    assert config.kind == "tabular"
    assert config.scorer == "outcome"
    assert (config.rounds, config.group_size, config.epochs, config.seed, config.max_steps) == (30, 8, 2, 7, 7)
    assert (config.lr, config.clip) == (0.04, 0.2)
    assert (config.clone_epochs, config.clone_lr, config.dagger) == (40, 0.25, False)
    assert config.sensitive_states == ["known_high"]
    assert as_tuples(config.tasks) == as_tuples(TRAIN_TASKS)
    assert as_tuples(config.eval_tasks) == as_tuples(EVAL_TASKS)
    assert as_tuples(config.expert_tasks) == as_tuples(EXPERT_TASKS)


INVALID = [
    ("rounds", {"rounds": 0}),
    ("rounds", {"rounds": -3}),
    ("clip", {"clip": 0}),
    ("clip", {"clip": -0.1}),
    ("group_size", {"group_size": 1}),
    ("scorer", {"scorer": "vibes"}),
    ("bogus", {"bogus": 1}),
    ("tasks", {"tasks": [{"task_id": "a", "amount": 10}, {"task_id": "a", "amount": 90}]}),
    ("eval_tasks", {"eval_tasks": [{"task_id": "e", "amount": 10}, {"task_id": "e", "amount": 10}]}),
    ("lr", {"lr": 0}),
    ("sensitive_states", {"sensitive_states": ["nowhere"]}),
    ("tasks", {"tasks": [{"task_id": "a", "amount": 10, "start_state": "nowhere"}]}),
    ("tasks", {"tasks": []}),
]


@pytest.mark.parametrize("field, values", INVALID, ids=[f"{f}={v[next(iter(v))]!r}"[:40] for f, v in INVALID])
def test_invalid_value_is_a_one_line_config_error_naming_the_field(field, values):
    with pytest.raises(ConfigError) as caught:
        make_config(**values)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("invalid run config: ")
    assert field in message


def test_unknown_scorer_message_lists_the_choices():
    with pytest.raises(ConfigError, match=r"unknown scorer 'vibes'.*\['guarded', 'outcome'\]"):
        make_config(scorer="vibes")


def test_duplicate_task_ids_are_named():
    with pytest.raises(ConfigError, match=r"repeated: \['a'\]"):
        make_config(tasks=[{"task_id": "a", "amount": 10}, {"task_id": "a", "amount": 90}])


def test_config_is_frozen():
    with pytest.raises(ValidationError, match="frozen"):
        make_config().rounds = 3


def test_json_round_trip():
    config = make_config(scorer="guarded", rounds=3, tasks=[{"task_id": "x", "amount": 60, "start_state": "recover"}])
    assert make_config(**json.loads(config.to_json())) == config


def test_every_preset_exists_and_validates():
    assert {"refund-guarded", "refund-outcome", "coding-tests"} <= set(preset_names())
    for name in preset_names():
        assert load_preset(name).name == name


@pytest.mark.parametrize("preset, scorer", [("refund-outcome", "outcome"), ("refund-guarded", "guarded")])
def test_preset_is_the_spec_run_with_its_scorer(preset, scorer):
    config = load_preset(preset)
    assert (config.name, config.scorer) == (preset, scorer)
    assert config.model_dump(exclude={"name", "scorer"}) == make_config().model_dump(exclude={"name", "scorer"})


def test_preset_overrides_skip_none():
    config = load_preset("refund-guarded", name="mine", step_delay=None)
    assert (config.name, config.step_delay) == ("mine", 0.0)


def test_unknown_preset():
    with pytest.raises(ConfigError, match=r"unknown preset 'nope'; choose one of \[.*'refund-guarded', 'refund-outcome'.*\]"):
        load_preset("nope")


def test_load_config_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"scorer": "guarded", "rounds": 4}))
    config = load_config_file(path, name="from-file", step_delay=None)
    assert (config.scorer, config.rounds, config.name) == ("guarded", 4, "from-file")


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("missing.json", None, "cannot read config file"),
        ("a-directory", "<dir>", "is a directory"),
        ("bad.json", "{not json", "is not valid JSON"),
        ("list.json", "[1, 2]", "must hold a JSON object of settings, not list"),
        ("values.json", '{"rounds": 0}', "rounds"),
    ],
)
def test_load_config_file_errors(tmp_path, name, content, expected):
    path = tmp_path / name
    if content == "<dir>":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_json_schema_file_matches_run_config():
    assert SCHEMA_PATH.read_text() == json_schema_text(), (
        f"{SCHEMA_PATH} has drifted from RunConfig; regenerate it with: python -m agentrl export-schema"
    )


def test_json_schema_documents_every_field_of_every_engine():
    from agentrl.engines.registry import ENGINES

    schema = json.loads(json_schema_text())
    assert schema["discriminator"]["propertyName"] == "kind"
    definitions = schema["$defs"]
    for engine in ENGINES.values():
        definition = definitions[engine.config_type.__name__]
        assert set(definition["properties"]) == set(engine.config_type.model_fields)
        assert all(prop.get("description") for prop in definition["properties"].values()), engine.kind
        assert definition["additionalProperties"] is False


def test_form_problems_name_fields_by_their_labels_in_words():
    """Issue 13, finding 10: the Launch form says 'Group size: must be at least 2', not `group_size`."""
    from agentrl.config import load_preset

    with pytest.raises(ConfigError) as caught:
        make_config(group_size=0, rounds=3.7)
    problems = {p.path: (p.label, p.message) for p in caught.value.problems}
    assert problems == {"group_size": ("Group size", "must be at least 2 (you entered 0)"),
                        "rounds": ("Rounds", "must be a whole number (you entered 3.7)")}
    lm = load_preset("lm-refund-outcome").model_dump()
    with pytest.raises(ConfigError) as caught:
        make_config(**dict(lm, lm=dict(lm["lm"], tasks_per_step=0)))
    (problem,) = caught.value.problems
    assert (problem.path, problem.label) == ("lm.tasks_per_step", "Tasks per step")


def test_an_unknown_key_with_a_newline_in_it_is_still_one_error_line():
    # Found by hypothesis (tests/test_properties.py): the key was echoed as typed, newline and all.
    with pytest.raises(ConfigError) as caught:
        make_config(eval_tasks=[{"\n": None}])
    message = str(caught.value)
    assert "\n" not in message and "eval_tasks.0.'\\n'" in message
