"""`orc.align`: tune a judge to a few human labels and score it honestly on held-out ones.

    import orchestrator as orc
    found = orc.align("graphs/judge.yaml", "rows.jsonl", "labels.jsonl", node="judge",
                      field="score", out="aligned", base_url="http://gpu:8000/v1")
    print(found.verdict, found.aligned.test.value, found.graph)

The labelled examples are split once (seeded, stratified) into a search set and a test
set. The search runs every configuration (shot count × variant, × isotonic when asked) on
K folds of the search set, shots drawn from the other folds; the best configuration by
mean fold score is then run once on the test set, as is the graph as given, and the two
are compared with bootstrap intervals. Every run is an ordinary run into OUT/runs/: it
goes through the engine, the response cache and the limits, so a search resumes where it
stopped and a repeated one costs no request. See docs/align.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from jinja2 import TemplateError

from ..analysis import (
    ISOTONIC_FILE,
    METRICS,
    PAGE_FILE,
    Alignment,
    Bootstrap,
    Coder,
    Configuration,
    Metric,
    Shot,
    Side,
    Variant,
    check_counts,
    check_variant,
    choose,
    cluster_keys,
    compare_aligned,
    draw_shots,
    integer_range,
    node_answers,
    node_values,
    open_folder,
    parse_variant,
    read_truth,
    row_cluster_keys,
    run_inputs,
    shot_record,
    split,
    strata,
    trial,
    variant_spec,
    variant_texts,
    with_isotonic,
    write_graph,
    write_record,
)
from ..analysis import folds as deal_folds
from ..analysis import isotonic as iso
from ..data import as_source
from ..errors import ConfigurationError
from ..graph import CompiledGraph, FieldSpec, PromptLoader
from ..report import write_page
from ..store import RunReader
from .run import _blocking, arun, load_graph

__all__ = ["Alignment", "aalign", "align"]
log = logging.getLogger(__name__)

# What an alignment decides itself: where each run goes, its rows and params.
_FIXED = ("out", "params", "limit", "resample")
SUFFIX = "-aligned"
ISOTONIC_NOTE = (
    "the isotonic map is fitted and scored here, but the written graph does not apply it "
    "({field} is not an integer with min and max): map it through `isotonic` (knots x → y, "
    "linear between) yourself"
)
APPLIED_NOTE = (
    "the written graph applies the isotonic map: its output `{output}` is {node}.{field} "
    "looked up in prompts/isotonic.json; the other outputs are as in the graph as given"
)


async def aalign(
    graph: CompiledGraph | str | Path,
    data: Any,
    labels: str | Path,
    *,
    node: str,
    field: str | None = None,
    out: str | Path,
    shots: Sequence[int] = (0, 2, 4, 8),
    variants: Sequence[str | Variant] = (),
    metric: Metric = "alpha",
    folds: int = 5,
    test_share: float = 0.3,
    isotonic: bool = False,
    cluster: str | None = None,
    seed: int = 0,
    resamples: int = 2000,
    templates: Mapping[str, str] | None = None,
    overwrite: bool = False,
    **run_options: Any,
) -> Alignment:
    """Align `node` of `graph` to the human `labels` (a JSONL file as `meta-eval` reads
    it) on the rows of `data`, and write the aligned graph folder to `out`.

    `field` is the node's output field compared with the labels (needed when it has
    several); `shots` the few-shot counts tried; `variants` the changes tried besides the
    graph as given, after the graph's own `variants:` (`prompt=NAME`, `system=NAME`,
    `params.NAME=VALUE`; `templates` adds template texts a variant may name, for a graph
    built in Python); `metric` the
    agreement maximised (alpha, kappa, spearman or accuracy); `folds`, `test_share` and
    `seed` the split; `isotonic` also tries a monotone map of the judge's score onto the
    labels' scale; `cluster` a row field (e.g. a user id) whose clusters the test
    bootstrap (`resamples` draws) resamples. `out` must be missing, empty or a folder
    align wrote before (its runs resume), and never hold the graph or the labels;
    `overwrite` deletes what align wrote there first. `run_options` are `orc.run`'s (base_url,
    model, transport, cache, concurrency, trust, …); the response cache is on unless
    `cache=False`."""
    fixed = sorted(set(run_options) & set(_FIXED))
    if fixed:
        raise ConfigurationError(
            f"align sets {', '.join(fixed)} itself: leave it out (a param is a variant, "
            "params.NAME=VALUE)"
        )
    if metric not in METRICS:
        raise ConfigurationError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    counts = sorted({int(c) for c in shots})
    if not counts or counts[0] < 0:
        raise ConfigurationError(f"shots are counts of 0 or more, got {list(shots)!r}")
    run_options.setdefault("cache", True)
    trust = bool(run_options.get("trust"))
    compiled = graph if isinstance(graph, CompiledGraph) else load_graph(graph, trust=trust)
    spec = yaml.safe_load(compiled.source) or {}
    field = _node_field(compiled, spec, node, field)
    # The graph's own `variants:` first, then those given here; each tried once.
    variants = [*compiled.spec.variants, *variants]
    texts = _templates(compiled, variants, templates)
    params = [*compiled.spec.params, *compiled.spec.required_params]
    chosen_variants = [Variant()]
    for given in variants:
        parsed = _as_variant(given, texts, params)
        if parsed not in chosen_variants:
            chosen_variants.append(parsed)
    schema = _field_schema(compiled, node, field)
    kind, truth, label_of = read_truth(Path(labels), field, schema, f"{node}.{field}")
    if isotonic and kind != "scores":
        raise ConfigurationError("--isotonic maps scores: these labels are choices")
    rows = _rows(data)
    labelled = sorted(set(truth) & set(rows))
    if len(truth) > len(labelled):
        log.info("%d labelled examples are not in the data", len(truth) - len(labelled))
    groups = strata({k: truth[k] for k in labelled})
    # With --cluster the split keeps each user (cluster) on one side: split by example, every
    # test user also had rows in the search, and the held-out score was for users it had seen.
    clusters = None if cluster is None else row_cluster_keys(rows, labelled, cluster)
    search, test = split(labelled, groups, test_share, seed, clusters)
    fold_ids = deal_folds(search, groups, folds, seed)
    coder = Coder(kind, truth)
    folder = Path(out)
    job = _Job(compiled, spec, texts, node, field, rows, label_of, truth, folder, run_options)

    # Each fold's shots come from the other folds: the smallest of those pools bounds the
    # shot counts, checked before any request (and again once upstream values are known).
    others = [[x for j, f in enumerate(fold_ids) if j != k for x in f] for k in range(folds)]
    pooled = (
        f"a fold draws its shots from the other folds' examples ({len(search)} search "
        f"examples in {folds} folds)"
    )
    check_counts(counts, others, pooled)
    # Last of the checks, first of the writes: nothing is created for settings refused above.
    open_folder(folder, overwrite, _read_files(compiled, labels, data))

    # -- the search: every configuration on every fold, search-set examples only ---------
    if any(counts):
        await job.read_upstream(search)
        if job.upstream:
            showable = [job.showable(other) for other in others]
            upstream = ", ".join(job.upstream)
            check_counts(counts, showable, f"{pooled}, those whose {upstream} has a value")
    answers: dict[tuple[int, int], dict[str, Any]] = {}  # (count, variant) → id → answer
    for count in counts:
        for index, variant in enumerate(chosen_variants):
            found: dict[str, Any] = {}
            for k, fold in enumerate(fold_ids):
                pool = job.showable(others[k])
                picked = draw_shots(pool, groups, count, seed, draw=k)
                where = f"search/{_slug(count, variant)}/fold-{k + 1}"
                found.update((await job.answers(variant, picked, fold, where))[0])
            answers[(count, index)] = found
    levels = sorted({float(truth[k]) for k in search}) if kind == "scores" else []
    snap = levels if metric in ("kappa", "accuracy") else []
    trace = [
        trial(Configuration(shots=count, variant=chosen_variants[index], isotonic=mapped),
               found, fold_ids, coder, metric, kind, snap)
        for (count, index), found in answers.items()
        for mapped in ((False, True) if isotonic else (False,))
    ]  # fmt: skip
    chosen = choose(trace, chosen_variants)

    # -- the test phase: the graph as given and the chosen one, once each ----------------
    baseline = Configuration()
    final = draw_shots(job.showable(search), groups, chosen.shots, seed, draw=folds)
    base_answers, base_run = await job.answers(Variant(), [], test, "test/baseline")
    mine_answers, _ = await job.answers(chosen.variant, final, test, "test/aligned")
    base_judged = coder.answers(base_answers, test)
    mine_judged = coder.answers(mine_answers, test)
    fitted_map = None
    if chosen.isotonic:
        own = answers[(chosen.shots, chosen_variants.index(chosen.variant))]
        fitted_map = iso.fit(coder.answers(own, search), coder.labels(search))
        mine_judged = iso.apply(fitted_map, mine_judged, snap)
    boot = _bootstrap(base_run, cluster, resamples, seed)
    base_estimate, mine_estimate, difference = compare_aligned(
        test, base_judged, mine_judged, coder.labels(test), metric, kind, boot
    )

    # -- the aligned folder ---------------------------------------------------------------
    name = f"{compiled.name}{SUFFIX}"
    shot_records = job.shots(final)
    aligned_spec = variant_spec(spec, node, chosen.variant, shots=True, name=name)
    # Where it came from, in the file itself: a reader of the graph alone can trace it back.
    aligned_spec["description"] = (
        f"{compiled.name} (graph hash {compiled.content_hash}) aligned by `orchestrator align` "
        f"on node {node}.{field}: {chosen.label}, {metric} on {len(test)} held-out examples "
        f"{_said(mine_estimate.value)} against {_said(base_estimate.value)} as given "
        f"({difference.verdict}); the record is alignment.json beside this file."
    )
    aligned_texts = variant_texts(job.texts_for(chosen.variant), shot_records)
    notes: list[str] = []
    bounds = integer_range(spec, node, field)
    if fitted_map is not None and bounds is not None:
        aligned_spec, output = with_isotonic(aligned_spec, node, field)
        lookup = iso.table(fitted_map, *bounds, snap)
        aligned_texts[ISOTONIC_FILE] = json.dumps(lookup, indent=2) + "\n"
        notes.append(APPLIED_NOTE.format(output=output, node=node, field=field))
    elif fitted_map is not None:
        notes.append(ISOTONIC_NOTE.format(field=field))
    CompiledGraph.from_dict(aligned_spec, aligned_texts, name=name, trust=trust)  # it runs
    path = write_graph(folder, aligned_spec, aligned_texts)
    record = Alignment(
        graph=str(path),
        folder=str(folder),
        name=name,
        source_graph=compiled.name,
        node=node,
        field=field,
        metric=metric,
        kind=kind,
        seed=seed,
        folds=folds,
        test_share=test_share,
        cluster=cluster,
        search_ids=search,
        test_ids=test,
        trace=trace,
        chosen=chosen,
        baseline=Side(configuration=baseline, test=base_estimate),
        aligned=Side(configuration=chosen, test=mine_estimate),
        difference=difference,
        verdict=difference.verdict,
        shots=final,
        isotonic=fitted_map,
        isotonic_applied=fitted_map is not None and bounds is not None,
        bootstrap=boot.describe(),
        notes=notes,
    )
    write_record(folder, record)
    write_page(folder / PAGE_FILE, record)
    return record


align = _blocking(aalign)
align.__doc__ = "`aalign` for code that is not async. " + (aalign.__doc__ or "")


class _Job:
    """What every run of one alignment shares: the graph, its rows and labels, the
    folder and run options; it builds each configuration's graph and reads its answers."""

    def __init__(
        self,
        compiled: CompiledGraph,
        spec: dict[str, Any],
        texts: dict[str, str],
        node: str,
        field: str,
        rows: dict[str, dict[str, Any]],
        label_of: dict[str, dict[str, Any]],
        truth: dict[str, Any],
        folder: Path,
        options: dict[str, Any],
    ) -> None:
        self.compiled, self.spec, self.texts = compiled, spec, texts
        self.node, self.field = node, field
        self.rows, self.label_of, self.truth = rows, label_of, truth
        self.folder, self.options = folder, options
        self.inputs = [*compiled.spec.inputs, *compiled.spec.optional_inputs]
        # The nodes the judging node reads: a shot shows their values for its example (taken
        # from a run of the graph as given over the search set), so an example turn renders
        # as the real one does.
        self.upstream = sorted(compiled.nodes[node].deps)
        self.upstream_values: dict[str, dict[str, Any]] = {}

    def showable(self, ids: Sequence[str]) -> list[str]:
        """The ids a shot may be drawn from: all, or those whose upstream values the
        graph as given produced (an example whose upstream node failed cannot be shown)."""
        if not self.upstream:
            return list(ids)
        values = self.upstream_values
        return [k for k in ids if k in values and None not in values[k].values()]

    def shots(self, ids: Sequence[str]) -> list[Shot]:
        """The shot records of labelled examples, with the values of the nodes the judging
        node reads (`read_upstream` must have run over them)."""
        found = []
        for k in ids:
            shot = shot_record(
                k, self.rows[k], self.inputs, self.field, self.label_of[k], self.truth[k]
            )
            if self.upstream:
                shot.inputs.update(self.upstream_values.get(k) or dict.fromkeys(self.upstream))
            found.append(shot)
        return found

    async def read_upstream(self, ids: Sequence[str]) -> None:
        """Run the graph as given over `ids` (search-set examples only) and keep the values
        of the nodes the judging node reads. Its requests are those the search's baseline
        runs send, which then find them in the cache."""
        if not self.upstream:
            return
        _, folder = await self.answers(Variant(), [], ids, "search/upstream")
        self.upstream_values = node_values(folder, self.upstream)

    def texts_for(self, variant: Variant) -> dict[str, str]:
        """The graph's own templates plus the one a template variant names."""
        own = dict(self.compiled.templates)
        if variant.key in ("prompt", "system"):
            own[str(variant.value)] = self.texts[str(variant.value)]
        return own

    def graph(self, variant: Variant, shots: Sequence[str]) -> CompiledGraph:
        """The graph as given for the baseline without shots; else its variant graph."""
        if variant == Variant() and not shots:
            return self.compiled
        spec = variant_spec(self.spec, self.node, variant, shots=bool(shots))
        texts = variant_texts(self.texts_for(variant), self.shots(shots) if shots else None)
        trust = bool(self.options.get("trust"))
        return CompiledGraph.from_dict(spec, texts, name=self.compiled.label, trust=trust)

    async def answers(
        self, variant: Variant, shots: Sequence[str], ids: Sequence[str], where: str
    ) -> tuple[dict[str, Any], Path]:
        """Run the configuration on the examples `ids` into OUT/runs/WHERE-HASH, HASH of
        the graph and the examples, so another split or graph never meets this run's
        folder (a repeat resumes it); the node's `field` for each example that finished,
        and the run folder."""
        graph = self.graph(variant, shots)
        rows = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:6]
        target = self.folder / "runs" / f"{where}-{graph.content_hash[:8]}-{rows}"
        await arun(graph, [self.rows[k] for k in ids], out=target, **self.options)
        return node_answers(target, self.node, self.field), target


