"""The child program of the process boundary: the interpreter that imports and runs the solution's
modules, serving the test process's requests and answering with data.

Sandbox runner -> harness -> boundary -> **boundary_child** (copied beside the harness as
`agentrl_boundary_child.py`; the standard library only). The test process's `Boundary`
(`agentrl.sandbox.boundary`) starts it as `python -I -B <this file> --child READ_FD WRITE_FD`
from the workspace, which goes first on its path, as `python script.py` would put it. It owns
`_Child` (the objects it handed out by number, the requests it serves: import, attributes,
calls, operators, iteration; the encoding of its values, objects as their class and fields) and
`_TestObject` (an object of the tests, called back through the test process).
"""

from __future__ import annotations

import builtins
import importlib
import itertools
import operator
import os
import sys
import types

if __package__:  # agentrl.sandbox.boundary_child
    from agentrl.sandbox.boundary_wire import MAX_DEPTH, _as_builtin, _builtin_name, _Channel, _decode_plain, _plain
else:  # beside the harness, or run as the child program: `-I` leaves this file's directory off the
    # path, so it is there only while the wire module is imported
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        from agentrl_boundary_wire import MAX_DEPTH, _as_builtin, _builtin_name, _Channel, _decode_plain, _plain
    except ModuleNotFoundError:  # run from the package's own directory
        from boundary_wire import MAX_DEPTH, _as_builtin, _builtin_name, _Channel, _decode_plain, _plain
    finally:
        del sys.path[0]


class _TestObject:
    """An object of the tests, in the child: attributes and calls go back to the test process."""

    def __init__(self, child: "_Child", number: int, text: str) -> None:
        object.__setattr__(self, "_agentrl", (child, number, text))

    def __call__(self, *args, **kwargs):
        child, number, _ = object.__getattribute__(self, "_agentrl")
        return child.callback({"op": "tcall", "id": number, "args": [child.encode(a) for a in args],
                               "kwargs": {k: child.encode(v) for k, v in kwargs.items()}})

    def __getattr__(self, name):
        child, number, _ = object.__getattribute__(self, "_agentrl")
        return child.callback({"op": "tgetattr", "id": number, "name": name})

    def __repr__(self):
        return object.__getattribute__(self, "_agentrl")[2]


