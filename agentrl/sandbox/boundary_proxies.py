"""The local stand-ins for the child's objects in the test process: inert copies of its objects,
classes, callables, iterators and modules, each asking the child for whatever is not data.

Sandbox runner -> harness -> boundary -> **boundary_proxies** (copied beside the harness as
`agentrl_boundary_proxies.py`; the standard library only). It owns `Inert` (an object's fields,
compared and hashed by type and fields, so no `__eq__`, `__bool__` or `__hash__` of the solution
runs in the test process; its other attributes, methods and operators are asked of the child),
`RemoteClass` (the metaclass of the stand-ins for the child's classes), `RemoteCallable`,
`RemoteIterator` and `ProxyModule`, the import hook that hands out a proxy module for each module
the solution may write (`_Finder`, `_Loader`), and the registry of live boundaries (`_BOUNDARIES`)
through which each of them reaches its `Boundary` (`agentrl.sandbox.boundary`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrl.sandbox.boundary import Boundary


class Inert:
    """An inert copy of an object of the solution: its fields, compared and hashed by value."""

    def __eq__(self, other):
        if not isinstance(other, Inert):
            return NotImplemented
        return type(self) is type(other) and _fields(self) == _fields(other)

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self):
        return hash((type(self).__qualname__, _frozen(_fields(self))))

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") or name == "_agentrl_handle":
            raise AttributeError(name)
        return _boundary_of(self).on_object(self, "getattr", name)

    def __repr__(self):
        return _boundary_of(self).text(self, "repr")

    def __str__(self):
        return _boundary_of(self).text(self, "str")

    def __bool__(self):
        return _boundary_of(self).unary(self, "truth", bool)

    def __len__(self):
        return _boundary_of(self).unary(self, "len", int)

    def __iter__(self):
        return _boundary_of(self).unary(self, "iter", None)

    def __contains__(self, item):
        return _boundary_of(self).binary(self, "contains", item, bool)

    def __getitem__(self, key):
        return _boundary_of(self).binary(self, "getitem", key)

    def __call__(self, *args, **kwargs):
        return _boundary_of(self).call(self, args, kwargs)


def _add_operators() -> None:
    def binary(name, swap=False):
        def method(self, other):
            left, right = (other, self) if swap else (self, other)
            return _boundary_of(self).binary_values(name, left, right)
        return method

    for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift", "matmul"):
        setattr(Inert, f"__{name}__", binary(name if name not in ("and", "or") else name + "_"))
        setattr(Inert, f"__r{name}__", binary(name if name not in ("and", "or") else name + "_", swap=True))
    for name in ("lt", "le", "gt", "ge"):
        setattr(Inert, f"__{name}__", binary(name))
    for name in ("neg", "pos", "abs", "invert", "index"):
        setattr(Inert, f"__{name}__", lambda self, _n=name: _boundary_of(self).unary(self, _n, None))
    Inert.__int__ = lambda self: _boundary_of(self).unary(self, "int", int)
    Inert.__float__ = lambda self: _boundary_of(self).unary(self, "float", float)


_add_operators()


def _fields(obj) -> dict:
    return {k: v for k, v in object.__getattribute__(obj, "__dict__").items() if k != "_agentrl_handle"}


def _frozen(value):
    if isinstance(value, dict):
        return tuple(sorted(((repr(k), _frozen(v)) for k, v in value.items()), key=lambda kv: kv[0]))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, set):
        return frozenset(_frozen(v) for v in value)
    return value


_BOUNDARIES: dict[int, "Boundary"] = {}


def _boundary_of(obj) -> "Boundary":
    return _BOUNDARIES[type(obj)._agentrl_boundary]


class RemoteClass(type):
    """The metaclass of the local stand-ins for the child's classes: calling one makes the object
    in the child; its attributes are the child's class attributes."""

    def __call__(cls, *args, **kwargs):
        return _BOUNDARIES[cls._agentrl_boundary].call(cls, args, kwargs)

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _BOUNDARIES[cls._agentrl_boundary].on_handle(cls._agentrl_handle, "getattr", name)

    def __repr__(cls):
        return f"<class {cls.__module__}.{cls.__qualname__} (across the boundary)>"


