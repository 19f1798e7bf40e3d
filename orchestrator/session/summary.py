"""Dataset-level results: means of numeric outputs and the graph's aggregate nodes."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NodeError
from ..graph import CompiledAggregate, CompiledGraph, Expression
from ..store import ABSTAIN_NOTE, unstorable

if TYPE_CHECKING:
    from ..store import RunReader

logger = logging.getLogger(__name__)


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
    """How many result lines there are, and how many ok, failed and abstained."""
    counts = {"examples": 0, "examples_ok": 0, "examples_failed": 0, "examples_abstained": 0}
    for row in results:
        counts["examples"] += 1
        status = row.get("status")
        if status in ("ok", "failed", "abstained"):
            counts[f"examples_{status}"] += 1
    return counts


def _aggregate(name: str, agg: CompiledAggregate, context: dict[str, Any]) -> Any:
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
        value = agg.function.fn(**kwargs)
    except Exception as exc:
        kind = type(exc).__name__
        raise NodeError(
            f"aggregates.{name}", f"function '{agg.spec.function}' raised {kind}: {exc}"
        ) from exc
    problem = unstorable(value)
    if problem is not None:
        # Kept, it would stop summary.json from being written at all.
        raise NodeError(
            f"aggregates.{name}",
            f"function '{agg.spec.function}' gave what summary.json cannot hold: {problem}",
        )
    return value


def run_aggregates(
    graph: CompiledGraph, results: list[dict[str, Any]], params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Evaluate the graph's `aggregates` over the ok result lines, with the run's params.

    Each runs on its own: one that fails is recorded as `{"failed": true, "error": ...}`
    under its name and the others still run, so a mistake in one costs no LLM call again
    (fix the graph, then `orchestrator summarize RUN_DIR`)."""
    # Examples finish in any order; sorting makes order-sensitive aggregates (Elo, seeded
    # bootstraps) give the same answer for the same results.
    ok = sorted((r for r in results if r.get("status") == "ok"), key=lambda r: str(r["id"]))
    context = {"results": ok, "params": {**graph.spec.params, **(params or {})}}
    out: dict[str, Any] = {}
    for name, agg in graph.aggregates.items():
        try:
            out[name] = _aggregate(name, agg, context)
        except NodeError as exc:
            logger.warning("%s", exc)
            out[name] = {"failed": True, "error": str(exc)}
    return out


SUMMARY_FIELDS = ("graph", "counts", "means", "aggregates_from", ABSTAIN_NOTE)


def abstain_note(graph: CompiledGraph) -> dict[str, bool]:
    """`{"aggregates_include_abstained": false}` when a node of the graph has `abstain:`,
    else nothing: a summary says what its numbers leave out only when something can be."""
    can = any(getattr(cn.spec, "abstain", None) is not None for cn in graph.nodes.values())
    return {ABSTAIN_NOTE: False} if can else {}


def aggregate_errors(summary: dict[str, Any]) -> dict[str, str]:
    """The aggregates that failed in a summary, with their messages."""
    errors = {}
    for name, value in summary.items():
        if name in SUMMARY_FIELDS:
            continue
        if isinstance(value, dict) and value.get("failed") is True and "error" in value:
            errors[name] = str(value["error"])
    return errors


def _same_examples(run_graph: CompiledGraph, new_graph: CompiledGraph) -> list[str]:
    """What differs between two graphs beyond their aggregates (which make no request)."""
    changed = []
    for part in ("inputs", "optional_inputs", "nodes", "outputs", "defaults"):
        if getattr(run_graph.spec, part) != getattr(new_graph.spec, part):
            changed.append(part)
    if run_graph.templates != new_graph.templates:
        changed.append("templates")
    return changed