class _Child:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.objects: dict[int, object] = {}
        self.handles: dict[int, int] = {}
        self.numbers = itertools.count(1)
        self.test_objects: dict[int, _TestObject] = {}
        self._encoding: set[int] = set()
        self.channel = _Channel(read_fd, write_fd, self.serve)

    def run(self) -> None:
        while True:
            request = self.channel.receive()
            if request is None:
                return
            self.channel.send(self.serve(request))

    def callback(self, message: dict):
        reply = self.channel.roundtrip(message)
        if "err" in reply:
            err = reply["err"]
            cls = getattr(builtins, str(err.get("type")), None) if err.get("builtin") else None
            if isinstance(cls, type) and issubclass(cls, Exception):
                raise cls(err.get("message", ""))
            raise RuntimeError(f"{err.get('type')}: {err.get('message')}")
        return self.decode(reply["ok"])

    def handle(self, obj) -> int:
        key = id(obj)
        if key in self.handles and self.objects.get(self.handles[key]) is obj:
            return self.handles[key]
        number = next(self.numbers)
        self.objects[number] = obj
        self.handles[key] = number
        return number

    # --- serving -------------------------------------------------------------------------------

    def serve(self, request: dict) -> dict:
        try:
            op, owner = request["op"], None
            if op == "import":
                for path in reversed(request.get("paths") or []):
                    if path not in sys.path:
                        sys.path.insert(0, path)
                module = importlib.import_module(request["name"])
                return {"ok": self.handle(module)}
            if op == "operator":
                left, right = (self.decode(a) for a in request["args"])
                return {"ok": self.encode(getattr(operator, request["name"])(left, right))}
            target = self.decode(request["target"])
            reply: dict = {}
            if op == "getattr":
                result = getattr(target, request["name"])
            elif op == "setattr":
                setattr(target, request["name"], self.decode(request["value"]))
                result = None
            elif op == "delattr":
                delattr(target, request["name"])
                result = None
            elif op == "dir":
                result = [str(n) for n in dir(target)]
            elif op == "call":
                owner = self.decode(request["owner"]) if "owner" in request else None
                args = [self.decode(a) for a in request["args"]]
                kwargs = {k: self.decode(v) for k, v in request["kwargs"].items()}
                result = target(*args, **kwargs)
                reply["after"] = [self.encode(a) if type(a) in (list, dict, set) or self._is_object(a) else None
                                  for a in args]
            elif op == "unary":
                result = self._unary(request["name"], target)
            elif op == "binary":
                other = self.decode(request["other"])
                result = operator.contains(target, other) if request["name"] == "contains" else operator.getitem(target, other)
            elif op == "next":
                result = next(target)
            else:
                raise ValueError(f"unknown operation {op!r}")
            refreshed = owner if op == "call" and owner is not None else target
            if request.get("refresh") and self._is_object(refreshed):
                reply["self"] = self._fields(refreshed)
            reply["ok"] = self.encode(result)
            return reply
        except BaseException as err:  # noqa: BLE001 - whatever the solution raised crosses as data
            reply = {"err": self.describe_exception(err)}
            try:  # what the call changed before it raised is still changed
                if op == "call" and owner is not None and request.get("refresh") and self._is_object(owner):
                    reply["self"] = self._fields(owner)
            except BaseException:  # noqa: BLE001, S110
                pass
            return reply

    def _unary(self, name: str, target):
        if name == "truth":
            return bool(target)
        if name == "len":
            return len(target)
        if name == "iter":
            return iter(target)
        if name == "repr":
            return repr(target)
        if name == "str":
            return str(target)
        if name == "int":
            return int(target)
        if name == "float":
            return float(target)
        return getattr(operator, name)(target)

    def describe_exception(self, err: BaseException) -> dict:
        kind = type(err)
        desc = {"type": kind.__name__, "builtin": kind.__module__ == "builtins", "message": _safe_str(err)}
        try:
            desc["args"] = self.encode(err.args)
        except Exception:  # noqa: BLE001
            desc["args"] = None
        if not desc["builtin"]:
            try:
                desc["cls"] = self.class_desc(kind)
                desc["fields"] = self._fields(err) if hasattr(err, "__dict__") else {}
            except Exception:  # noqa: BLE001
                desc.pop("cls", None)
        return desc

    # --- values ------------------------------------------------------------------------------

    @staticmethod
    def _is_object(value) -> bool:
        try:
            object.__getattribute__(value, "__dict__")
        except AttributeError:
            return False
        return not isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType, BaseException))

    def _fields(self, obj, depth: int = 0) -> dict:
        fields = dict(object.__getattribute__(obj, "__dict__"))
        for cls in type(obj).__mro__:
            for slot in cls.__dict__.get("__slots__", ()) if not isinstance(cls.__dict__.get("__slots__", ()), str) else [cls.__dict__["__slots__"]]:
                if slot not in ("__dict__", "__weakref__"):
                    try:
                        fields[slot] = object.__getattribute__(obj, slot)
                    except AttributeError:
                        continue
        return {str(k): self.encode(v, depth + 1) for k, v in fields.items()}

    def class_desc(self, cls: type, depth: int = 0) -> dict:
        desc = {"$": "class", "h": self.handle(cls), "module": str(getattr(cls, "__module__", "?")),
                "qualname": str(getattr(cls, "__qualname__", cls.__name__)), "exc": issubclass(cls, BaseException)}
        if depth < 20:
            desc["bases"] = [self.class_desc(b, depth + 1) for b in cls.__bases__
                             if b is not object and getattr(b, "__module__", None) != "builtins"]
        if desc["exc"]:
            desc["builtin_bases"] = [b.__name__ for b in cls.__mro__ if getattr(b, "__module__", None) == "builtins"]
        desc["hashable"] = getattr(cls, "__hash__", None) is not None
        if issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
            desc["nt_fields"] = [str(f) for f in cls._fields]
        return desc

    def encode(self, value, depth: int = 0):
        if depth > MAX_DEPTH:
            raise ValueError("a value too deeply nested to cross the boundary")
        plain, ok = _plain(value, self.encode, depth)
        if ok:
            return plain
        if isinstance(value, _TestObject):
            return {"$": "test", "id": object.__getattribute__(value, "_agentrl")[1]}
        name = _builtin_name(value)
        if name is not None:
            return {"$": "builtin", "name": name}
        if isinstance(value, type):
            return self.class_desc(value)
        if isinstance(value, types.ModuleType):
            return {"$": "module", "h": self.handle(value), "name": value.__name__}
        if isinstance(value, BaseException):
            return {"$": "exc", **self.describe_exception(value)}
        if isinstance(value, tuple) and isinstance(getattr(type(value), "_fields", None), tuple):
            return {"$": "nt", "cls": self.class_desc(type(value)), "v": [self.encode(v, depth + 1) for v in tuple.__iter__(value)]}
        import enum

        if not isinstance(value, enum.Enum):
            for kind in (str, int, float, bytes, list, tuple, dict, set, frozenset):  # subclasses: the built-in value
                if isinstance(value, kind) and not isinstance(value, bool):
                    return self.encode(_as_builtin(value, kind), depth)
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType,
                              types.MethodWrapperType, types.WrapperDescriptorType)) or type(value).__name__ == "partial":
            return {"$": "ref", "h": self.handle(value), "name": str(getattr(value, "__qualname__", "function"))}
        if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):
            return {"$": "iter", "h": self.handle(value)}
        if self._is_object(value) or getattr(type(value), "__slots__", None):
            handle = self.handle(value)
            if handle in self._encoding:  # a cycle (a parent pointer): the object being encoded above
                return {"$": "backref", "h": handle}
            self._encoding.add(handle)
            try:
                return {"$": "obj", "cls": self.class_desc(type(value)), "h": handle, "f": self._fields(value, depth)}
            finally:
                self._encoding.discard(handle)
        if callable(value):
            return {"$": "ref", "h": self.handle(value), "name": str(getattr(value, "__qualname__", type(value).__name__))}
        raise TypeError(f"a {type(value).__module__}.{type(value).__qualname__} cannot cross the boundary "
                        "(plain values and objects with fields can; give the task boundary 'none' for live objects)")

    def decode(self, data):
        value, ok = _decode_plain(data, self.decode)
        if ok:
            return value
        tag = data.get("$")
        if tag == "handle":
            obj = self.objects[int(data["h"])]
            if "fields" in data and self._is_object(obj):
                sent = data["fields"]
                current = self._fields(obj)
                fields = sent.get("v", []) if isinstance(sent, dict) else []
                for key_data, field in fields:
                    key = self.decode(key_data)
                    if current.get(key) == field:
                        continue
                    new = self.decode(field)
                    try:
                        old = getattr(obj, key)
                        if old is new or (type(old) is type(new) and old == new):
                            continue
                    except Exception:  # noqa: BLE001, S110 - then it is set
                        pass
                    try:
                        setattr(obj, key, new)
                    except Exception:  # noqa: BLE001, S112 - a frozen or computed field keeps its value
                        continue
            return obj
        if tag == "new":
            cls = self.objects[int(data["cls"])]
            return cls(*[self.decode(v) for v in data["v"]])
        if tag == "test":
            number = int(data["id"])
            if number not in self.test_objects:
                self.test_objects[number] = _TestObject(self, number, str(data.get("repr", "<test object>")))
            return self.test_objects[number]
        if tag == "exc":
            cls = getattr(builtins, str(data.get("type")), None) if data.get("builtin") else None
            if isinstance(cls, type) and issubclass(cls, BaseException):
                return cls(*(self.decode(data["args"]) if data.get("args") else (data.get("message", ""),)))
            return RuntimeError(f"{data.get('type')}: {data.get('message')}")
        raise ValueError(f"unknown value tag {tag!r} from the tests")


def _safe_str(err: BaseException) -> str:
    try:
        return str(err)[:2000]
    except Exception:  # noqa: BLE001
        return f"<{type(err).__name__}>"


def _child_main(argv: list[str]) -> None:
    read_fd, write_fd = int(argv[2]), int(argv[3])
    os.set_inheritable(read_fd, False)
    os.set_inheritable(write_fd, False)
    sys.path.insert(0, os.getcwd())  # the workspace, first: as `python script.py` would run the solution
    for stream in (sys.stdout, sys.stderr):  # what it prints reaches the output before it is stopped
        stream.reconfigure(line_buffering=True)
    sys.argv = ["agentrl-solution"]
    _Child(read_fd, write_fd).run()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--child":
    _child_main(sys.argv)
