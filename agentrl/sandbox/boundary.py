"""The process boundary between the tests and the solution: the modules an attempt may write are
imported in the test process as proxies to a child interpreter that runs them, and only data
crosses back.

Sandbox runner -> harness -> **boundary** (copied beside the harness as `agentrl_boundary.py`; the
standard library only). The harness installs `Boundary` on the import system before the tests
run. When a test imports a module whose file the attempt may write (the task's `writable`
patterns, or any module of the workspace outside the protected paths when there are none), it
gets a proxy module; the real one is imported in a child interpreter started from the test
process, which therefore runs under the same limits, user and namespaces, and which can read
neither the harness's memory nor its descriptors (the harness is not dumpable and the child
inherits only its two pipes).

This module owns `Boundary`, the test process's end (which modules are the solution's, the child,
the values it sends and decodes); its parts are `boundary_wire` (the pipe and the plain values),
`boundary_proxies` (the local stand-ins and the import hook) and `boundary_child` (the child
program), each copied beside it as `agentrl_boundary_*.py` by `ship`.

What crosses back, and how it behaves in the test process:

- plain values: None, bool, int, float, complex, str, bytes, and lists, tuples, sets, frozensets
  and dicts of them, as exact built-in types (a subclass of str or int arrives as a str or an int);
  `Decimal`, `Fraction`, dates and times, paths, as themselves;
- an object of any other class: an inert copy of its fields, an instance of a local stand-in
  for its class (same name, same solution-class bases) that compares and hashes by type and
  fields, so no `__eq__`, `__bool__`, `__hash__` or descriptor the solution wrote ever runs in
  the test process; its other attributes and methods (and `len`, `iter`, `[]`, `str`, `repr`,
  arithmetic, ordering) are asked of the child and answer with data, and after a method call its
  fields are refreshed; a namedtuple arrives as a local namedtuple;
- functions, classes and modules: callables that call into the child (a class called there
  returns the inert copy of the object it made); an iterator or generator: a local iterator that
  asks the child for each item;
- an exception: its type and arguments; a built-in type is re-raised as itself, a class of the
  solution as a local stand-in with the same name and built-in bases (so `pytest.raises(calc.
  ParseError)` and `pytest.raises(ValueError)` both match); `SystemExit` and other non-`Exception`
  exits arrive as a RuntimeError.

What the tests hand to the solution crosses the other way: data as copies (a list, dict, set or
inert copy the solution changed in place is changed in the test process too when the call
returns), objects that came from the child as themselves, and any other object of the tests (a
callback, a fake) as a handle the child calls back into the test process through.
"""

from __future__ import annotations

import builtins
import collections
import fnmatch
import itertools
import json
import os
import shutil
import subprocess
import sys
import types

if __package__:  # agentrl.sandbox.boundary
    from agentrl.sandbox.boundary_proxies import (
        _BOUNDARIES,
        Inert,
        ProxyModule,
        RemoteCallable,
        RemoteClass,
        RemoteIterator,
        _fields,
        _Finder,
    )
    from agentrl.sandbox.boundary_wire import (
        MAX_DEPTH,
        BoundaryError,
        _as_builtin,
        _builtin_name,
        _Channel,
        _decode_plain,
        _plain,
    )
else:  # beside the harness, as agentrl_boundary.py
    from agentrl_boundary_proxies import (
        _BOUNDARIES,
        Inert,
        ProxyModule,
        RemoteCallable,
        RemoteClass,
        RemoteIterator,
        _fields,
        _Finder,
    )
    from agentrl_boundary_wire import MAX_DEPTH, BoundaryError, _as_builtin, _builtin_name, _Channel, _decode_plain, _plain

__all__ = ["MAX_DEPTH", "Boundary", "BoundaryError", "Inert", "ProxyModule", "RemoteCallable", "RemoteClass",
           "RemoteIterator", "ship"]

_RUNNER_CONFIG = {"conftest.py", "sitecustomize.py", "usercustomize.py"}
PARTS = ("boundary", "boundary_wire", "boundary_proxies", "boundary_child")  # the modules shipped beside the harness


