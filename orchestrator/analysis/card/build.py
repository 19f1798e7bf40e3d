"""Assemble the judge card of a run folder: read the trace, results and inputs once, measure
every part for each LLM node and model, then correct the tested findings with Holm."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigurationError, RunFolderError
from ...store import WHOLE, NodeRun, RunReader
from ..groups import cluster_keys, cluster_labels
from ..stress import kept_stress
from .agreement import agreement
from .bias import length_bias, position_bias, prefer_longer, self_preference
from .distribution import distribution
from .flags import Test, correct, interval_text
from .jury import jury
from .record import (
    Interval,
    JudgeCard,
    LengthBias,
    PositionBias,
    PreferLonger,
    SelfPreference,
)
from .reliability import reliability
from .stability import RELIABLE_ALPHA, Retest, Stability

log = logging.getLogger(__name__)

DEFAULT_JUDGED = "output"
DEFAULT_GENERATOR = "generator"
ALPHA = 0.05


@dataclass
class _Column:
    """One numeric output field of one LLM node and model: example id -> score."""

    node: str
    model: str | None
    field: str
    whole: dict[str, float] = dataclasses.field(
        default_factory=dict
    )  # the node's own record per example
    every: list[float] = dataclasses.field(default_factory=list)  # foreach items too


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _graph(reader: RunReader) -> dict[str, Any]:
    """The graph file the run used, as plain data (empty for a folder without a snapshot)."""
    path = reader.snapshot_graph
    if path is None or not path.is_file():
        return {}
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else {}


def _latest(runs: Iterable[NodeRun]) -> list[NodeRun]:
    """One record per (example, node, item): a resumed run's later record wins."""
    latest: dict[tuple[str, str, int], NodeRun] = {}
    for run in runs:
        latest[(run.example_id, run.node, run.item)] = run
    return list(latest.values())


def _columns(runs: list[NodeRun]) -> dict[tuple[str, str | None, str], _Column]:
    columns: dict[tuple[str, str | None, str], _Column] = {}
    for run in runs:
        if run.status != "ok" or not isinstance(run.value, dict) or not run.attempts:
            continue
        for name, value in run.value.items():
            if not _number(value):
                continue
            key = (run.node, run.model, name)
            column = columns.setdefault(key, _Column(run.node, run.model, name))
            column.every.append(float(value))
            if run.item == WHOLE:
                column.whole[run.example_id] = float(value)
    return columns


def _bounds(graph: dict[str, Any], node: str, name: str) -> tuple[float, float] | None:
    spec = ((graph.get("nodes") or {}).get(node) or {}).get("output") or {}
    declared = spec.get(name) if isinstance(spec, dict) else None
    if isinstance(declared, dict) and _number(declared.get("min")) and _number(declared.get("max")):
        return float(declared["min"]), float(declared["max"])
    return None


def _lengths(runs: list[NodeRun]) -> dict[tuple[str, str], int]:
    """(example, candidate) -> length of its text, from the comparisons a pairwise graph built."""
    found: dict[tuple[str, str], int] = {}
    for run in runs:
        if not isinstance(run.value, list):
            continue
        for item in run.value:
            if not isinstance(item, dict):
                continue
            for slot in ("first", "second"):
                shown = item.get(slot)
                if isinstance(shown, dict) and isinstance(shown.get("text"), str):
                    found[(run.example_id, str(shown.get("name")))] = len(shown["text"])
    return found


def _votes(reader: RunReader) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(result field, judge) -> every pairwise vote the results hold under that field."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for result in reader.latest_results():
        if result.status != "ok":
            continue
        for name, value in result.outputs.items():
            if not isinstance(value, list):
                continue
            for vote in value:
                if isinstance(vote, dict) and "picked_position" in vote and "winner" in vote:
                    vote = {"case": result.id, **vote}
                    found.setdefault((name, str(vote.get("judge") or "judge")), []).append(vote)
    return found


def _length_text(item: LengthBias) -> str:
    direction = "rises" if (item.spearman or 0.0) > 0 else "falls"
    return (
        f"length bias: {item.node}.{item.field} ({item.model}) {direction} with the length of "
        f"{item.judged}, Spearman {item.spearman:.2f}{interval_text(item.ci)}"
    )


def _longer_text(item: PreferLonger) -> str:
    return (
        f"length bias: {item.judge} ({item.votes}) prefers the longer text in "
        f"{item.rate:.0%}{interval_text(item.ci)} of {item.decisive_votes} decisive votes"
    )


def _position_text(item: PositionBias) -> str:
    flips = "" if item.flip_rate is None else f"; {item.flip_rate:.0%} of swapped pairs flip"
    return (
        f"position bias: {item.judge} ({item.votes}) picks the first answer in "
        f"{item.first_rate:.0%}{interval_text(item.ci)} of {item.decisive_votes} decisive "
        f"votes{flips}"
    )