def _said(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def _slug(count: int, variant: Variant) -> str:
    """A folder name for a configuration: `shots-2-baseline`, `shots-0-prompt-b.jinja`."""
    text = f"shots-{count}-{variant.label}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def _node_field(
    compiled: CompiledGraph, spec: Mapping[str, Any], node: str, field: str | None
) -> str:
    """The node's output field compared with the labels: `field`, or its only one."""
    llm = [name for name, n in compiled.nodes.items() if n.is_llm]
    if node not in compiled.nodes or node not in llm:
        raise ConfigurationError(
            f"{node!r} is not an LLM node of graph {compiled.name!r} (its LLM nodes: "
            f"{', '.join(llm) or 'none'})"
        )
    output = (spec.get("nodes") or {}).get(node, {}).get("output")
    fields = list(output) if isinstance(output, dict) else []
    if field is None:
        if len(fields) != 1:
            raise ConfigurationError(
                f"node {node!r} writes {len(fields)} output fields ({', '.join(fields) or 'none'})"
                ": say which one the labels are compared with (--field)"
            )
        return fields[0]
    if field.split(".")[0] not in fields:
        raise ConfigurationError(
            f"node {node!r} has no output field {field!r} (it has: {', '.join(fields) or 'none'})"
        )
    return field


def _templates(
    compiled: CompiledGraph, variants: Sequence[str | Variant], extra: Mapping[str, str] | None
) -> dict[str, str]:
    """The graph's templates, `extra`, and, for a graph file, each template a variant
    names that its prompts folder holds, read by the loader templates are read with (the
    folder's boundary, the size limit, UTF-8); one it cannot read is left for
    `check_variant` to name."""
    texts = {**compiled.templates, **dict(extra or {})}
    folder = compiled.prompts_dir
    if folder is None or not compiled.path.is_file():
        return texts
    loader = PromptLoader(str(folder))
    for given in variants:
        variant = given if isinstance(given, Variant) else parse_variant(given)
        name = str(variant.value)
        if variant.key not in ("prompt", "system") or name in texts:
            continue
        try:
            texts[name] = loader.get_source(None, name)[0]
        except TemplateError:
            continue
    return texts


