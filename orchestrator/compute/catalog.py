"""The reference of built-in compute functions, read from the functions themselves.

`orchestrator functions` prints it and docs/functions.md is generated from it, so a
function's arguments and docs cannot drift between the code, the CLI and the docs.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass

from ..shipped import pip_install
from .registry import ComputeFunction, names, resolve

HIDDEN_PARAMETERS = {"runtime"}  # given by the engine, never written in a graph file


@dataclass(frozen=True)
class Argument:
    """One argument a graph file may pass in `args:`."""

    name: str
    annotation: str
    default: str | None  # None: required

    def __str__(self) -> str:
        text = f"{self.name}: {self.annotation}" if self.annotation else self.name
        return text if self.default is None else f"{text} = {self.default}"


@dataclass(frozen=True)
class FunctionDoc:
    """A built-in as a graph author needs it: name, arguments, what it does."""

    name: str
    arguments: tuple[Argument, ...]
    summary: str
    details: str
    extra: str | None

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(str(a) for a in self.arguments)})"


def _arguments(function: ComputeFunction) -> tuple[Argument, ...]:
    found = []
    for param in inspect.signature(function.fn).parameters.values():
        if param.name in HIDDEN_PARAMETERS or param.kind in (
            param.VAR_POSITIONAL,
            param.VAR_KEYWORD,
        ):
            continue
        annotation = param.annotation
        if annotation is inspect.Parameter.empty:
            text = ""
        else:
            text = (
                annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
            )
        default = None if param.default is inspect.Parameter.empty else repr(param.default)
        found.append(Argument(param.name, text, default))
    return tuple(found)


def describe(name: str) -> FunctionDoc:
    """One built-in's reference; LookupError naming the closest built-ins when unknown."""
    if name not in names():
        close = difflib.get_close_matches(name, names(), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise LookupError(
            f"no built-in function '{name}'{hint} (orchestrator functions lists them)"
        )
    function = resolve(name)
    doc = inspect.cleandoc(function.fn.__doc__ or "")
    # The first paragraph is the summary (it may wrap over several lines); the rest, details.
    summary, _, details = doc.partition("\n\n")
    summary = " ".join(summary.split())
    return FunctionDoc(name, _arguments(function), summary, details.strip(), function.extra)


def catalog() -> list[FunctionDoc]:
    """Every built-in, by name."""
    return [describe(name) for name in names()]


def catalog_markdown() -> str:
    """docs/functions.md: every built-in with its signature and docs."""
    parts = [
        "# Built-in functions",
        "",
        "Generated from the code by `orchestrator functions --markdown > docs/functions.md`;"
        " a test keeps it in step.",
        "A compute node or aggregate names one in `function:` and passes its arguments in "
        "`args:` (expressions over upstream values, or literals). An argument without a default "
        "is required.",
        "",
        "## Functions of your own",
        "",
        "A graph file is someone else's data, so by default it calls only the built-ins "
        "below and functions registered with orchestrator, never an arbitrary "
        "`module:function` (docs/RELIABILITY.md, threat model). There are two ways to "
        "register one:",
        "",
        "- your own Python code (the Python API), before it loads the graph: "
        '`@orchestrator.register("my_score")` on the function, then `function: my_score` '
        "in the graph;",
        "- an installed package, through the `orchestrator.functions` entry-point group; in "
        "its pyproject.toml:",
        "",
        "```toml",
        '[project.entry-points."orchestrator.functions"]',
        'my_score = "my_package.scores:my_score"',
        "```",
        "",
        "  The graph then names it `my_score` (or `my_package.scores:my_score`, the entry "
        "point's value). `register(blocking=True, requires=..., extra=...)` on the function "
        'still sets its options; `reads_files=("model_dir",)` names the arguments that '
        "point at a file or folder the function reads, which a graph you do not trust may "
        "only take from a param you give (`--param`), never choose itself; "
        '`languages=("language", ("en",))` says the function serves only those languages, '
        "so `validate` refuses a graph that sets that argument to another one.",
        "",
        "A graph you trust may name any `module:function`, a module beside the graph file "
        "first: run it with `--trust` (`trust=True` in Python). See graph-format.md.",
        "",
        "## The built-ins",
        "",
        "| function | what it does |",
        "|---|---|",
    ]
    docs = catalog()
    parts += [f"| [`{d.name}`](#{d.name}) | {d.summary} |" for d in docs]
    for d in docs:
        parts += ["", f"## {d.name}", "", "```", d.signature, "```", "", d.summary]
        if d.details:
            parts += ["", d.details]
        if d.extra:
            parts += ["", f"Needs the `{d.extra}` extra: `{pip_install(d.extra)}`."]
    return "\n".join(parts) + "\n"
