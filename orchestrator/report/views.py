"""Per-protocol panels of the report, registered by the protocol's view module rather than
wired into the generic page. Two kinds:

- an *example view* turns one result line's outputs into the data its panel on the
  example page draws (app.js has a renderer of the same name), and says which outputs it
  shows so they are not shown twice;
- a *run view* draws the run as a whole (inline SVG, rendered here at build time so the
  page prints and reads without JavaScript) from the aggregates of summary.json, found by
  the compute function that made them, from the result lines, and from meta_eval.json.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..store import ResultLine

View = Callable[[dict[str, Any]], dict[str, Any] | None]


@dataclass(frozen=True)
class ExampleView:
    """A named panel: `build` gives its data for one example (None: not this protocol's)."""

    name: str
    build: View
    shows: tuple[str, ...] = ()  # outputs the panel presents in full


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of summary.json with the compute function the graph names for it."""

    name: str
    function: str | None  # None when the graph file could not be read
    value: Any


@dataclass(frozen=True)
class ScoreField:
    """A numeric output that is an LLM node's integer or number field (`judge.content`),
    with the bounds its schema declares."""

    output: str
    node: str
    type: str  # "integer" | "number"
    min: float | None = None
    max: float | None = None


@dataclass
class RunContext:
    """What a run view may draw from. Views draw these numbers; they do not recompute them."""

    aggregates: list[Aggregate]
    results: list[ResultLine]
    score_fields: list[ScoreField] = field(default_factory=list)
    meta_eval: dict[str, Any] | None = None  # RUN_DIR/meta_eval.json, when written
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # example id → its inputs
    run_dir: Path | None = None  # the run folder, for views that read its trace (judge card)

    def by_function(self, *functions: str) -> list[Aggregate]:
        """The aggregates made by any of these compute functions, in summary order."""
        return [
            a
            for a in self.aggregates
            if a.function in functions and a.value is not None and not _failed(a.value)
        ]

    def ok(self) -> list[ResultLine]:
        return [line for line in self.results if line.status == "ok"]


def _failed(value: Any) -> bool:
    """An aggregate that raised is stored as {"failed": true, "error": ...}: nothing to draw."""
    return isinstance(value, dict) and value.get("failed") is True


RunBuild = Callable[[RunContext], str | None]


@dataclass(frozen=True)
class RunView:
    """A run-level panel: `build` gives its HTML (None: nothing of its kind in this run);
    the aggregates it draws in full are folded in the generic dataset-level tables."""

    name: str
    title: str
    build: RunBuild
    shows: tuple[str, ...] = ()  # compute functions whose aggregates the panel draws


V = TypeVar("V", "ExampleView", "RunView")

_VIEWS: dict[str, ExampleView] = {}
_RUN_VIEWS: dict[str, RunView] = {}
_BUILTIN_MODULES = (
    "orchestrator.report.expert_view",
    "orchestrator.report.pairwise_view",
    "orchestrator.report.perse_view",
    "orchestrator.report.jury_view",
    "orchestrator.report.style_view",
    "orchestrator.report.score_view",
    "orchestrator.report.metaeval_view",
    "orchestrator.report.groups_view",
    "orchestrator.report.card_view",
    "orchestrator.report.lineage_view",
    "orchestrator.report.estimate_view",
)


def _load_builtin() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def in_order(views: Iterable[V]) -> list[V]:
    """Built-in views in `_BUILTIN_MODULES` order, then the others as registered: a module
    imported early (by a caller, or a test) registers first, and must not move its panel."""
    rank = {module: i for i, module in enumerate(_BUILTIN_MODULES)}
    return sorted(views, key=lambda view: rank.get(view.build.__module__, len(rank)))


def register_view(name: str, build: View, shows: tuple[str, ...] = ()) -> None:
    """Add a panel to every example page whose outputs `build` recognises; app.js draws it
    with the renderer of the same name (a view without one is shown as plain data)."""
    _VIEWS[name] = ExampleView(name, build, shows)


def register_run_view(name: str, title: str, build: RunBuild, shows: tuple[str, ...] = ()) -> None:
    """Add a panel to the run's overview when `build` finds its data in the run."""
    _RUN_VIEWS[name] = RunView(name, title, build, shows)


def example_views(outputs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The data of every registered view that applies to these outputs; the outputs a view
    shows are taken out of `outputs`."""
    _load_builtin()
    found: dict[str, dict[str, Any]] = {}
    for view in in_order(_VIEWS.values()):
        data = view.build(outputs)
        if data is not None:
            found[view.name] = data
            for name in view.shows:
                outputs.pop(name, None)
    return found


@dataclass(frozen=True)
class RunPanel:
    """A run view's rendered panel."""

    name: str
    title: str
    html: str


def run_views(context: RunContext) -> tuple[list[RunPanel], set[str]]:
    """The panels of every run view that applies, and the names of the aggregates they
    draw in full."""
    _load_builtin()
    panels: list[RunPanel] = []
    shown: set[str] = set()
    for view in in_order(_RUN_VIEWS.values()):
        html = view.build(context)
        if html is None:
            continue
        panels.append(RunPanel(view.name, view.title, html))
        shown |= {a.name for a in context.by_function(*view.shows)}
    return panels, shown