def _self_text(item: SelfPreference) -> str:
    return (
        f"self-preference: {item.node}.{item.field} gives {item.model}'s own texts "
        f"{item.gap:+.2f}{interval_text(item.ci)} against other generators' ({item.own} own, "
        f"{item.others} other)"
    )


def _tests(card: JudgeCard) -> list[Test]:
    """Every effect with a p-value, in card order, with its plain-words sentence."""
    tests: list[Test] = []
    for lb in card.length_bias:
        if lb.p is not None:
            tests.append(Test("length_bias", f"{lb.node}.{lb.field}", lb.p, _length_text(lb)))
    for pl in card.prefer_longer:
        if pl.p is not None and pl.rate is not None:
            tests.append(Test("prefer_longer", f"{pl.votes}:{pl.judge}", pl.p, _longer_text(pl)))
    for pb in card.position_bias:
        if pb.p is not None and pb.first_rate is not None:
            tests.append(Test("position_bias", f"{pb.votes}:{pb.judge}", pb.p, _position_text(pb)))
    for sp in card.self_preference:
        if sp.p is not None and sp.gap is not None:
            tests.append(Test("self_preference", f"{sp.node}.{sp.field}", sp.p, _self_text(sp)))
    for st in card.stability.stability if card.stability is not None else ():
        if st.p_unreliable is not None and st.alpha is not None:
            where = f"{st.node}.{st.field}"
            tests.append(Test("stability", where, st.p_unreliable, _stability_text(st)))
    return tests


def _stability_text(item: Stability) -> str:
    ci = Interval(low=item.alpha_ci[0], high=item.alpha_ci[1]) if item.alpha_ci else None
    flips = "" if item.flip_rate is None else f"; {item.flip_rate:.0%} of rows changed"
    return (
        f"stability: {item.node}.{item.field} answers differently when asked again, test–retest"
        f" α {item.alpha:.2f}{interval_text(ci)}, below {RELIABLE_ALPHA} ({item.k} repeats of"
        f" {item.rows} rows{flips})"
    )


def _jury_part(
    card: JudgeCard, jurors: Sequence[str], columns: dict[tuple[str, str | None, str], _Column]
) -> None:
    by_node: dict[str, dict[str, dict[str, float]]] = {}
    for (node, _model, name), column in columns.items():
        by_node.setdefault(node, {}).setdefault(name, {}).update(column.whole)
    unknown = [j for j in jurors if j not in by_node]
    if unknown:
        raise ConfigurationError(
            f"jury: {', '.join(unknown)} not among the LLM nodes with numeric scores "
            f"({', '.join(sorted(by_node)) or 'none'})"
        )
    shared = set.intersection(*(set(by_node[j]) for j in jurors))
    if not shared:
        card.notes.append(f"jury {', '.join(jurors)}: no numeric field every juror scores")
        return
    name = "score" if "score" in shared else sorted(shared)[0]
    card.juries.append(jury(list(jurors), name, {j: by_node[j][name] for j in jurors}))


def _pointwise_part(
    card: JudgeCard,
    graph: dict[str, Any],
    columns: dict[tuple[str, str | None, str], _Column],
    rows: dict[str, dict[str, Any]],
    generator: str,
    seed: int,
    clusters: dict[str, str] | None = None,
) -> None:
    """Distribution, length bias and self-preference of every numeric field of every node;
    `clusters` (example id → cluster) makes their bootstraps draw whole clusters."""

    def labels(ids: list[str]) -> list[str] | None:
        return None if clusters is None else cluster_labels(ids, clusters)

    judged_input = card.judged
    measured = 0
    for column in columns.values():
        bounds = _bounds(graph, column.node, column.field)
        card.distributions.append(
            distribution(column.node, column.model, column.field, column.every, bounds)
        )
        texted = [i for i in column.whole if isinstance(rows.get(i, {}).get(judged_input), str)]
        if len(texted) >= 3:
            measured += 1
            card.length_bias.append(
                length_bias(
                    column.node,
                    column.model,
                    column.field,
                    judged_input,
                    [column.whole[i] for i in texted],
                    [len(rows[i][judged_input]) for i in texted],
                    seed=seed,
                    clusters=labels(texted),
                )
            )
        made = [i for i in column.whole if rows.get(i, {}).get(generator) is not None]
        names = [str(rows[i][generator]) for i in made]
        if column.model is not None and column.model in names:
            card.self_preference.append(
                self_preference(
                    column.node,
                    column.model,
                    column.field,
                    generator,
                    [column.whole[i] for i in made],
                    names,
                    seed=seed,
                    clusters=labels(made),
                )
            )
    if columns and not measured:
        card.notes.append(_unmeasured(judged_input, graph, rows))


