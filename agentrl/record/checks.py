"""The compiled checks of the record types: what makes a row's values fit its table, fast.

Record types (`agentrl.record.rows`) -> **checks** -> the writer. For each table one function is
generated from the table's Arrow schema and compiled once at import (`compile_checks`): a
value of the plain Python class a column holds passes with one class test (`x.__class__ is
float`), and only anything else (a numpy scalar, an int subclass, a wrong type) takes the slow
path, which makes it plain or raises a `RecordError` naming the table, the field and the value.
The same checks serve a typed record's `__post_init__` and `normalize`, which turns a dict row
into the tuple of its values in field order (defaults filled in), the cheapest thing to buffer.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_MISSING = object()


class RecordError(TypeError):
    """A row that does not fit its table; the message names the table, the field and the value."""


@dataclass(frozen=True)
class TableChecks:
    """A table's compiled checks."""

    names: tuple[str, ...]  # the record's fields, in order (the schema's columns after run_id)
    normalize: Callable[..., tuple]  # (row: dict, step=None) -> the row's values in field order
    post_init: Callable[[Any], None]  # a record's __post_init__
    allowed: frozenset[str]  # keys a dict row may have (the fields and run_id)
    required: frozenset[str]  # keys a dict row must have
    fail: Callable[..., None]  # (row, missing=None): raise the error of unknown keys, or of a missing field


def _item(v):
    """A 0-d array or tensor (numpy, torch) as its Python number; anything else as it is."""
    if not isinstance(v, numbers.Number) and getattr(v, "ndim", None) == 0 and callable(getattr(v, "item", None)):
        return v.item()
    return v


def _scalar(kind: pa.DataType):
    """(a function that returns the plain Python value of `v` for a column of `kind` or raises
    ValueError, what the column expects in words)."""
    if pa.types.is_boolean(kind):
        def as_bool(v):
            # numpy's bool_ is not a bool subclass; an int is refused (1 is not True here).
            if v.__class__ is bool or (type(v).__module__ == "numpy" and type(v).__name__ in ("bool_", "bool")):
                return bool(v)
            raise ValueError
        return as_bool, "a bool"
    if pa.types.is_integer(kind):
        low, high = (INT32_MIN, INT32_MAX) if kind.equals(pa.int32()) else (INT64_MIN, INT64_MAX)

        def as_int(v):
            v = _item(v)
            if isinstance(v, numbers.Integral) and not isinstance(v, bool):
                v = int(v)
                if low <= v <= high:
                    return v
            raise ValueError
        return as_int, f"an int between {low} and {high}"
    if pa.types.is_floating(kind):
        def as_float(v):
            v = _item(v)
            if isinstance(v, numbers.Real) and not isinstance(v, bool):
                return float(v)
            raise ValueError
        return as_float, "a number"
    if pa.types.is_string(kind):
        return _instance_of(str, str), "a str"  # a str subclass becomes a plain str
    if pa.types.is_timestamp(kind):
        return _instance_of(datetime, lambda v: v), "a datetime"
    raise TypeError(f"no check for {kind}")