def _as_variant(given: str | Variant, texts: Mapping[str, str], params: Sequence[str]) -> Variant:
    variant = given if isinstance(given, Variant) else parse_variant(given)
    check_variant(variant, texts, params)
    return variant


def _field_schema(compiled: CompiledGraph, node: str, field: str) -> FieldSpec | None:
    """The output schema of `node`'s `field` (dots reach into `fields`); None when the
    node's output does not declare it."""
    fields: dict[str, FieldSpec] | None = getattr(compiled.spec.nodes[node], "output", None)
    schema = None
    for part in field.split("."):
        if not isinstance(fields, dict) or part not in fields:
            return None
        schema = fields[part]
        fields = schema.fields
    return schema


def _read_files(compiled: CompiledGraph, labels: str | Path, data: Any) -> list[Path]:
    """The files an alignment reads, which its folder must not hold: the graph file and
    its prompts folder (none for a graph built in Python), the labels, a data file."""
    found = [Path(labels)]
    if compiled.path.is_file():
        found.append(compiled.path)
        if compiled.prompts_dir is not None:
            found.append(compiled.prompts_dir)
    if isinstance(data, str | Path):
        found.append(Path(data))
    return found


def _rows(data: Any) -> dict[str, dict[str, Any]]:
    """The readable rows of `data` by id, each with its id."""
    found = {}
    for row in as_source(data).rows():
        if row.error is None and row.data is not None:
            found[row.id] = {**row.data, "id": row.id}
    return found


def _bootstrap(run: Path, cluster: str | None, resamples: int, seed: int) -> Bootstrap:
    """The test bootstrap: over examples, or over the clusters of `cluster` (a row field
    of the test run, an output or an input, as `--cluster` finds it elsewhere)."""
    if cluster is None:
        return Bootstrap(resamples=resamples, seed=seed)
    lines = [line for line in RunReader(run).latest_results() if line.status == "ok"]
    keys = cluster_keys(lines, cluster, run_inputs(run))
    return Bootstrap(resamples=resamples, seed=seed, cluster=cluster, clusters=keys)