def _part(stem: str) -> str:
    """The file of one part of the boundary beside this one: `boundary_child.py` in the package,
    `agentrl_boundary_child.py` beside the harness."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{stem}.py" if __package__ else f"agentrl_{stem}.py")


def ship(directory) -> None:
    """Copy the boundary's modules into `directory` (the harness's) as `agentrl_boundary*.py`."""
    for stem in PARTS:
        shutil.copyfile(_part(stem), os.path.join(directory, f"agentrl_{stem}.py"))


class Boundary:
    """The test process's end: the import hook, the child, and the values crossing."""

    def __init__(self, workspace: str, protected: list[str], writable: list[str] | None) -> None:
        self.workspace = os.path.realpath(workspace)
        self.protected = [os.path.normpath(p) for p in protected]
        self.writable = writable
        self.id = id(self)
        _BOUNDARIES[self.id] = self
        self._channel: _Channel | None = None
        self._child: subprocess.Popen | None = None
        self._classes: dict[int, type] = {}
        self._namedtuples: dict[type, int] = {}
        self._test_objects: dict[int, object] = {}
        self._ids = itertools.count(1)
        self._decoding: dict[int, Inert] = {}  # objects of the value being decoded, by handle (cycles)
        self.finder = _Finder(self)

    def install(self) -> None:
        sys.meta_path.insert(0, self.finder)

    # --- which modules are the solution's ----------------------------------------------------

    def may_write(self, origin: str) -> bool:
        path = os.path.realpath(origin)
        if not path.startswith(self.workspace + os.sep):
            return False
        relative = os.path.relpath(path, self.workspace).replace(os.sep, "/")
        if any(relative == p or relative.startswith(p.rstrip("/") + "/") or p == "." for p in self.protected):
            return False
        if os.path.basename(relative) in _RUNNER_CONFIG:
            return False
        if self.writable is None:
            return True
        for pattern in self.writable:
            pattern = os.path.normpath(pattern.strip()).rstrip("/")
            if pattern.endswith("/**"):
                pattern = pattern[:-3]
            if fnmatch.fnmatchcase(relative, pattern) or pattern == "." or relative.startswith(pattern + "/"):
                return True
            if os.path.basename(relative) == "__init__.py" and fnmatch.fnmatchcase(os.path.dirname(relative), pattern):
                return True
        return False

    # --- the child ---------------------------------------------------------------------------

    def _start(self) -> _Channel:
        if self._channel is not None:
            return self._channel
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self._child = subprocess.Popen(
            [sys.executable, "-I", "-B", _part("boundary_child"), "--child", str(to_child_r), str(from_child_w)],
            cwd=self.workspace, stdin=subprocess.DEVNULL, pass_fds=(to_child_r, from_child_w), close_fds=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._channel = _Channel(from_child_r, to_child_w, self._serve)
        return self._channel

    def _request(self, message: dict, refresh: Inert | None = None, originals: list | None = None):
        try:
            reply = self._start().roundtrip(message)
        except BoundaryError:
            try:
                code = self._child.wait(timeout=5) if self._child is not None else None
            except subprocess.TimeoutExpired:
                code = None
            raise BoundaryError("the code under test ended its process" + (f" (exit {code})" if code is not None else "")) from None
        if "self" in reply and refresh is not None:
            state = object.__getattribute__(refresh, "__dict__")
            handle = state.get("_agentrl_handle")
            fields = {k: self.decode(v) for k, v in reply["self"].items()}
            state.clear()
            state.update(fields, _agentrl_handle=handle)
        if "after" in reply and originals:
            self._write_back(originals, reply["after"])
        if "err" in reply:
            raise self._exception(reply["err"])
        return self.decode(reply["ok"])

    def import_module(self, module: ProxyModule) -> None:
        paths = [p for p in sys.path if isinstance(p, str) and os.path.realpath(p or ".").startswith(self.workspace)]
        module.__dict__["_agentrl_boundary"] = self.id
        handle = self._request({"op": "import", "name": module.__name__, "paths": paths})
        module.__dict__["_agentrl_handle"] = handle
        module.__dict__["__file__"] = module.__spec__.origin

    # --- operations ----------------------------------------------------------------------------

    def on_handle(self, handle: int, op: str, name, value=None):
        message = {"op": op, "target": {"$": "handle", "h": handle}, "name": name}
        if op == "setattr":
            message["value"] = self.encode(value)
        return self._request(message)

    def on_object(self, obj: Inert, op: str, name):
        value = self._request({"op": op, "target": self.encode(obj), "name": name, "refresh": True}, refresh=obj)
        if isinstance(value, RemoteCallable):
            value._agentrl_owner = obj
        return value

    def call(self, target, args, kwargs):
        owner = target if isinstance(target, Inert) else getattr(target, "_agentrl_owner", None)
        message = {"op": "call", "target": self.encode(target), "args": [self.encode(a) for a in args],
                   "kwargs": {k: self.encode(v) for k, v in kwargs.items()}}
        if owner is not None:
            message.update(owner=self.encode(owner), refresh=True)
        return self._request(message, refresh=owner, originals=list(args))

    def unary(self, obj, name: str, expected):
        value = self._request({"op": "unary", "name": name, "target": self.encode(obj), "refresh": True}, refresh=obj)
        if expected is not None and type(value) is not expected:
            raise TypeError(f"{name}() across the boundary returned {type(value).__name__}, not {expected.__name__}")
        return value

    def text(self, obj, name: str) -> str:
        try:
            value = self.unary(obj, name, str)
        except Exception:  # noqa: BLE001 - a repr that cannot be asked for is still shown
            value = f"{type(obj).__qualname__}({', '.join(f'{k}={v!r}' for k, v in _fields(obj).items())})"
        return value

    def binary(self, obj, name: str, other, expected=None):
        value = self._request({"op": "binary", "name": name, "target": self.encode(obj), "other": self.encode(other),
                               "refresh": True}, refresh=obj)
        if expected is not None and type(value) is not expected:
            raise TypeError(f"{name} across the boundary returned {type(value).__name__}, not {expected.__name__}")
        return value

    def binary_values(self, name: str, left, right):
        value = self._request({"op": "operator", "name": name, "args": [self.encode(left), self.encode(right)]})
        if name in ("lt", "le", "gt", "ge") and type(value) is not bool:
            raise TypeError(f"the comparison {name} across the boundary returned {type(value).__name__}, not bool")
        return value

    # --- requests from the child (callbacks into the tests) -----------------------------------------

    def _serve(self, request: dict) -> dict:
        try:
            target = self._test_objects[int(request["id"])]
            if request["op"] == "tcall":
                args = [self.decode(a) for a in request["args"]]
                kwargs = {k: self.decode(v) for k, v in request["kwargs"].items()}
                result = target(*args, **kwargs)
            elif request["op"] == "tgetattr":
                name = str(request["name"])
                if name.startswith("_"):  # no way from a callback to the test's globals, code or classes
                    raise AttributeError(f"{name!r} of an object of the tests is not reachable across the boundary")
                result = getattr(target, name)
            else:
                raise BoundaryError(f"unknown request {request['op']!r}")
            return {"ok": self.encode(result)}
        except Exception as err:  # noqa: BLE001 - the test's own exception goes to the solution's call
            return {"err": {"type": type(err).__name__, "builtin": type(err).__module__ == "builtins",
                            "message": str(err)}}

    # --- values ------------------------------------------------------------------------------

    def encode(self, value, depth: int = 0):
        if depth > MAX_DEPTH:
            raise BoundaryError("a value too deeply nested to cross the boundary")
        plain, ok = _plain(value, self.encode, depth)
        if ok:
            return plain
        name = _builtin_name(value)
        if name is not None:
            return {"$": "builtin", "name": name}
        if isinstance(value, Inert):
            return {"$": "handle", "h": value._agentrl_handle, "fields": self.encode(_fields(value), depth + 1)}
        if isinstance(value, (RemoteCallable, RemoteIterator)) or (isinstance(value, RemoteClass)):
            return {"$": "handle", "h": value._agentrl_handle}
        if isinstance(value, ProxyModule) and "_agentrl_handle" in value.__dict__:
            return {"$": "handle", "h": value.__dict__["_agentrl_handle"]}
        if isinstance(value, type) and value in self._classes.values():
            handle = next(h for h, c in self._classes.items() if c is value)
            return {"$": "handle", "h": handle}
        if isinstance(value, tuple) and type(value) in self._namedtuples:
            return {"$": "new", "cls": self._namedtuples[type(value)], "v": [self.encode(v, depth + 1) for v in value]}
        for kind in (str, int, float, bytes, list, tuple, dict, set, frozenset):  # subclasses: the built-in value
            if isinstance(value, kind) and not isinstance(value, bool):
                return self.encode(_as_builtin(value, kind), depth)
        if isinstance(value, BaseException):
            return {"$": "exc", "type": type(value).__name__, "builtin": type(value).__module__ == "builtins",
                    "args": self.encode(value.args, depth + 1) if _encodable(value.args) else [], "message": str(value)}
        if isinstance(value, types.ModuleType):
            raise BoundaryError(f"the module {value.__name__} cannot be handed to the code under test")
        number = next(self._ids)
        self._test_objects[number] = value
        return {"$": "test", "id": number, "callable": callable(value), "repr": _safe_repr(value)}

    def decode(self, data):
        value, ok = _decode_plain(data, self.decode)
        if ok:
            return value
        tag = data.get("$")
        if tag == "obj":
            cls = self._local_class(data["cls"])
            obj = object.__new__(cls)
            object.__setattr__(obj, "_agentrl_handle", int(data["h"]))
            self._decoding[int(data["h"])] = obj
            for key, field in data["f"].items():
                object.__getattribute__(obj, "__dict__")[key] = self.decode(field)
            return obj
        if tag == "backref":
            return self._decoding[int(data["h"])]
        if tag == "nt":
            return self._local_class(data["cls"])(*[self.decode(v) for v in data["v"]])
        if tag == "class":
            return self._local_class(data)
        if tag == "ref":
            return RemoteCallable(self, int(data["h"]), str(data.get("name", "function")))
        if tag == "iter":
            return RemoteIterator(self, int(data["h"]))
        if tag == "module":
            module = sys.modules.get(data["name"])
            if isinstance(module, ProxyModule) and module.__dict__.get("_agentrl_handle") == data["h"]:
                return module
            proxy = ProxyModule(data["name"])
            proxy.__dict__.update(_agentrl_boundary=self.id, _agentrl_handle=int(data["h"]))
            return proxy
        if tag == "test":
            return self._test_objects[int(data["id"])]
        if tag == "exc":
            return self._exception(data)
        raise BoundaryError(f"unknown value tag {tag!r} from the child")

    def _local_class(self, desc: dict) -> type:
        handle = int(desc["h"])
        if handle in self._classes:
            return self._classes[handle]
        name = str(desc["qualname"]).rsplit(".", 1)[-1]
        namespace = {"__module__": str(desc["module"]), "__qualname__": str(desc["qualname"]),
                     "_agentrl_boundary": self.id, "_agentrl_handle": handle}
        if desc.get("exc"):
            bases = tuple(self._local_class(b) for b in desc.get("bases", []) if b.get("exc"))
            builtin_bases = tuple(getattr(builtins, b) for b in desc.get("builtin_bases", [])
                                  if isinstance(getattr(builtins, b, None), type) and issubclass(getattr(builtins, b), BaseException))
            bases = bases or builtin_bases[:1] or (Exception,)
            cls = type(name, bases, namespace)
        elif desc.get("nt_fields") is not None:
            cls = collections.namedtuple(name, [str(f) for f in desc["nt_fields"]], module=str(desc["module"]))
            self._namedtuples[cls] = handle
        else:
            bases = tuple(self._local_class(b) for b in desc.get("bases", []) if not b.get("exc") and b.get("nt_fields") is None)
            if desc.get("hashable") is False:  # as the child's class: `__eq__` without `__hash__`
                namespace["__hash__"] = None
            cls = RemoteClass(name, bases or (Inert,), namespace)
        self._classes[handle] = cls
        return cls

    def _exception(self, desc: dict) -> BaseException:
        message = str(desc.get("message", ""))
        try:
            args = self.decode(desc["args"]) if desc.get("args") is not None else (message,)
        except Exception:  # noqa: BLE001
            args = (message,)
        if desc.get("builtin"):
            cls = getattr(builtins, str(desc["type"]), None)
            if not (isinstance(cls, type) and issubclass(cls, Exception)):
                return BoundaryError(f"the code under test raised {desc['type']}({message})")
        elif desc.get("cls"):
            cls = self._local_class(desc["cls"])
            if not issubclass(cls, Exception):
                return BoundaryError(f"the code under test raised {desc['type']}({message})")
        else:
            return BoundaryError(f"{desc.get('type')}: {message}")
        try:
            error = cls(*args)
        except Exception:  # noqa: BLE001 - a signature the arguments do not fit
            error = cls(message)
        for key, field in (desc.get("fields") or {}).items():
            try:
                setattr(error, key, self.decode(field))
            except Exception:  # noqa: BLE001, S112
                continue
        return error

    def _write_back(self, originals: list, after: list) -> None:
        """Arguments the solution changed in place, changed in the test process too."""
        for original, new in zip(originals, after):
            if new is None:
                continue
            value = self.decode(new)
            if type(original) is list and type(value) is list:
                original[:] = value
            elif type(original) is dict and type(value) is dict:
                original.clear()
                original.update(value)
            elif type(original) is set and type(value) is set:
                original.clear()
                original.update(value)
            elif isinstance(original, Inert) and isinstance(value, Inert):
                state = object.__getattribute__(original, "__dict__")
                handle = state.get("_agentrl_handle")
                state.clear()
                state.update(_fields(value), _agentrl_handle=handle)



def _encodable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _safe_repr(value) -> str:
    try:
        return repr(value)[:200]
    except Exception:  # noqa: BLE001
        return f"<{type(value).__name__}>"
