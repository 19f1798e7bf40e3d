"""The registry of compute functions a graph file may name.

Built-ins register themselves by name; a graph may also name ``package.module:function``
(or ``package.module.function``) for code the user installed. Functions are plain Python:
keyword arguments in, a JSON-serialisable value out.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class ComputeFunction:
    """A registered function plus what it needs to run."""

    name: str
    fn: Callable[..., Any]
    blocking: bool = False  # heavy work: run in a thread so the event loop stays free
    requires: tuple[str, ...] = field(default=())  # importable modules it needs
    extra: str | None = None  # the install extra that provides `requires`

    @property
    def wants_runtime(self) -> bool:
        """The function declares a `runtime` parameter: the engine passes the run's Runtime."""
        try:
            return "runtime" in inspect.signature(self.fn).parameters
        except (TypeError, ValueError):
            return False

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def missing(self) -> list[str]:
        """Required modules that are not importable here."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]


_REGISTRY: dict[str, ComputeFunction] = {}


@dataclass(frozen=True)
class _Options:
    blocking: bool
    requires: tuple[str, ...]
    extra: str | None


_OPTIONS = "__orchestrator_options__"  # where `register` leaves a function's options


def register(
    name: str | None = None,
    *,
    blocking: bool = False,
    requires: tuple[str, ...] = (),
    extra: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for compute functions. `blocking=True` runs the function in a worker
    thread so a slow one does not stall every other request; `name` also makes it
    available to graph files by that name (once its module is imported)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        # Kept on the function, so a graph naming it as module:function gets the options too.
        setattr(fn, _OPTIONS, _Options(blocking, requires, extra))
        if name is not None:
            _REGISTRY[name] = ComputeFunction(name, fn, blocking, requires, extra)
        return fn

    return wrap


def _load_builtins() -> None:
    # Every module of this package registers its functions on import; heavy libraries
    # (metrics) must be imported inside the functions so this stays cheap.
    package = importlib.import_module("orchestrator.compute")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "registry":
            importlib.import_module(f"orchestrator.compute.{info.name}")


def resolve(name: str, near: Path | None = None) -> ComputeFunction:
    """Find a function by registered name or module path; raise LookupError with a hint.

    A module path is imported from `near` (the graph file's folder) first, then the
    working directory, then the installed packages: the same for `orchestrator` and
    `python -m orchestrator`, whose own search paths differ."""
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name:
        close = difflib.get_close_matches(name, names(), n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise LookupError(
            f"unknown compute function '{name}': {hint}`orchestrator functions` lists the "
            "built-ins; a function of your own is named module:function"
        )
    try:
        module = _import_near(module_name, near)
    except ImportError as exc:
        where = f" (looked beside the graph in {near} too)" if near is not None else ""
        raise LookupError(
            f"cannot import module '{module_name}' for '{name}': {exc}{where}"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise LookupError(f"module '{module_name}' has no function '{attr}'")
    options = getattr(fn, _OPTIONS, None)
    if isinstance(options, _Options):
        return ComputeFunction(name, fn, options.blocking, options.requires, options.extra)
    return ComputeFunction(name, fn)


def _import_near(module_name: str, near: Path | None) -> ModuleType:
    """Import with the graph's folder and the working directory searched first, for this
    import only: sys.path is as it was afterwards."""
    extra = [str(p) for p in (near, Path.cwd()) if p is not None]
    saved = list(sys.path)
    sys.path[:0] = list(dict.fromkeys(extra))
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path[:] = saved


def names() -> list[str]:
    """The functions that ship with orchestrator (not those users register by name)."""
    _load_builtins()
    return sorted(n for n, f in _REGISTRY.items() if f.fn.__module__.startswith("orchestrator."))
