"""Per-protocol views of an example in the report, registered by the protocol's view
module rather than wired into the generic page: a view turns a result line's outputs into
the data its panel draws, and says which outputs it shows (so they are not shown twice).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

View = Callable[[dict[str, Any]], dict[str, Any] | None]


@dataclass(frozen=True)
class ExampleView:
    """A named panel: `build` gives its data for one example (None: not this protocol's)."""

    name: str
    build: View
    shows: tuple[str, ...] = ()  # outputs the panel presents in full


_VIEWS: dict[str, ExampleView] = {}
_BUILTIN_MODULES = ("orchestrator.report.expert_view",)


def register_view(name: str, build: View, shows: tuple[str, ...] = ()) -> None:
    """Add a panel to every example page whose outputs `build` recognises; app.js draws it
    with the renderer of the same name (a view without one is shown as plain data)."""
    _VIEWS[name] = ExampleView(name, build, shows)


def example_views(outputs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The data of every registered view that applies to these outputs; the outputs a view
    shows are taken out of `outputs`."""
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    found: dict[str, dict[str, Any]] = {}
    for view in _VIEWS.values():
        data = view.build(outputs)
        if data is not None:
            found[view.name] = data
            for name in view.shows:
                outputs.pop(name, None)
    return found