class RemoteCallable:
    """A function, method or other callable of the child."""

    def __init__(self, boundary: "Boundary", handle: int, name: str, owner: Inert | None = None) -> None:
        self._agentrl_boundary, self._agentrl_handle, self.__name__ = boundary, handle, name
        self.__qualname__ = name
        self._agentrl_owner = owner  # the inert copy whose method this is: refreshed after each call

    def __call__(self, *args, **kwargs):
        return self._agentrl_boundary.call(self, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._agentrl_boundary.on_handle(self._agentrl_handle, "getattr", name)

    def __repr__(self):
        return f"<{self.__name__} (across the boundary)>"


class RemoteIterator:
    def __init__(self, boundary: "Boundary", handle: int) -> None:
        self._agentrl_boundary, self._agentrl_handle = boundary, handle

    def __iter__(self):
        return self

    def __next__(self):
        return self._agentrl_boundary.on_handle(self._agentrl_handle, "next", None)


_MODULE_MACHINERY = {"__path__", "__file__", "__cached__", "__loader__", "__spec__", "__package__", "__builtins__",
                     "__getattr__", "__dir__", "__wrapped__", "__origin__", "__class__", "__dict__"}


class ProxyModule(types.ModuleType):
    """A module of the solution: every attribute is asked of the child's module."""

    def __getattr__(self, name):
        if name in _MODULE_MACHINERY or "_agentrl_handle" not in self.__dict__:
            raise AttributeError(name)
        boundary = _BOUNDARIES[self.__dict__["_agentrl_boundary"]]
        try:
            return boundary.on_handle(self.__dict__["_agentrl_handle"], "getattr", name)
        except AttributeError:
            if name != "__all__":
                raise
            return [n for n in boundary.on_handle(self.__dict__["_agentrl_handle"], "dir", None) if not n.startswith("_")]

    def __setattr__(self, name, value):
        if name.startswith("__") and name.endswith("__") or name.startswith("_agentrl_") or "_agentrl_handle" not in self.__dict__:
            return super().__setattr__(name, value)
        boundary = _BOUNDARIES[self.__dict__["_agentrl_boundary"]]
        boundary.on_handle(self.__dict__["_agentrl_handle"], "setattr", name, value)

    def __delattr__(self, name):
        if name in self.__dict__:
            return super().__delattr__(name)
        boundary = _BOUNDARIES[self.__dict__["_agentrl_boundary"]]
        boundary.on_handle(self.__dict__["_agentrl_handle"], "delattr", name)

    def __dir__(self):
        boundary = _BOUNDARIES[self.__dict__["_agentrl_boundary"]]
        return sorted(set(boundary.on_handle(self.__dict__["_agentrl_handle"], "dir", None)) | set(self.__dict__))


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, boundary: "Boundary") -> None:
        self.boundary = boundary

    def find_spec(self, name, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not spec.origin or not os.path.isfile(spec.origin) or not self.boundary.may_write(spec.origin):
            return None
        proxy = importlib.util.spec_from_loader(name, _Loader(self.boundary, spec.origin), origin=spec.origin,
                                                is_package=spec.submodule_search_locations is not None)
        if spec.submodule_search_locations is not None:
            proxy.submodule_search_locations = list(spec.submodule_search_locations)
        proxy.has_location = True
        return proxy


class _Loader(importlib.abc.Loader):
    def __init__(self, boundary: "Boundary", origin: str) -> None:
        self.boundary, self.origin = boundary, origin

    def create_module(self, spec):
        return ProxyModule(spec.name)

    def exec_module(self, module):
        self.boundary.import_module(module)

