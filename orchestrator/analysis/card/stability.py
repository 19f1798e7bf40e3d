"""The judge card's stability line: how far a judge's answer holds when the same rows are
asked again at the same settings (test–retest).

A retest (`orc.retest`, api/retest.py) re-asks N rows of a finished run K times, each
repeat a run folder of its own under fresh sample indices. This module reads those
folders back and measures, per LLM node and per judged field of its output:

- Krippendorff's α over the repeats (each repeat a rater, each row a unit; nominal for
  booleans and enum strings, interval for numbers; `metaeval_stats.alpha`), with a
  percentile bootstrap interval over rows computed for all resamples at once
  (`stats.weighted_alpha`);
- a one-sided p-value for "α is below RELIABLE_ALPHA" from the same resamples, which the
  judge card tests (Holm) with its other findings;
- the flip rate: the share of rows whose value is not the same in every repeat (with n > 1
  samples a node's every sample counts as a rating, for both).

Free-text string fields (a `reason`) are left out: their wording differs on every sample,
which says nothing about the verdict. The graph's final outputs get a flip rate too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...graph import CompiledGraph, FieldSpec
from ...stats import cluster_index, draw_counts, percentile_interval, weighted_alpha
from ...store import RunReader
from ..metaeval_stats import Bootstrap, alpha, code, codes

Level = Literal["nominal", "interval"]

# Krippendorff's customary floor for data to be relied on; the card flags a judge whose α
# over repeats is significantly below it (a judge at α 0.8 is flagged at most ~5% of the time).
RELIABLE_ALPHA = 0.8
Unit = tuple[str, int]  # (example id, foreach item; store.trace.WHOLE without foreach)


@dataclass(frozen=True)
class Stability:
    """Test–retest agreement of one output field of one LLM node over k repeats.

    `alpha` is None when it is undefined (no row answered twice, or every answer the same
    value, so there is no variation to agree on); `flip_rate` is None with no row answered
    twice. `inputs_held`: only this node was re-asked, its inputs as the run had them; when
    every node is re-asked, a node's repeats also carry its inputs' changes."""

    node: str
    field: str
    model: str | None
    level: Level
    k: int
    rows: int  # rows (foreach items for a foreach node) answered in at least two repeats
    alpha: float | None
    alpha_ci: tuple[float, float] | None
    # One-sided bootstrap p of α < RELIABLE_ALPHA (the share of resamples at or above it).
    p_unreliable: float | None
    flip_rate: float | None
    flips: int
    inputs_held: bool


@dataclass(frozen=True)
class OutputFlips:
    """How often one of the graph's final outputs is not the same in every repeat."""

    output: str
    rows: int  # rows that finished in at least two repeats
    flips: int
    flip_rate: float | None


@dataclass(frozen=True)
class Retest:
    """What `orc.retest` measured: the repeats' folder, the rows and settings, and the
    stability of every judged field and of every final output."""

    run: Path
    folder: Path
    k: int
    rows: tuple[str, ...]  # the example ids re-asked, in the run's order
    seed: int
    temperature: float | None  # None: each node's own
    nodes: tuple[str, ...]  # the nodes re-asked
    stability: tuple[Stability, ...]
    outputs: tuple[OutputFlips, ...]

    def as_dict(self) -> dict[str, Any]:
        """The record in JSON-ready values (paths as text), as `--format json` prints it."""
        found = asdict(self)
        found["run"], found["folder"] = str(self.run), str(self.folder)
        return found


def field_level(spec: FieldSpec) -> Level | None:
    """The α level of an output field, or None for one that is not a verdict (free text,
    lists, objects)."""
    if spec.type in ("integer", "number"):
        return "interval"
    if spec.type == "boolean":
        return "nominal"
    if spec.type == "string" and (spec.enum is not None or spec.enum_from is not None):
        return "nominal"
    return None


def judged_fields(graph: CompiledGraph, node: str) -> dict[str, Level]:
    """The fields of an LLM node's output that a retest measures, with their α level."""
    output: dict[str, FieldSpec] = getattr(graph.nodes[node].spec, "output", None) or {}
    return {
        name: level for name, spec in output.items() if (level := field_level(spec)) is not None
    }


def llm_nodes(graph: CompiledGraph) -> list[str]:
    """The graph's nodes that ask a model, in graph order."""
    return [name for name, node in graph.nodes.items() if node.is_llm]


@dataclass(frozen=True)
class NodeAnswers:
    """One node's answers in one run folder: each unit's samples (one for n = 1) and the
    messages it was asked with, from its latest successful execution; and the model."""

    values: dict[Unit, list[Any]]
    prompts: dict[Unit, Any]
    model: str | None


def node_answers(folder: Path, node: str, examples: Iterable[str] | None = None) -> NodeAnswers:
    """`node`'s answers as the trace of the run in `folder` holds them: of every example, or
    of `examples` only (a retest's rows out of a run of many)."""
    values: dict[Unit, list[Any]] = {}
    prompts: dict[Unit, Any] = {}
    model = None
    reader = RunReader(folder)
    if not reader.has_trace:
        return NodeAnswers(values, prompts, model)
    with reader.trace() as trace:
        runs = (
            trace.node_runs(None, node)
            if examples is None
            else (run for example in examples for run in trace.node_runs(example, node))
        )
        for run in runs:
            if run.status != "ok" or run.value is None:
                continue
            model = run.model or model
            unit = (run.example_id, run.item)
            values[unit] = run.value if isinstance(run.value, list) else [run.value]
            prompts[unit] = run.messages
    return NodeAnswers(values, prompts, model)


