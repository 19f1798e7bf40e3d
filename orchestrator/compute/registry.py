"""The registry of compute functions a graph file may name.

Built-ins register themselves by name; so do the user's own functions (`register("name")`
run by the user's code) and installed packages, through the `orchestrator.functions`
entry-point group. Only a trusted graph may also name any ``package.module:function`` (or
``package.module.function``), a module beside it included: importing runs code, and a graph
file is data written by someone else. Functions are plain Python: keyword arguments in, a
JSON-serialisable value out.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import inspect
import pkgutil
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..errors import UntrustedFunction


@dataclass(frozen=True)
class ComputeFunction:
    """A registered function plus what it needs to run."""

    name: str
    fn: Callable[..., Any]
    blocking: bool = False  # heavy work: run in a thread so the event loop stays free
    requires: tuple[str, ...] = field(default=())  # importable modules it needs
    extra: str | None = None  # the install extra that provides `requires`
    # Arguments naming a file or folder the function reads (a pickle, a model folder, a
    # calibration file): in a graph not trusted, only the user may give them, since a graph
    # choosing them could read the user's files or load code (graph/checks.check_arguments).
    reads_files: tuple[str, ...] = field(default=())
    # (map, values, field): the argument `map` is keyed by the answers found in field
    # `field` of each element of argument `values` (map_votes' `positions`); `validate`
    # checks the keys against that field's enum (graph/checks.check_answer_map).
    answer_map: tuple[str, str, str] | None = None
    # (argument, languages): the function serves only these languages (primary tags, e.g.
    # ("en",) for METEOR's English WordNet); `validate` refuses a graph that gives the
    # argument another language (graph/checks.check_language).
    languages: tuple[str, tuple[str, ...]] | None = None

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

    def takes(self, argument: str) -> bool:
        """The function has a parameter of this name."""
        try:
            return argument in inspect.signature(self.fn).parameters
        except (TypeError, ValueError):
            return False

    def argument_problems(self, literals: dict[str, Any], given: set[str]) -> dict[str, str]:
        """What is wrong with the `args:` a graph gives this function, by argument: unknown
        names, required ones missing, and literal values of the wrong declared type.
        Expressions are typed only when they run; `runtime` is the engine's to give."""
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return {}
        params = {n: p for n, p in signature.parameters.items() if n != "runtime"}
        kinds = {p.kind for p in params.values()}
        problems: dict[str, str] = {}
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            accepted = [n for n, p in params.items() if p.kind not in _VARIADIC]
            for name in sorted(given - set(accepted)):
                close = difflib.get_close_matches(name, accepted, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                problems[name] = (
                    f"'{self.name}' has no argument '{name}' ({hint}it takes: "
                    f"{', '.join(accepted) or 'none'})"
                )
        for name, param in params.items():
            if param.default is param.empty and param.kind not in _VARIADIC and name not in given:
                problems[name] = f"'{self.name}' needs argument '{name}' (no default)"
        for name, value in literals.items():
            if name not in problems and (problem := self.value_problem(name, value)):
                problems[name] = problem
        return problems

    def value_problem(self, argument: str, value: Any) -> str | None:
        """Why `value` does not fit the argument's declared type, or None (it fits, or the
        argument has no annotation pydantic can check)."""
        hint = _type_hints(self.fn).get(argument)
        if hint is None:
            return None
        try:
            TypeAdapter(hint).validate_python(value)
        except ValidationError as exc:
            return f"{value!r} does not fit '{argument}': {exc.errors()[0]['msg']}"
        except Exception:  # an annotation pydantic cannot check: trust the value
            return None
        return None

    def missing(self) -> list[str]:
        """Required modules that are not importable here."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]


_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """A function's resolved annotations; none when they cannot be resolved here."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # a user's annotation naming what is not importable
        return {}


# The functions that ship (registered by the modules of this package as they load) and the
# user's (`orc.register("name")` anywhere else): a graph finds the user's first.
_BUILTINS: dict[str, ComputeFunction] = {}
_REGISTRY: dict[str, ComputeFunction] = {}


@dataclass(frozen=True)
class _Options:
    blocking: bool
    requires: tuple[str, ...]
    extra: str | None
    reads_files: tuple[str, ...] = ()
    answer_map: tuple[str, str, str] | None = None
    languages: tuple[str, tuple[str, ...]] | None = None


_OPTIONS = "__orchestrator_options__"  # where `register` leaves a function's options


def register(
    name: str | None = None,
    *,
    blocking: bool = False,
    requires: tuple[str, ...] = (),
    extra: str | None = None,
    reads_files: tuple[str, ...] = (),
    answer_map: tuple[str, str, str] | None = None,
    languages: tuple[str, tuple[str, ...]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for compute functions. `blocking=True` runs the function in a worker
    thread so a slow one does not stall every other request; `name` also makes it
    available to graph files by that name (once its module is imported). `reads_files`
    names arguments that point at a file or folder the function reads: a graph file from
    someone else may not choose them (only the user, through a param). `answer_map`
    (map, values, field) says argument `map` is keyed by the values of field `field` of
    argument `values`' elements, so `validate` checks its keys against that enum.
    `languages` (argument, tags) says the function serves only those languages: `validate`
    refuses a graph that sets the argument to another one."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        # Kept on the function, so a graph naming it as module:function gets the options too.
        options = _Options(blocking, requires, extra, reads_files, answer_map, languages)
        setattr(fn, _OPTIONS, options)
        if name is not None:
            shipped = (fn.__module__ or "").startswith("orchestrator.")
            (_BUILTINS if shipped else _REGISTRY)[name] = _with_options(name, fn, options)
        return fn

    return wrap


def _load_builtins() -> None:
    # Every module of this package registers its functions on import; heavy libraries
    # (metrics) must be imported inside the functions so this stays cheap.
    package = importlib.import_module("orchestrator.compute")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "registry":
            importlib.import_module(f"orchestrator.compute.{info.name}")


ENTRY_POINT_GROUP = "orchestrator.functions"


def _entry_point(name: str, module_name: str, attr: str) -> importlib.metadata.EntryPoint | None:
    """The `orchestrator.functions` entry point of an installed package that registers
    `name`, by its entry-point name or by the module:function it points at."""
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name == name or (module_name and point.value == f"{module_name}:{attr}"):
            return point
    return None


def resolve(name: str, near: Path | None = None, *, trusted: bool = False) -> ComputeFunction:
    """Find a function by registered name, entry point or (trusted only) module path; raise
    LookupError with a hint (UntrustedFunction for a module path an untrusted graph names,
    before anything is imported).

    A module path is imported from `near` (the graph file's folder) first, then the
    working directory, then the installed packages: the same for `orchestrator` and
    `python -m orchestrator`, whose own search paths differ."""
    _load_builtins()
    found = _REGISTRY.get(name) or _BUILTINS.get(name)
    if found is not None:
        return found
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    point = _entry_point(name, module_name, attr)
    if point is not None:
        module_name, _, attr = point.value.partition(":")
    elif not module_name:
        close = difflib.get_close_matches(name, _known_names(), n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise LookupError(
            f"unknown compute function '{name}': {hint}`orchestrator functions` lists the "
            "built-ins; a function of your own is named module:function"
        )
    elif not trusted:
        raise UntrustedFunction(
            f"cannot load function '{name}': a graph file may call only built-in functions "
            f'and those registered with orchestrator (`orchestrator.register("NAME")` in '
            f"your code, or an installed package's `{ENTRY_POINT_GROUP}` entry point); "
            "importing module "
            f"'{module_name}' would run its code. If you trust this graph and its folder, "
            "run it with --trust (trust=True in Python)"
        )
    try:
        # An installed package's function comes from the installed package, never from a
        # file of the same name beside the graph.
        module = importlib.import_module(module_name) if point else _import_near(module_name, near)
    except ImportError as exc:
        where = f" (looked beside the graph in {near} too)" if near is not None else ""
        raise LookupError(
            f"cannot import module '{module_name}' for '{name}': {exc}{where}"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        functions = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        close = difflib.get_close_matches(attr, functions, n=1)
        hint = f" (did you mean '{module_name}:{close[0]}'?)" if close else ""
        raise LookupError(f"module '{module_name}' has no function '{attr}'{hint}")
    options = getattr(fn, _OPTIONS, None)
    if isinstance(options, _Options):
        return _with_options(name, fn, options)
    return ComputeFunction(name, fn)


def _with_options(name: str, fn: Callable[..., Any], options: _Options) -> ComputeFunction:
    return ComputeFunction(
        name,
        fn,
        options.blocking,
        options.requires,
        options.extra,
        options.reads_files,
        options.answer_map,
        options.languages,
    )


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


def _known_names() -> list[str]:
    """Every name a graph may use without a module path: the built-ins, the functions
    registered in this process (the user's own) and installed packages' entry points."""
    points = [point.name for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    return sorted({*_BUILTINS, *_REGISTRY, *points})


def registered(name: str) -> ComputeFunction | None:
    """The user's function registered under `name` in this process (`register("name")`),
    if any: what another process cannot find unless it is sent (graph/compiled.py)."""
    return _REGISTRY.get(name)


def names() -> list[str]:
    """The functions that ship with orchestrator (not those users register by name)."""
    _load_builtins()
    return sorted(_BUILTINS)
