"""Read a run folder into what the report shows: run facts, an examples table, and one
compact trace per example.

Per-example data is kept small on purpose, because a 10,000-example run is embedded in one
HTML file: the part of a prompt every example shares (instructions come first, row text
last) is stored once, the rest is abridged unless full prompts are asked for, and a raw
reply is dropped when it only repeats the parsed value.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..session import numeric_leaves
from ..store import (
    WHOLE,
    Manifest,
    ManifestGraph,
    NodeRun,
    NodeServer,
    ResultLine,
    RunReader,
    Summary,
    TraceReader,
    TraceRun,
)
from .payload import EARLIER_RUN, PROMPT_LIMIT, RUN, DetailOptions, compact_record
from .sources import GraphInfo, NodeInfo, load_graph, load_inputs
from .values import abridge, finite
from .views import example_views

__all__ = ["PROMPT_LIMIT", "DetailOptions", "RunData", "load_run"]

INPUT_LIMIT = 4000  # characters of each dataset field kept when abridging
TEXT_COLUMN_LIMIT = 240  # characters of a string output kept in the examples table
MIN_SHARED = 120  # a shared prompt head shorter than this is not worth storing apart
MIN_POINTED = 64  # shorter dataset fields are cheaper to repeat than to point at
MAX_NUMERIC_COLUMNS = 8
MAX_TEXT_COLUMNS = 4


class PromptHeads:
    """The longest head (whole lines) every prompt of one node and role shares."""

    def __init__(self) -> None:
        self.heads: dict[tuple[str, str], str] = {}
        self.counts: dict[tuple[str, str], int] = defaultdict(int)

    def observe(self, node: str, messages: list[dict[str, Any]] | None) -> None:
        for message in messages or []:
            key = (node, str(message.get("role")))
            text = str(message.get("content") or "")
            self.counts[key] += 1
            head = self.heads.get(key)
            if head is None:
                self.heads[key] = text
            elif not text.startswith(head):
                size = 0
                for a, b in zip(head, text, strict=False):
                    if a != b:
                        break
                    size += 1
                self.heads[key] = head[:size]

    def table(self) -> tuple[list[str], dict[tuple[str, str], int]]:
        """Shared heads worth storing apart, cut back to a line end, and their indices."""
        texts: list[str] = []
        index: dict[tuple[str, str], int] = {}
        for key, head in self.heads.items():
            if self.counts[key] < 2:
                continue
            cut = head.rfind("\n") + 1
            if cut < MIN_SHARED:
                continue
            index[key] = len(texts)
            texts.append(head[:cut])
        return texts, index


def _node_status(whole: NodeRun | None, items: list[NodeRun]) -> str:
    if whole is not None:
        return whole.status
    if not items:
        return "not run"
    statuses = {i.status for i in items}
    if "failed" in statuses:
        return "failed"
    if "abstained" in statuses:
        return "abstained"  # an item too unsure (`abstain:`) ended the example there
    return "partial"  # items ran but the node's own record was never written


def node_path(
    records: list[NodeRun], nodes: list[NodeInfo], opts: DetailOptions
) -> list[dict[str, Any]]:
    """Every node of the graph for one example, in graph order, with its latest execution.

    Earlier executions of the same node and item (a failed try before a resume) are kept
    as `earlier` so a reader sees why the example was run again.
    """
    latest: dict[tuple[str, int], NodeRun] = {}
    earlier: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:  # oldest first
        key = (rec.node, rec.item)
        if key in latest:
            old = latest[key]
            earlier[rec.node].append(
                {
                    RUN["item"]: old.item,
                    RUN["status"]: old.status,
                    RUN["error"]: old.error,
                    EARLIER_RUN: old.run_id,
                }
            )
        latest[key] = rec
    known = [n.name for n in nodes]
    extra = [name for name in dict.fromkeys(r.node for r in records) if name not in known]
    path = []
    for name in known + extra:
        whole = latest.get((name, WHOLE))
        items = sorted(
            (r for (n, i), r in latest.items() if n == name and i != WHOLE),
            key=lambda r: r.item,
        )
        entry: dict[str, Any] = {"node": name, "status": _node_status(whole, items)}
        if whole is not None:
            entry["rec"] = compact_record(whole, opts)
        if items:
            entry["items"] = [compact_record(r, opts) for r in items]
        if earlier.get(name):
            entry["earlier"] = earlier[name]
        path.append(entry)
    return path


# -- the run as a whole -------------------------------------------------------------------


@dataclass
class RunData:
    """Everything the page is built from, with per-example traces built lazily."""

    reader: RunReader
    manifest: Manifest
    summary: Summary
    results: list[ResultLine]
    graph: GraphInfo
    inputs: dict[str, dict[str, str]]
    row_numbers: dict[str, int]
    notes: list[str]
    runs: list[TraceRun]
    numeric_columns: list[str]
    text_columns: list[str]
    score_column: str | None
    served: list[NodeServer] = field(default_factory=list)  # each LLM node's model, server

    @property
    def run_dir(self) -> Path:
        return self.reader.path

    @property
    def title(self) -> str:
        return str(self.manifest.graph.name or self.summary.graph or self.run_dir.name)


def _columns(results: list[ResultLine]) -> tuple[list[str], list[str], str | None]:
    """Numeric and text columns of the examples table, and the one called the score."""
    numeric: dict[str, None] = {}
    nested: dict[str, None] = {}
    text: dict[str, None] = {}
    for row in results:
        outputs = row.outputs
        for key, value in outputs.items():
            if finite(value):
                numeric[key] = None
            elif isinstance(value, str):
                text[key] = None
        if not numeric:
            for key in numeric_leaves(outputs):
                nested[key] = None
    columns = list(numeric) or list(nested)
    score = "score" if "score" in columns else (columns[0] if columns else None)
    if score is not None:
        columns.remove(score)
        columns.insert(0, score)
    return columns[:MAX_NUMERIC_COLUMNS], list(text)[:MAX_TEXT_COLUMNS], score


def load_run(run_dir: Path, full_prompts: bool = False) -> RunData:
    """Read manifest, summary, results, graph and dataset of a run folder."""
    reader = RunReader(run_dir)
    if not reader.has_trace and not reader.has_results:
        raise FileNotFoundError(
            f"{reader.path} is not a run folder (no results.jsonl, no {reader.traces_path.name})"
        )
    manifest = reader.manifest
    summary = reader.summary or Summary()
    results = reader.latest_results()
    runs: list[TraceRun] = []
    served: list[NodeServer] = []
    seen_nodes: list[str] = []
    if reader.has_trace:
        with reader.trace() as trace:
            runs = trace.runs()
            served = trace.node_servers()
            # Node names for a drawing without the graph file: those of a few examples.
            for row in results[:5]:
                seen_nodes += [r.node for r in trace.node_runs(row.id)]
    if not manifest.graph and runs:
        # An interrupted run may lack its manifest; the trace knows which graph it ran.
        manifest.graph = ManifestGraph(path=runs[-1].graph, hash=runs[-1].graph_hash)
    notes = reader.notes
    graph = load_graph(manifest, reader, seen_nodes)
    if graph.note:
        notes.append(graph.note)
    inputs, numbers, note = load_inputs(
        manifest, reader, graph.inputs, None if full_prompts else INPUT_LIMIT
    )
    if note:
        notes.append(note)
    numeric, text, score = _columns(results)
    return RunData(
        reader,
        manifest,
        summary,
        results,
        graph,
        inputs,
        numbers,
        notes,
        runs,
        numeric,
        text,
        score,
        served,
    )


def example_order(run: RunData) -> list[int]:
    """Failed examples first, then dataset order (results order when the dataset is gone)."""

    def key(index: int) -> tuple[int, int, int]:
        row = run.results[index]
        number = run.row_numbers.get(row.id, row.row or 0)
        return (0 if row.status != "ok" else 1, int(number or 0), index)

    return sorted(range(len(run.results)), key=key)


def table_rows(run: RunData, order: list[int]) -> dict[str, Any]:
    """The examples table, column by column (compact for 10,000 rows): one column per
    `ResultLine` field, then the chosen numeric (`num`) and text (`txt`) outputs."""
    rows = [run.results[i] for i in order]
    table: dict[str, Any] = {
        name: [getattr(r, name) for r in rows] for name in ResultLine.model_fields
    }
    # Where the dataset is known, its row number beats the one a failed line carries.
    table["row"] = [run.row_numbers.get(r.id, r.row) for r in rows]
    table["num"] = {
        col: [_column_value(r.outputs, col) for r in rows] for col in run.numeric_columns
    }
    table["txt"] = {
        col: [
            abridge(r.outputs[col], TEXT_COLUMN_LIMIT)
            if isinstance(r.outputs.get(col), str)
            else None
            for r in rows
        ]
        for col in run.text_columns
    }
    return table


def _column_value(outputs: dict[str, Any], column: str) -> float | None:
    value: Any = outputs.get(column)
    if value is None and "." in column:
        head, _, tail = column.partition(".")
        inner = outputs.get(head)
        value = inner.get(tail) if isinstance(inner, dict) else None
    return float(value) if finite(value) else None


def point_into_prompts(inputs: dict[str, str], path: list[dict[str, Any]]) -> dict[str, Any]:
    """Dataset fields, each one found verbatim in a prompt replaced by where it is there.

    The row text is usually the bulk of a prompt, so storing it twice would nearly double
    a large report; ["@", path index, message index, offset, length] points at it instead.
    """
    tails = [
        (p, m, message[2])
        for p, entry in enumerate(path)
        for m, message in enumerate(entry.get("rec", {}).get(RUN["messages"]) or [])
    ]
    out: dict[str, Any] = {}
    for name, text in inputs.items():
        out[name] = text
        if len(text) < MIN_POINTED:
            continue
        for p, m, tail in tails:
            offset = tail.find(text)
            if offset >= 0:
                # The page slices JavaScript strings, which count UTF-16 code units.
                start = len(tail[:offset].encode("utf-16-le")) // 2
                out[name] = ["@", p, m, start, len(text.encode("utf-16-le")) // 2]
                break
    return out


def example_detail(
    run: RunData, result: ResultLine, records: list[NodeRun], opts: DetailOptions
) -> dict[str, Any]:
    """One example's page data: outputs, inputs, node path, registered views."""
    outputs = result.outputs
    detail: dict[str, Any] = {
        "outputs": outputs,
        "path": node_path(records, run.graph.nodes, opts),
    }
    if result.id in run.inputs:
        detail["inputs"] = point_into_prompts(run.inputs[result.id], detail["path"])
    views = example_views(outputs)
    if views:
        detail["views"] = views
    return detail


def records_by_example(trace: TraceReader) -> dict[str, list[NodeRun]]:
    """All node executions grouped by example, oldest first."""
    grouped: dict[str, list[NodeRun]] = defaultdict(list)
    for rec in trace.node_runs():
        grouped[rec.example_id].append(rec)
    return grouped


def shared_heads(
    grouped: dict[str, list[NodeRun]],
) -> tuple[list[str], dict[tuple[str, str], int]]:
    """Prompt heads shared by every execution of a node, over the whole run."""
    heads = PromptHeads()
    for records in grouped.values():
        for rec in records:
            heads.observe(rec.node, rec.messages)
    return heads.table()
