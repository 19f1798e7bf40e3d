"""The per-example values behind a comparison: for each compared output and pair of runs,
every matched example's two values and how far it moved, largest move first, so a page can
plot run a against run b and list the examples that moved most."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from ..errors import ConfigurationError
from .compare import check_numbers, load_run, matched_by_id, ok_values
from .comparison import Comparison

if TYPE_CHECKING:
    from .compare import RunResult


class ExampleShift(BaseModel):
    """One example's value in run a and run b; `difference` is b − a, the term whose mean
    is the comparison's `difference`."""

    id: str
    a: float
    b: float
    difference: float


class PairExamples(BaseModel):
    """One output and pair of runs: the examples both scored, largest |b − a| first."""

    output: str
    run_a: str
    run_b: str
    examples: list[ExampleShift]


def paired_examples(
    result: Comparison, runs: Sequence[str | Path | RunResult] | None = None
) -> list[PairExamples]:
    """The examples behind every output and pair of `result`, read again from the run
    folders it names (or from `runs`, the same runs given to compare, in that order)."""
    sources: Sequence[str | Path | RunResult]
    if runs is None:
        missing = [info.label for info in result.runs if info.path is None]
        if missing:
            raise ConfigurationError(
                f"run(s) {', '.join(missing)} were compared in memory, with no folder to read "
                "the examples from: pass them again as runs=..."
            )
        sources = [str(info.path) for info in result.runs]
    else:
        sources = runs
    if len(sources) != len(result.runs):
        raise ConfigurationError(
            f"the comparison has {len(result.runs)} runs and {len(sources)} were given"
        )
    loaded = [load_run(run, position) for position, run in enumerate(sources)]
    values = ok_values(loaded)
    check_numbers(loaded, values, [output.output for output in result.outputs])
    labels = [info.label for info in result.runs]
    found = []
    for output in result.outputs:
        for i, j in combinations(range(len(labels)), 2):
            shifts = [
                ExampleShift(id=key, a=float(a), b=float(b), difference=float(b) - float(a))
                for key, a, b in matched_by_id(values, output.output, i, j)
            ]
            shifts.sort(key=lambda s: (-abs(s.difference), s.id))
            found.append(
                PairExamples(
                    output=output.output, run_a=labels[i], run_b=labels[j], examples=shifts
                )
            )
    return found