def _instance_of(cls: type, plain: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def convert(v):
        if isinstance(v, cls):
            return plain(v)
        raise ValueError

    return convert


as_number = _scalar(pa.float64())[0]
"""A number (numpy scalars and 0-d tensors too) as a float; ValueError for anything else."""


def _converter(table: str, name: str, arrow_type: pa.DataType, nullable: bool):
    """The slow path of one column: the value made plain, or a RecordError naming table, field and value."""
    if pa.types.is_list(arrow_type):
        item, item_what = _scalar(arrow_type.value_type)
        what = f"a list, each item {item_what}"

        def plain(v):
            if not isinstance(v, (list, tuple)):
                raise ValueError
            return [item(x) for x in v]
    elif pa.types.is_map(arrow_type):
        key, key_what = _scalar(arrow_type.key_type)
        value, value_what = _scalar(arrow_type.item_type)
        what = f"a dict, each key {key_what} and each value {value_what}"

        def plain(v):
            if not isinstance(v, dict):
                raise ValueError
            return {key(k): value(x) for k, x in v.items()}
    else:
        plain, what = _scalar(arrow_type)

    def convert(v):
        if v is None:
            if nullable:
                return None
            raise RecordError(f"{table}.{name} must be given, not None")
        try:
            return plain(v)
        except (ValueError, TypeError, OverflowError):
            raise RecordError(f"{table}.{name} must be {what}, not {v!r:.80}") from None

    return convert


def _scalar_test(kind: pa.DataType, v: str) -> str:
    """A Python expression, true when `v` is a plain value of an Arrow scalar column as it is."""
    if pa.types.is_boolean(kind):
        return f"{v}.__class__ is bool"
    if pa.types.is_integer(kind):
        low, high = (INT32_MIN, INT32_MAX) if kind.equals(pa.int32()) else (INT64_MIN, INT64_MAX)
        return f"({v}.__class__ is int and {low} <= {v} <= {high})"
    if pa.types.is_floating(kind):
        return f"({v}.__class__ is float or {v}.__class__ is int)"
    if pa.types.is_string(kind):
        return f"{v}.__class__ is str"
    return "False"  # timestamps: always the slow path (one per step at most)


def _check_lines(i: int, arrow_type: pa.DataType, nullable: bool, slow: str) -> list[str]:
    """Statements that run `slow` (the converter, which makes the value plain or raises) unless
    `v{i}` passes the fast class tests; a loop, not a comprehension, for lists and maps (a
    comprehension is a function call per field)."""
    v = f"v{i}"
    guard = f"{v} is not None and " if nullable else ""
    if pa.types.is_list(arrow_type) or pa.types.is_map(arrow_type):
        if pa.types.is_list(arrow_type):
            kind, loop, item = "list", f"for x in {v}:", _scalar_test(arrow_type.value_type, "x")
        else:
            kind, loop = "dict", f"for k, x in {v}.items():"
            item = f"{_scalar_test(arrow_type.key_type, 'k')} and {_scalar_test(arrow_type.item_type, 'x')}"
        head = f"if {v} is not None:" if nullable else "if True:"
        return [head,
                f"    if {v}.__class__ is {kind}:",
                f"        {loop}",
                f"            if not ({item}):",
                f"                {slow}",
                "                break",
                "    else:",
                f"        {slow}"]
    return [f"if {guard}not ({_scalar_test(arrow_type, v)}):" if nullable else f"if not ({_scalar_test(arrow_type, v)}):",
            f"    {slow}"]


def compile_checks(table: str, record_type: type, columns: dict[str, tuple[pa.DataType, bool]]) -> TableChecks:
    """Compile `table`'s checks from its record type and each field's (Arrow type, None allowed).
    A field whose default is None may also be None (the writer fills those in, such as a step's
    ts and elapsed_s)."""
    fields = dataclasses.fields(record_type)
    names = tuple(f.name for f in fields)
    fail = _unknown_fields(table, names)
    env: dict[str, Any] = {"_MISSING": _MISSING, "RecordError": RecordError, "_unknown": fail}
    body_dict = ["def normalize(row, step=None):", "    get = row.get", "    found = 0"]
    body_post = ["def __post_init__(self):"]
    for i, f in enumerate(fields):
        arrow_type, nullable = columns[f.name]
        nullable = nullable or f.default is None
        env[f"_c{i}"] = _converter(table, f.name, arrow_type, nullable)
        # A dict row: the value, or the field's default, or the step it was logged with.
        body_dict.append(f"    v{i} = get({f.name!r}, _MISSING)")
        body_dict.append(f"    if v{i} is _MISSING:")
        if f.name == "step":
            body_dict.append(f"        v{i} = step")
        elif f.default is not dataclasses.MISSING:
            env[f"_d{i}"] = f.default
            body_dict.append(f"        v{i} = _d{i}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f{i}"] = f.default_factory
            body_dict.append(f"        v{i} = _f{i}()")
        else:
            body_dict.append(f"        _unknown(row, {f.name!r})")
        body_dict.append("    else:")
        body_dict.append("        found += 1")
        if f.name == "step":
            body_dict.append(f"        if step is not None and v{i} != step:")
            body_dict.append(f"            raise RecordError(f'{table}: a row of step {{v{i}!r}} was logged as step {{step}}')")
        body_dict += ["    " + line for line in _check_lines(i, arrow_type, nullable, f"v{i} = _c{i}(v{i})")]
        # A record: the same checks on the attribute; a converted value replaces it.
        body_post.append(f"    v{i} = self.{f.name}")
        body_post += ["    " + line for line in _check_lines(i, arrow_type, nullable, f"object.__setattr__(self, {f.name!r}, _c{i}(v{i}))")]
    body_dict.append("    if found != len(row) and found + ('run_id' in row) != len(row):")
    body_dict.append("        _unknown(row)")
    body_dict.append(f"    return ({', '.join(f'v{i}' for i in range(len(fields)))},)")
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(body_dict) + "\n\n" + "\n".join(body_post), f"<record checks of {table}>", "exec"), env, namespace)
    record_type.__post_init__ = namespace["__post_init__"]
    required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    return TableChecks(names, namespace["normalize"], namespace["__post_init__"], frozenset(names) | {"run_id"}, required, fail)


def _unknown_fields(table: str, names: tuple[str, ...]):
    """The error of a dict row with keys the table does not have (or, failing that, without the
    required field `missing`): a misspelt key is named, with the field it probably meant."""
    def fail(row: dict, missing: str | None = None) -> None:
        unknown = sorted(str(k) for k in row if k not in names and k != "run_id")
        if not unknown:
            raise RecordError(f"{table}.{missing} must be given")
        hints = [f"{k!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(k, names, n=1)) else repr(k)
                 for k in unknown]
        raise RecordError(f"{table}: unknown field(s) {', '.join(hints)}; the fields are {', '.join(names)}")

    return fail