def asked_alike(original: NodeAnswers, repeats: Sequence[NodeAnswers]) -> bool:
    """Whether every repeat asked the node with the very messages the run did: its inputs
    were held, so what varies is the node's own answer."""
    return all(
        original.prompts.get(unit) == prompt
        for repeat in repeats
        for unit, prompt in repeat.prompts.items()
    )


def _rating(sample: Any, name: str) -> Any:
    # A call recorded as failed (`on_error: record`) holds {"failed", "error"}: no rating.
    return sample.get(name) if isinstance(sample, dict) else None


def ratings_matrix(
    repeats: Sequence[dict[Unit, list[Any]]], name: str, level: Level
) -> tuple[list[Unit], np.ndarray]:
    """Units × ratings (every sample of every repeat a column), NaN where none was given;
    nominal values coded as numbers. Units in first-seen order."""
    units: dict[Unit, None] = {}
    for repeat in repeats:
        units.update(dict.fromkeys(repeat))
    width = max((len(s) for repeat in repeats for s in repeat.values()), default=1)
    raw = [
        [
            _rating(samples[i], name) if i < len(samples) else None
            for repeat in repeats
            for samples in [repeat.get(unit, [])]
            for i in range(width)
        ]
        for unit in units
    ]
    if level == "nominal":
        table = codes([v for row in raw for v in row if v is not None])
        matrix = [[code(v, table) for v in row] for row in raw]
    else:
        matrix = [[math.nan if v is None else float(v) for v in row] for row in raw]
    return list(units), np.asarray(matrix, dtype=float).reshape(len(units), len(repeats) * width)


def flips(matrix: np.ndarray) -> tuple[int, int]:
    """(rows with two or more ratings, of those the rows whose ratings are not all equal)."""
    rated = (~np.isnan(matrix)).sum(axis=1) >= 2
    lows = np.nanmin(np.where(rated[:, None], matrix, 0.0), axis=1)
    highs = np.nanmax(np.where(rated[:, None], matrix, 0.0), axis=1)
    return int(rated.sum()), int((rated & (highs > lows)).sum())


def alpha_bootstrap(
    clusters: Sequence[str], matrix: np.ndarray, level: Level, boot: Bootstrap
) -> tuple[tuple[float, float] | None, float | None]:
    """Percentile bootstrap interval of α, drawing whole clusters (a row with its foreach
    items) with replacement, and the one-sided p of α < RELIABLE_ALPHA from the same
    resamples (the test the interval inverts); (None, None) when no resample has α."""
    member = cluster_index(clusters, sort=False)
    drawn = draw_counts(int(member.max()) + 1, boot.resamples, boot.seed)
    found = weighted_alpha(matrix, level, drawn[:, member].astype(float))
    found = found[np.isfinite(found)]
    interval = percentile_interval(found, boot.confidence)
    if interval is None:
        return None, None
    p = (1.0 + float((found >= RELIABLE_ALPHA).sum())) / (1.0 + len(found))
    return (interval.low, interval.high), p


def stability_of(
    node: str,
    name: str,
    level: Level,
    repeats: Sequence[dict[Unit, list[Any]]],
    *,
    model: str | None,
    inputs_held: bool,
    boot: Bootstrap,
) -> Stability:
    """α with its interval (rows drawn whole, a foreach node's items with their row) and
    the flip rate of one field over the repeats."""
    units, matrix = ratings_matrix(repeats, name, level)
    rows, flipped = flips(matrix)
    point = alpha(matrix, level) if rows else None
    ci, p = None, None
    if point is not None:
        ci, p = alpha_bootstrap([example for example, _ in units], matrix, level, boot)
    return Stability(
        node=node,
        field=name,
        model=model,
        level=level,
        k=len(repeats),
        rows=rows,
        alpha=point,
        alpha_ci=ci,
        p_unreliable=p,
        flip_rate=flipped / rows if rows else None,
        flips=flipped,
        inputs_held=inputs_held,
    )


def measure(
    original: Path,
    folders: Sequence[Path],
    graph: CompiledGraph,
    nodes: Iterable[str],
    boot: Bootstrap | None = None,
) -> list[Stability]:
    """The stability of every judged field of `nodes` over the repeats in `folders`
    (`original`: the run they retest, to tell whether each node's inputs were held)."""
    boot = boot or Bootstrap(resamples=1000)
    found: list[Stability] = []
    for node in nodes:
        fields = judged_fields(graph, node)
        if not fields:
            continue
        answers = [node_answers(folder, node) for folder in folders]
        examples = {example for a in answers for example, _ in a.values}
        held = asked_alike(node_answers(original, node, sorted(examples)), answers)
        repeats = [a.values for a in answers]
        model = next((a.model for a in answers if a.model is not None), None)
        for name, level in fields.items():
            found.append(
                stability_of(node, name, level, repeats, model=model, inputs_held=held, boot=boot)
            )
    return found


def output_flips(folders: Sequence[Path]) -> list[OutputFlips]:
    """Per final output of the graph: how many rows finished in two repeats or more, and
    how many of those did not give the same value in all of them."""
    seen: dict[str, dict[str, list[Any]]] = {}
    for folder in folders:
        for line in RunReader(folder).latest_results():
            if line.status != "ok":
                continue
            for output, value in line.outputs.items():
                seen.setdefault(output, {}).setdefault(line.id, []).append(value)
    found = []
    for output, by_row in seen.items():
        answered = [values for values in by_row.values() if len(values) >= 2]
        changed = sum(any(v != values[0] for v in values[1:]) for values in answered)
        found.append(
            OutputFlips(
                output=output,
                rows=len(answered),
                flips=changed,
                flip_rate=changed / len(answered) if answered else None,
            )
        )
    return found
