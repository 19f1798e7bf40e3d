"""Dataset-level results: means of numeric outputs and the graph's aggregate nodes."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .errors import NodeError
from .graph import CompiledGraph
from .templates import Expression


def numeric_leaves(row: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, float]:
    """Numeric values of a result line, nested dicts flattened with dots (two levels)."""
    found: dict[str, float] = {}
    for key, value in row.items():
        if key in ("id", "status", "error", "row"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value):
            found[name] = float(value)
        elif isinstance(value, dict) and depth < 1:
            found.update(numeric_leaves(value, f"{name}.", depth + 1))
    return found


def output_means(results: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Mean of every numeric output over the ok examples (streamed: memory per column only)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in results:
        if row.get("status") != "ok":
            continue
        for name, value in numeric_leaves(row).items():
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sorted(sums)}


def status_counts(results: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many result lines there are, and how many ok and failed."""
    counts = {"examples": 0, "examples_ok": 0, "examples_failed": 0}
    for row in results:
        counts["examples"] += 1
        status = row.get("status")
        if status in ("ok", "failed"):
            counts[f"examples_{status}"] += 1
    return counts


def run_aggregates(
    graph: CompiledGraph, results: list[dict[str, Any]], params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Evaluate the graph's `aggregates` over the ok result lines, with the run's params."""
    # Examples finish in any order; sorting makes order-sensitive aggregates (Elo, seeded
    # bootstraps) give the same answer for the same results.
    ok = sorted((r for r in results if r.get("status") == "ok"), key=lambda r: str(r["id"]))
    context = {"results": ok, "params": {**graph.spec.params, **(params or {})}}
    out: dict[str, Any] = {}
    for name, agg in graph.aggregates.items():
        kwargs = {}
        for arg, value in agg.args.items():
            if isinstance(value, Expression):
                try:
                    kwargs[arg] = value(context)
                except Exception as exc:
                    raise NodeError(f"aggregates.{name}", f"args.{arg}: {exc}") from exc
            else:
                kwargs[arg] = value
        try:
            out[name] = agg.function.fn(**kwargs)
        except Exception as exc:
            raise NodeError(
                f"aggregates.{name}", f"function '{agg.spec.function}' raised: {exc}"
            ) from exc
    return out