def _inputs(graph: dict[str, Any], rows: dict[str, dict[str, Any]]) -> list[str]:
    """The run's input names: the graph's (`inputs`, `optional_inputs`) and the fields of
    the rows it kept, but for the example id."""
    names: list[str] = []
    for key in ("inputs", "optional_inputs"):
        declared = graph.get(key) or []
        names += [str(name) for name in declared] if isinstance(declared, list | dict) else []
    names += [name for row in rows.values() for name in row if name != "id"]
    return list(dict.fromkeys(names))


def _unmeasured(judged: str, graph: dict[str, Any], rows: dict[str, dict[str, Any]]) -> str:
    """Why no score's length bias was measured, in one line."""
    inputs = _inputs(graph, rows)
    if judged in inputs:
        why = f"fewer than three scored examples have a text in input {judged!r}"
    else:
        why = f"the run has no input {judged!r}" + (
            f" (its inputs: {', '.join(inputs)})" if inputs else " (it kept no inputs)"
        )
    return f"length bias: not measured, {why}; name the judged input with --judged or judged:"


def judge_card(
    run_dir: Path | str,
    *,
    labels: Path | str | None = None,
    field: str | None = None,
    jury: Sequence[str] | None = None,
    generator_field: str | None = None,
    judged: str | None = None,
    alpha: float = ALPHA,
    seed: int = 0,
    stability: Retest | None = None,
    cluster: str | None = None,
) -> JudgeCard:
    """The judge card of a finished run folder (see docs/judge-card.md for each part).

    `labels`/`field` compare the run with people as `meta-eval` does; `jury` names the LLM
    nodes that form a jury (default: the graph's `jury:` key); `generator_field` is the row
    field naming the model that wrote the judged text (default `generator`); `judged`
    overrides the graph's `judged:` key (the input whose length is measured); `stability`
    is a retest of the run (`orc.retest`), tested with the rest (α below RELIABLE_ALPHA).
    `cluster` names the row field examples are nested in (e.g. a user id): the bootstraps
    and sign-flip tests then resample and flip whole clusters, and the agreement with
    people is meta-eval's cluster bootstrap.
    """
    folder = Path(run_dir)
    reader = RunReader(folder)
    if not reader.has_trace:
        raise RunFolderError(f"{folder}: no trace (traces.sqlite) to read the judges from")
    if field is not None and labels is None:
        raise ConfigurationError(f"field {field!r} is compared with labels, and none were given")
    graph = _graph(reader)
    rows = {line.id: line.data or {} for line in reader.inputs()}
    known = _inputs(graph, rows)
    if judged is not None and known and judged not in known:
        raise ConfigurationError(
            f"judged {judged!r}: not an input of the run (its inputs: {', '.join(known)})"
        )
    judged_input = judged or str(graph.get("judged") or DEFAULT_JUDGED)
    card = JudgeCard(run_dir=str(folder), graph=graph.get("name"), judged=judged_input, alpha=alpha)
    runs = _latest(reader.node_runs())
    card.reliability = reliability(runs)
    columns = _columns(runs)
    generator = generator_field or DEFAULT_GENERATOR
    clusters = None
    if cluster is not None:
        results = reader.latest_results()
        clusters = cluster_keys(results, cluster, rows)
        card.cluster, card.clusters = cluster, len(set(clusters.values()))
        alone = sum(line.id not in clusters for line in results)
        if alone:
            card.notes.append(
                f"{alone} example(s) have no value of {cluster!r}: each is a cluster of its own"
            )
    _pointwise_part(card, graph, columns, rows, generator, seed, clusters)
    if generator_field is not None and not card.self_preference:
        card.notes.append(f"self-preference: no row's {generator} names a judge model")
    lengths = _lengths(runs)
    for (name, judge), votes in sorted(_votes(reader).items()):
        card.position_bias.append(position_bias(name, judge, votes, seed, clusters))
        if lengths:
            card.prefer_longer.append(prefer_longer(name, judge, votes, lengths, seed, clusters))
    if labels is not None:
        card.agreement = agreement(folder, Path(labels), field, seed=seed, cluster=cluster)
    jurors = list(jury) if jury is not None else [str(j) for j in graph.get("jury") or []]
    if len(jurors) == 1:
        raise ConfigurationError(f"a jury needs two jurors or more, got {jurors[0]}")
    if jurors:
        _jury_part(card, jurors, columns)
    card.stability = stability
    card.stress = kept_stress(folder)
    card.findings, card.flags = correct(_tests(card), alpha)
    log.debug(
        "judge card of %s: %d findings, %d flags", folder, len(card.findings), len(card.flags)
    )
    return card
