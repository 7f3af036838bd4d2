"""Run configuration: any engine's config built and validated from plain values, the presets, and
the JSON Schema.

Sits at the head of the flow (launch -> run process): the Launch page and the CLI call
`make_config` (or `load_preset` / `load_config_file`), which picks the engine's config class by
`kind` from the registry, validates at construction, and raises one `ConfigError` line naming
what to change. Nothing starts on an invalid config. `schemas/run_config.schema.json` is
generated from the config classes (`python -m agentrl export-schema`); a test fails when they
drift.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter, ValidationError

from agentrl.config.base import CONFIG_SCHEMA_VERSION, ConfigError, RunConfig, TaskSpec, one_line, problems, reject_duplicate_keys
from agentrl.paths import PRESETS_DIR, SCHEMAS_DIR

SCHEMA_PATH = SCHEMAS_DIR / "run_config.schema.json"
DEFAULT_KIND = "tabular"

__all__ = [
    "CONFIG_SCHEMA_VERSION", "ConfigError", "RunConfig", "TaskSpec", "make_config", "load_preset", "load_config_file",
    "preset_names", "json_schema", "json_schema_text", "SCHEMA_PATH",
]


def make_config(**values: Any) -> RunConfig:
    """The config of `values['kind']` (default 'tabular'), validated; errors become one `ConfigError` line."""
    from agentrl.engines.registry import UnknownEngineError, get_engine

    try:
        engine = get_engine(values.get("kind", DEFAULT_KIND))
    except UnknownEngineError as error:
        raise ConfigError(f"invalid run config: kind: {error}") from None
    try:
        config = engine.config_type(**values)
    except ValidationError as error:
        raise ConfigError(one_line(error, engine.config_type), problems(error, engine.config_type)) from None
    except TypeError as error:  # keyword names that are not strings
        raise ConfigError(f"invalid run config: {error}") from None
    if config.scorer not in engine.scorers:
        raise ConfigError(f"invalid run config: scorer: kind {engine.kind!r} is scored by one of "
                          f"{list(engine.scorers)}, not {config.scorer!r}")
    return config


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.json"))


def _object(text: str, where: str) -> dict[str, Any]:
    try:
        values = json.loads(text, object_pairs_hook=reject_duplicate_keys)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must hold a JSON object of settings, not {type(values).__name__}")
    return values


def load_preset(preset: str, **overrides: Any) -> RunConfig:
    """A built-in preset by name (only the names `preset_names()` lists; never a path)."""
    names = preset_names()
    if not isinstance(preset, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", preset) or preset not in names:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {names}")
    values = _object((PRESETS_DIR / f"{preset}.json").read_text(), f"preset {preset!r}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(**values)


def load_config_file(path: str | Path, **overrides: Any) -> RunConfig:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {str(path)!r} is a directory; give the path of a JSON file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read config file {str(path)!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text; save it as UTF-8 JSON") from None
    values = _object(text, f"config file {str(path)!r}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(**values)


def config_from_json(text: str, **overrides: Any) -> RunConfig:
    """A config from JSON text (the Launch page's editor)."""
    values = _object(text, "the config")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(**values)


def json_schema() -> dict:
    from agentrl.engines.registry import ENGINES

    types = tuple(engine.config_type for engine in ENGINES.values())
    union = Annotated[Union[types], Field(discriminator="kind")]  # noqa: UP007 - a runtime tuple of types
    schema = TypeAdapter(union).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "agentrl/run_config.schema.json"
    schema["title"] = "RunConfig"
    schema["description"] = "A run config; `kind` picks the engine (default 'tabular' when absent)."
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
