"""A run's params: the graph's declared ones with the caller's overrides, checked once.

A misspelt override would otherwise be ignored in silence (the run uses the default) and
a required one found missing only row by row, after requests were paid for.
"""

from __future__ import annotations

import difflib
from typing import Any

from .errors import ConfigurationError
from .graph import CompiledGraph


def effective_params(graph: CompiledGraph, overrides: dict[str, Any]) -> dict[str, Any]:
    """The graph's params with `overrides` applied; unknown or missing ones refused."""
    declared = graph.spec.params
    required = list(getattr(graph.spec, "required_params", []))
    known = [*declared, *required]
    problems = []
    for name in overrides:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(f"unknown param '{name}'{hint}")
    missing = [name for name in required if name not in overrides]
    if missing:
        problems.append(
            "required param(s) not given: " + ", ".join(missing) + " (--param NAME=VALUE)"
        )
    if problems:
        listed = ", ".join(known) if known else "none"
        raise ConfigurationError(
            f"graph '{graph.name}': {'; '.join(problems)}. Its params are: {listed}."
        )
    return {**declared, **overrides}
