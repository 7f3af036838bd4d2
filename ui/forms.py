"""A run config as a form, generated from its fields: one widget per field, labelled and helped by
the field's own label and description, so an engine's new setting needs no page change. A field
can ask for more through `json_schema_extra` (see `_extra`).

Launch page -> **forms** -> agentrl.config. `config_form` draws the widgets and returns plain
values; the page hands them to `make_config`, which validates them (as the person types: there
is no submit step between a change and its validation).
"""

from __future__ import annotations

import typing
from typing import Any

import streamlit as st
from pydantic import BaseModel

HIDDEN = ("schema_version", "kind")


def _plain(annotation) -> tuple[Any, bool]:
    """(the type, whether None is allowed) of `X` or `X | None`."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def _is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _extra(field) -> dict:
    """What a field asks of the form through `json_schema_extra`: `options` (choose from a list),
    `widget: "lines"` (a list of strings, one per line: an argument list), `form: "hidden"`."""
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def editable(model_type: type[BaseModel], name: str) -> bool:
    """Fields the form draws; lists of records (task lists) are edited as JSON instead."""
    if name in HIDDEN or _extra(model_type.model_fields[name]).get("form") == "hidden":
        return False
    annotation, _ = _plain(model_type.model_fields[name].annotation)
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (str,)
        return item is str
    return annotation in (bool, int, float, str) or _is_model(annotation)


def _label(model_type: type[BaseModel], name: str) -> str:
    label = model_type.label(name) if hasattr(model_type, "label") else name.replace("_", " ")
    return label[:1].upper() + label[1:]


def _widget(container, model_type: type[BaseModel], name: str, value: Any, key: str, choices: dict[str, list] | None) -> Any:
    field = model_type.model_fields[name]
    annotation, optional = _plain(field.annotation)
    label, help_text = _label(model_type, name), field.description or ""
    extra = _extra(field)
    options = (choices or {}).get(name) or extra.get("options")
    if annotation is bool:
        return container.checkbox(label, value=bool(value), help=help_text, key=key)
    if annotation is int:
        # A number field that accepts any number: 3.7 typed into a whole-number field reaches
        # validation and is refused by name, instead of the widget quietly making it 3.
        got = container.number_input(label, value=None if value is None else float(value), step=1.0, format="%g",
                                     help=help_text + (" Empty: the default." if optional else ""), key=key)
        return None if got is None else (int(got) if float(got).is_integer() else got)
    if annotation is float:
        return container.number_input(label, value=None if value is None else float(value), format="%g",
                                      help=help_text + (" Empty: the default." if optional else ""), key=key)
    if annotation is str and options:
        options = list(options)
        return container.selectbox(label, options, index=options.index(value) if value in options else 0, help=help_text, key=key)
    if annotation is str:
        text = container.text_input(label, value="" if value is None else str(value), help=help_text, key=key)
        return (text.strip() or None) if optional else text
    if typing.get_origin(annotation) is list and options:
        return container.multiselect(label, list(options), default=[v for v in value if v in options], help=help_text, key=key)
    if typing.get_origin(annotation) is list and extra.get("widget") == "lines":
        # One item per line, kept as typed (an argument may hold spaces or commas); blank lines are dropped.
        text = container.text_area(label, value="\n".join(value), help=help_text + " One per line.", key=key,
                                   height=max(68, 28 * (len(value) + 1)))
        return [line for line in text.splitlines() if line.strip()]
    if typing.get_origin(annotation) is list:
        text = container.text_input(label, value=", ".join(value), help=help_text + " Comma-separated.", key=key)
        return [part.strip() for part in text.split(",") if part.strip()]
    raise TypeError(f"no widget for {name}: {annotation}")


def config_form(config: BaseModel, key: str, choices: dict[str, list] | None = None, columns: int = 3) -> dict[str, Any]:
    """Draw a widget per editable field of `config` (nested settings as their own section) and
    return the config's values with what the person entered. `choices` limits a string field to
    a list (the scorers an engine accepts)."""
    model_type = type(config)
    values = config.model_dump()
    simple = [n for n in model_type.model_fields if editable(model_type, n) and not _is_model(_plain(model_type.model_fields[n].annotation)[0])]
    nested = [n for n in model_type.model_fields if editable(model_type, n) and _is_model(_plain(model_type.model_fields[n].annotation)[0])]
    cols = st.columns(columns)
    for i, name in enumerate(simple):
        values[name] = _widget(cols[i % columns], model_type, name, getattr(config, name), f"{key}:{name}", choices)
    for name in nested:
        st.markdown(f"**{_label(model_type, name)}**")
        st.caption(model_type.model_fields[name].description or "")
        values[name] = config_form(getattr(config, name), f"{key}:{name}", columns=columns)
    return values