def _snapshot_functions(reader: RunReader, snapshot: Path, trust: bool) -> CompiledGraph:
    """The snapshot compiled with its functions, to recompute its aggregates. A trusted
    graph's own module is not in the snapshot (the folder keeps the graph and its templates,
    not the code beside them): that is refused naming the graph to give instead."""
    from ..errors import GraphError, RunFolderError, visible
    from ..kinds import compile_graph

    try:
        return compile_graph(snapshot, prompts_dir=reader.snapshot_prompts, trust=trust)
    except GraphError as exc:
        if not trust:
            raise  # its message says to trust the graph first
        used = reader.manifest.graph.path if reader.has_manifest else None
        hint = f"--graph {visible(str(used))}" if used else "--graph GRAPH"
        raise RunFolderError(
            f"{exc.problems[0]}; a run folder keeps its graph and templates, not the Python "
            f"modules beside the graph: summarize with {hint} --trust, the graph beside its "
            "module"
        ) from None


def summarize(
    folder: Path | str,
    graph: Path | str | None = None,
    out: Path | str | None = None,
    *,
    trust: bool = False,
) -> dict[str, Any]:
    """Recompute a finished run's aggregates from its result lines, with no request.

    `graph` is the run's graph with its aggregates fixed (default: the snapshot the run
    kept); anything else in it must be as the run had it, or the results would not be its.
    The summary replaces the folder's summary.json, or is written to `out` (then nothing
    in the folder is written, so a read-only folder can be summarized).
    `trust=True` lets either import its own modules (see `load_graph`).
    """
    from ..errors import DamagedRunFile, RunFolderError
    from ..kinds import compile_graph
    from ..store import (
        MANIFEST,
        RunFolder,
        RunLock,
        RunReader,
        Summary,
        not_a_run_folder,
        read_only,
        write_json,
    )

    reader = RunReader(folder)
    snapshot = reader.snapshot_graph
    if snapshot is None:
        raise RunFolderError(f"{reader.path} has no graph snapshot (made before layout 2)")
    # What the run had is compared, never called: compiled for reading, nothing imported.
    ran = compile_graph(snapshot, prompts_dir=reader.snapshot_prompts, functions=False)
    if graph is None:
        new = _snapshot_functions(reader, snapshot, trust)
    else:
        new = compile_graph(graph, trust=trust)
    changed = _same_examples(ran, new)
    if changed:
        raise RunFolderError(
            f"{graph} is not the graph of the run in {reader.path}: its {', '.join(changed)} "
            "changed, so the run's results are not its results; run it into a new --out."
        )
    problem = not_a_run_folder(reader.path) if reader.has_manifest else None
    if problem is not None:
        # The summary's counts come from the manifest: a manifest that is not a run's would
        # make them zeros that look measured.
        raise DamagedRunFile(
            f"{problem}: summarize takes the run's counts from it; restore it from a backup, "
            "or run the graph into a new --out.",
            str(reader.path / MANIFEST),
        )
    manifest = reader.manifest
    lock = RunLock(reader.path)
    if out is None:
        try:
            lock.acquire()  # a run still writing the folder must not race this summary
        except OSError as exc:
            refused = read_only(reader.path, exc, "write the summary elsewhere with --out FILE")
            if refused is None:
                raise
            raise refused from None
    try:
        results = [line.model_dump(exclude_unset=True) for line in reader.results()]
        summary = (reader.summary.model_dump() if reader.summary else {}) | {
            "graph": new.name,
            "counts": manifest.counts.as_dict(),
            "means": output_means(results),
        }
        for name in ran.aggregates:
            summary.pop(name, None)  # an aggregate removed from the graph goes too
        params = dict(manifest.parameters.params)
        summary.update(run_aggregates(new, results, params))
        summary.pop(ABSTAIN_NOTE, None)
        summary.update(abstain_note(new))
        summary["aggregates_from"] = {
            "graph": str(graph or snapshot),
            "hash": new.content_hash,
            "computed": time.time(),
        }
        if out is None:
            RunFolder(reader.path).write_summary(Summary.model_validate(summary))
        else:
            write_json(Path(out), summary)
    finally:
        lock.release()
    return summary
