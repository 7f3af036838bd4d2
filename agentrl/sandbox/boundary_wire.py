"""What crosses the process boundary, and how: the pipe both ends speak over and the encoding of the
values both ends build alike.

Sandbox runner -> harness -> boundary -> **boundary_wire** (copied beside the harness as
`agentrl_boundary_wire.py`; the standard library only). Both ends import it: the test process's
`Boundary` (`agentrl.sandbox.boundary`) and the child program (`agentrl.sandbox.boundary_child`).
It owns `_Channel` (one JSON line per message; requests served while a reply is awaited, which is
how callbacks into the tests work), `BoundaryError`, `MAX_DEPTH`, and the encoding of plain
values: None, bool, int, float, complex, str, bytes, the built-in containers of them as exact
built-in types, the standard library's value types (`Decimal`, `Fraction`, dates and times,
paths) as themselves, and the harmless built-in functions and types by name.
"""

from __future__ import annotations

import base64
import builtins
import datetime
import decimal
import fractions
import json
import os
import pathlib
import threading

MAX_DEPTH = 200


class BoundaryError(RuntimeError):
    """Something could not cross the boundary, or the child is gone."""


# ---------------------------------------------------------------------------------------------
# The channel: one JSON line per message, requests served while a reply is awaited (callbacks)
# ---------------------------------------------------------------------------------------------


class _Channel:
    def __init__(self, read_fd: int, write_fd: int, serve) -> None:
        self._reader = os.fdopen(read_fd, "rb")
        self._writer = os.fdopen(write_fd, "wb")
        self._serve = serve
        self._lock = threading.RLock()
        self.closed_why: str | None = None

    def send(self, message: dict) -> None:
        self._writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self._writer.flush()

    def receive(self) -> dict | None:
        line = self._reader.readline()
        return json.loads(line) if line else None

    def roundtrip(self, message: dict) -> dict:
        with self._lock:
            if self.closed_why:
                raise BoundaryError(self.closed_why)
            try:
                self.send(message)
            except OSError as err:
                raise BoundaryError(self._closed()) from err
            while True:
                incoming = self.receive()
                if incoming is None:
                    raise BoundaryError(self._closed())
                if "op" in incoming:
                    self.send(self._serve(incoming))
                else:
                    return incoming

    def _closed(self) -> str:
        self.closed_why = self.closed_why or "the other side of the boundary is gone"
        return self.closed_why


# ---------------------------------------------------------------------------------------------
# Values both sides build alike
# ---------------------------------------------------------------------------------------------


def _encode_value_types(value):
    """Tags for the standard library's value types that cross as themselves, or None."""
    if isinstance(value, decimal.Decimal):
        return {"$": "decimal", "v": str(value)}
    if isinstance(value, fractions.Fraction):
        return {"$": "fraction", "v": [value.numerator, value.denominator]}
    if isinstance(value, datetime.datetime):
        return {"$": "datetime", "v": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"$": "date", "v": value.isoformat()}
    if isinstance(value, datetime.time):
        return {"$": "time", "v": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {"$": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, pathlib.PurePath):
        return {"$": "path", "v": str(value), "posix": isinstance(value, pathlib.PurePosixPath),
                "concrete": isinstance(value, pathlib.Path)}
    return None


def _decode_value_types(tag: str, data: dict):
    v = data["v"]
    if tag == "decimal":
        return decimal.Decimal(v)
    if tag == "fraction":
        return fractions.Fraction(int(v[0]), int(v[1]))
    if tag == "datetime":
        return datetime.datetime.fromisoformat(v)
    if tag == "date":
        return datetime.date.fromisoformat(v)
    if tag == "time":
        return datetime.time.fromisoformat(v)
    if tag == "timedelta":
        return datetime.timedelta(days=int(v[0]), seconds=int(v[1]), microseconds=int(v[2]))
    if tag == "path":
        return pathlib.Path(v) if data.get("concrete") else pathlib.PurePosixPath(v)
    raise BoundaryError(f"unknown value tag {tag!r}")


def _plain(value, encode, depth: int):
    """The encoding of a plain value (exact built-in types), or None when `value` is not one."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str or kind is float:
        return value, True
    if kind is bytes or kind is bytearray:
        return {"$": "bytes", "v": base64.b64encode(bytes(value)).decode()}, True
    if kind is complex:
        return {"$": "complex", "v": [value.real, value.imag]}, True
    if kind in (list, tuple, set, frozenset):
        return {"$": kind.__name__, "v": [encode(item, depth + 1) for item in value]}, True
    if kind is dict:
        return {"$": "dict", "v": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}, True
    tagged = _encode_value_types(value)
    if tagged is not None:
        return tagged, True
    return None, False


def _decode_plain(data, decode):
    """(value, True) for the plain tags, (None, False) for the others."""
    if not isinstance(data, dict):
        if isinstance(data, list):
            raise BoundaryError("malformed value on the boundary")
        return data, True
    tag = data.get("$")
    if tag == "bytes":
        return base64.b64decode(data["v"]), True
    if tag == "complex":
        return complex(float(data["v"][0]), float(data["v"][1])), True
    if tag in ("list", "tuple", "set", "frozenset"):
        items = [decode(item) for item in data["v"]]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items), True
    if tag == "dict":
        return {decode(k): decode(v) for k, v in data["v"]}, True
    if tag in ("decimal", "fraction", "datetime", "date", "time", "timedelta", "path"):
        return _decode_value_types(tag, data), True
    if tag == "builtin":
        found = getattr(builtins, str(data["name"]), None)
        if found is None or not _harmless_builtin(str(data["name"]), found):
            raise BoundaryError(f"the built-in {data['name']!r} does not cross the boundary")
        return found, True
    return None, False


_PURE_BUILTINS = {"abs", "all", "any", "ascii", "bin", "callable", "chr", "divmod", "format", "hash", "hex", "id",
                  "isinstance", "issubclass", "iter", "len", "max", "min", "next", "oct", "ord", "pow", "repr", "round",
                  "sorted", "sum"}


def _harmless_builtin(name: str, value) -> bool:
    """A built-in a value from the child may name: a type (but `type`) or a function of data alone;
    never `eval`, `exec`, `open`, `getattr`, `__import__` and the like."""
    return name in _PURE_BUILTINS or (isinstance(value, type) and value is not type)


def _builtin_name(value) -> str | None:
    """The name of a built-in function or type, when `value` is one (crosses as itself)."""
    name = getattr(value, "__name__", None)
    if isinstance(name, str) and getattr(value, "__module__", None) == "builtins" and getattr(builtins, name, None) is value:
        return name
    return None



def _as_builtin(value, kind):
    if kind is str:
        return str.__str__(value)
    if kind is int:
        return int.__index__(value)
    if kind is float:
        return float.__float__(value)
    if kind is bytes:
        return bytes(memoryview(value))
    if kind is dict:
        return {k: v for k, v in dict.items(value)}
    return kind(list(kind.__iter__(value)))

