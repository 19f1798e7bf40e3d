"""The typed record of an alignment: the search trace, the chosen configuration and the
held-out comparison of baseline and aligned judge, as alignment.json holds it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Metric = Literal["alpha", "kappa", "spearman", "accuracy"]
METRICS: tuple[str, ...] = ("alpha", "kappa", "spearman", "accuracy")
Verdict = Literal["better", "same", "worse"]
BASELINE = "baseline"


class Shot(BaseModel):
    """One few-shot example: a labelled search-set example's inputs and its human answer."""

    id: str
    inputs: dict[str, Any]
    output: dict[str, Any]


class Variant(BaseModel):
    """A change to the graph as given: `prompt`, `system` (a template name) or
    `params.NAME` (a value); the graph as given is the variant with key `baseline`."""

    key: str = BASELINE
    value: Any = None

    @property
    def label(self) -> str:
        """How the trace and the page name it."""
        return BASELINE if self.key == BASELINE else f"{self.key}={self.value}"


class Configuration(BaseModel):
    """One point of the search space: a shot count, a variant, isotonic off or on."""

    shots: int = 0
    variant: Variant = Field(default_factory=Variant)
    isotonic: bool = False

    @property
    def label(self) -> str:
        """`shots=2 baseline`, `shots=4 prompt=b.jinja isotonic`."""
        return f"shots={self.shots} {self.variant.label}" + (" isotonic" if self.isotonic else "")


class Trial(BaseModel):
    """A configuration's score on each search fold and their mean (None where undefined)."""

    configuration: Configuration
    folds: list[float | None]
    score: float | None


class Estimate(BaseModel):
    """A metric on the test set with its bootstrap interval."""

    value: float | None
    ci: list[float] | None
    n: int


class Side(BaseModel):
    """One judge (baseline or aligned) as the test phase measured it."""

    configuration: Configuration
    test: Estimate


class Difference(BaseModel):
    """Aligned minus baseline on the test set, its paired interval, the swap test's
    two-sided p-value and the plain verdict it supports."""

    value: float | None
    ci: list[float] | None
    verdict: Verdict
    p: float | None = None


class IsotonicMap(BaseModel):
    """A monotone map of the judge's score onto the labels' scale: knots `x` → `y`,
    linear between them, flat outside."""

    x: list[float]
    y: list[float]


class Alignment(BaseModel):
    """What `orc.align` found and wrote: see docs/align.md for every field."""

    graph: str  # the aligned graph file
    folder: str
    name: str  # the aligned protocol's name
    source_graph: str  # the name of the graph as given
    node: str
    field: str
    metric: Metric
    kind: Literal["scores", "choices"]
    seed: int
    folds: int
    test_share: float
    cluster: str | None = None
    search_ids: list[str]
    test_ids: list[str]
    trace: list[Trial]
    chosen: Configuration
    baseline: Side
    aligned: Side
    difference: Difference
    verdict: Verdict
    shots: list[str]  # ids of the chosen shots (all from the search set)
    isotonic: IsotonicMap | None = None
    isotonic_applied: bool = False  # whether the written graph applies `isotonic` itself
    bootstrap: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
