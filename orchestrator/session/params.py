"""A run's params: the graph's declared ones with the caller's overrides, checked once.

A misspelt override would otherwise be ignored in silence (the run uses the default) and
a required one found missing only row by row, after requests were paid for.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from ..compute import ComputeFunction
from ..errors import ConfigurationError
from ..graph import CompiledGraph, Expression
from ..kinds import CompiledCompute


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
    problems.extend(_retyped(declared, overrides))
    params = {**declared, **overrides}
    problems.extend(_misfits(graph, params))
    if problems:
        listed = ", ".join(known) if known else "none"
        raise ConfigurationError(
            f"graph '{graph.name}': {'; '.join(problems)}. Its params are: {listed}."
        )
    return params


def _retyped(declared: dict[str, Any], overrides: dict[str, Any]) -> list[str]:
    """Overrides of a number or true/false param by a value of another type (`--param
    threshold=high`): the graph's expressions would fail on every row, after its calls."""
    problems = []
    for name, value in overrides.items():
        default = declared.get(name)
        if isinstance(default, bool):
            kind, fits = "true or false", isinstance(value, bool)
        elif isinstance(default, int | float):
            kind = "a number"
            fits = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            continue  # text, lists, mappings and params without a default take any value
        if not fits:
            problems.append(f"param '{name}' is {kind} (default {default!r}), not {value!r}")
    return problems


_PARAM = re.compile(r"\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*")


def _misfits(graph: CompiledGraph, params: dict[str, Any]) -> list[str]:
    """Params handed straight to a function's argument (`arg: params.NAME`) whose value
    does not fit the argument's declared type: said before the first request, not on
    every row once its calls are paid for."""
    bound: list[tuple[str, ComputeFunction, dict[str, Any]]] = [
        (f"node '{name}'", node.function, node.args)
        for name, node in graph.nodes.items()
        if isinstance(node, CompiledCompute) and node.function is not None
    ]
    bound += [
        (f"aggregate '{name}'", agg.function, agg.args) for name, agg in graph.aggregates.items()
    ]
    problems = []
    for where, function, args in bound:
        for arg, value in args.items():
            match = _PARAM.fullmatch(value.source) if isinstance(value, Expression) else None
            if match is None or params.get(match[1]) is None:
                continue  # not a param, or one with no value yet (a required one refused above)
            problem = function.value_problem(arg, params[match[1]])
            if problem is not None:
                problems.append(f"param '{match[1]}' for {where} args.{arg}: {problem}")
    return problems
