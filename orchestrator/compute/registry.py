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
from collections.abc import Callable
from dataclasses import dataclass, field
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


def register(
    name: str,
    *,
    blocking: bool = False,
    requires: tuple[str, ...] = (),
    extra: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: make a function available to graph files under `name`."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
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


def resolve(name: str) -> ComputeFunction:
    """Find a function by registered name or dotted path; raise LookupError with a hint."""
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise LookupError(
            f"unknown compute function '{name}': {hint}`orchestrator functions` lists the "
            "built-ins; a function of your own is named module:function"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LookupError(f"cannot import module '{module_name}' for '{name}': {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise LookupError(f"module '{module_name}' has no function '{attr}'")
    return ComputeFunction(name, fn)


def names() -> list[str]:
    """Every registered built-in name."""
    _load_builtins()
    return sorted(_REGISTRY)
