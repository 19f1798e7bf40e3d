"""Read a run folder into what the report shows: run facts, an examples table, and one
compact trace per example.

Per-example data is kept small on purpose, because a 10,000-example run is embedded in one
HTML file: the part of a prompt every example shares (instructions come first, row text
last) is stored once, the rest is abridged unless full prompts are asked for, and a raw
reply is dropped when it only repeats the parsed value.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..compute.expert import AGGREGATIONS as EXPERT_AGGREGATIONS
from ..compute.expert import aspect_credit, f1, mean_credit
from ..runfolder import (
    INPUTS,
    MANIFEST,
    SUMMARY,
    TRACES,
    iter_inputs,
    read_json,
    read_results,
    snapshot_graph,
    snapshot_prompts,
)
from ..summary import numeric_leaves
from ..trace import WHOLE, TraceStore

PROMPT_LIMIT = 3000  # characters of per-example prompt text kept when abridging
ITEM_PROMPT_LIMIT = 1200  # tighter for foreach items: a node may run dozens of them
RAW_LIMIT = 1500  # characters of a rejected reply kept when abridging
INPUT_LIMIT = 4000  # characters of each dataset field kept when abridging
TEXT_COLUMN_LIMIT = 240  # characters of a string output kept in the examples table
MIN_SHARED = 120  # a shared prompt head shorter than this is not worth storing apart
MIN_POINTED = 64  # shorter dataset fields are cheaper to repeat than to point at
MAX_NUMERIC_COLUMNS = 8
MAX_TEXT_COLUMNS = 4
RESULT_META = ("id", "status", "error", "row")
_SCORE_SUFFIXES = {
    "precision": ("precision", "p"),
    "recall": ("recall", "r"),
    "f1": ("f1", "f", "f_1", "fscore", "f_score"),
}


def abridge(text: str, limit: int | None) -> str:
    """Keep the head and the tail of a long text and say how much was left out."""
    if limit is None or len(text) <= limit:
        return text
    head = (limit * 2) // 3
    tail = limit - head
    omitted = len(text) - limit
    return (
        f"{text[:head]}\n… [{omitted} characters omitted; `report --full-prompts` keeps them] …\n"
        f"{text[-tail:]}"
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class NodeInfo:
    """What the report needs of one graph node (from the compiled graph when available)."""

    name: str
    kind: str  # "llm" | "compute" | "?" (not in the graph file)
    deps: list[str] = field(default_factory=list)
    foreach: str | None = None
    when: str | None = None
    function: str | None = None
    description: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "deps": self.deps,
            "foreach": self.foreach,
            "when": self.when,
            "function": self.function,
            "description": self.description,
        }


@dataclass
class GraphInfo:
    """Nodes in display order and the note on where they came from."""

    nodes: list[NodeInfo]
    inputs: list[str]
    description: str | None = None
    path: Path | None = None
    note: str | None = None  # why the drawing may be incomplete or out of date


def _candidates(raw: str, run_dir: Path) -> list[Path]:
    """Places a path written at run time may be now: as written, or beside the run folder."""
    path = Path(raw)
    if path.is_absolute():
        return [path]
    found = [Path.cwd() / path]
    base = run_dir.resolve()
    for parent in [base, *base.parents][:5]:
        found.append(parent / path)
    return found


def find_file(raw: str | None, run_dir: Path) -> Path | None:
    if not raw:
        return None
    return next((p for p in _candidates(raw, run_dir) if p.is_file()), None)


def load_graph(manifest: dict[str, Any], run_dir: Path, seen_nodes: Iterable[str]) -> GraphInfo:
    """Nodes and edges from the run's graph file; the trace's node names when it is gone."""
    from ..compile import compile_graph
    from ..errors import GraphError

    info = manifest.get("graph") or {}
    fallback = [NodeInfo(name, "?") for name in dict.fromkeys(seen_nodes)]
    snapshot = snapshot_graph(run_dir)
    path = snapshot or find_file(info.get("path"), run_dir)
    if path is None:
        note = f"graph file {info.get('path')!r} not found: nodes come from the trace, no edges"
        return GraphInfo(fallback, [], note=note)
    try:
        # The snapshot is the graph as the run used it: drawn without the user's functions,
        # which need not be installed where the folder is read.
        graph = (
            compile_graph(path, prompts_dir=snapshot_prompts(run_dir), functions=False)
            if snapshot
            else compile_graph(path)
        )
    except (GraphError, OSError, ValueError) as exc:
        note = f"graph file {path} no longer compiles ({str(exc).splitlines()[0]}): no edges"
        return GraphInfo(fallback, [], path=path, note=note)
    import networkx as nx

    position = {name: i for i, name in enumerate(graph.spec.nodes)}
    dag = nx.DiGraph()
    dag.add_nodes_from(graph.nodes)
    for name, node in graph.nodes.items():
        dag.add_edges_from((dep, name) for dep in node.deps)
    # File order among nodes that could run in either order, so the page reads like the file.
    order = list(nx.lexicographical_topological_sort(dag, key=lambda n: position.get(n, 0)))
    nodes = []
    for name in order:
        spec = graph.nodes[name].spec
        nodes.append(
            NodeInfo(
                name=name,
                kind="llm" if graph.nodes[name].is_llm else "compute",
                deps=sorted(graph.nodes[name].deps, key=lambda n: position.get(n, 0)),
                foreach=spec.foreach,
                when=spec.when,
                function=getattr(spec, "function", None),
                description=spec.description,
            )
        )
    note = None
    if info.get("hash") and graph.content_hash != info.get("hash"):
        note = (
            f"graph file {path} changed since this run (hash {graph.content_hash}, run used "
            f"{info.get('hash')}): the drawing shows the file as it is now"
        )
    inputs = list(graph.spec.inputs) + list(graph.spec.optional_inputs)
    return GraphInfo(nodes, inputs, graph.spec.description, path, note)


def load_inputs(
    manifest: dict[str, Any], run_dir: Path, fields: list[str], limit: int | None
) -> tuple[dict[str, dict[str, str]], dict[str, int], str | None]:
    """Dataset fields of every row by id (abridged), row numbers, and a note when unusable."""
    from ..dataset import file_hash, read_rows

    if (run_dir / INPUTS).is_file():
        return _snapshot_inputs(run_dir, fields, limit)
    info = manifest.get("dataset") or {}
    path = find_file(info.get("path"), run_dir)
    if path is None:
        return {}, {}, f"dataset {info.get('path')!r} not found: inputs are not shown"
    if info.get("hash") and file_hash(path) != info.get("hash"):
        return {}, {}, f"dataset {path} changed since this run: inputs are not shown"
    inputs: dict[str, dict[str, str]] = {}
    numbers: dict[str, int] = {}
    try:
        for row in read_rows(path):
            numbers[row.id] = row.number
            if row.error is None:
                wanted = fields or [k for k in row.data if k != "id"]
                inputs[row.id] = {
                    name: abridge(
                        row.data[name]
                        if isinstance(row.data[name], str)
                        else orjson.dumps(row.data[name], default=str).decode(),
                        limit,
                    )
                    for name in wanted
                    if name in row.data
                }
    except Exception as exc:  # a dataset the run could read but we cannot is only a note
        return {}, {}, f"dataset {path} could not be read: {exc}"
    return inputs, numbers, None


def _snapshot_inputs(
    run_dir: Path, fields: list[str], limit: int | None
) -> tuple[dict[str, dict[str, str]], dict[str, int], str | None]:
    """Inputs as the run read them (inputs.jsonl), so the dataset file is not needed."""
    inputs: dict[str, dict[str, str]] = {}
    numbers: dict[str, int] = {}
    for line in iter_inputs(run_dir):
        example, data = str(line.get("id")), line.get("data") or {}
        numbers[example] = int(line.get("number") or 0)
        wanted = fields or [k for k in data if k != "id"]
        inputs[example] = {
            name: abridge(
                data[name]
                if isinstance(data[name], str)
                else orjson.dumps(data[name], default=str).decode(),
                limit,
            )
            for name in wanted
            if name in data
        }
    return inputs, numbers, None


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


@dataclass
class DetailOptions:
    """How much of each example's trace to keep."""

    full: bool = False
    shared: list[str] = field(default_factory=list)
    shared_index: dict[tuple[str, str], int] = field(default_factory=dict)

    def limit(self, base: int) -> int | None:
        return None if self.full else base


def _messages(node: str, item: int, messages: Any, opts: DetailOptions) -> list[list[Any]]:
    """[role, shared head index or -1, the rest of the text] per message."""
    out: list[list[Any]] = []
    limit = opts.limit(PROMPT_LIMIT if item == WHOLE else ITEM_PROMPT_LIMIT)
    for message in messages or []:
        role = str(message.get("role"))
        text = str(message.get("content") or "")
        shared = opts.shared_index.get((node, role), -1)
        if shared >= 0 and text.startswith(opts.shared[shared]):
            text = text[len(opts.shared[shared]) :]
        else:
            shared = -1
        out.append([role, shared, abridge(text, limit)])
    return out


def _strip_logprobs(value: Any, full: bool) -> Any:
    if full or not isinstance(value, dict) or "_logprobs" not in value:
        return value
    return {**value, "_logprobs": "(token logprobs omitted; `report --full-prompts` keeps them)"}


def _raw_repeats_value(raw: Any, value: Any) -> bool:
    if not isinstance(raw, list) or len(raw) != 1 or not isinstance(raw[0], str):
        return raw is None
    try:
        return orjson.loads(raw[0]) == value
    except orjson.JSONDecodeError:
        return False


def compact_record(rec: dict[str, Any], opts: DetailOptions) -> dict[str, Any]:
    """One node execution as the page shows it (short keys keep big runs small)."""
    raw_limit = opts.limit(RAW_LIMIT)
    value = _strip_logprobs(rec.get("value"), opts.full)
    out: dict[str, Any] = {"i": rec.get("item", WHOLE), "s": rec.get("status")}
    if value is not None:
        out["v"] = value
    if rec.get("error"):
        out["e"] = rec["error"]
    if rec.get("messages"):
        out["m"] = _messages(rec["node"], out["i"], rec["messages"], opts)
    raw = rec.get("raw")
    if not _raw_repeats_value(raw, rec.get("value")):
        out["r"] = [abridge(str(r), raw_limit) for r in raw] if isinstance(raw, list) else raw
    if rec.get("cached"):
        out["c"] = 1
    for key, short in (("prompt_tokens", "pt"), ("completion_tokens", "ct")):
        if rec.get(key):
            out[short] = rec[key]
    if rec.get("latency"):
        out["l"] = round(float(rec["latency"]), 4)
    if rec.get("model"):
        out["model"] = rec["model"]
    attempts = []
    for att in rec.get("attempts") or []:
        entry: dict[str, Any] = {"n": att.get("number"), "k": att.get("kind")}
        if att.get("error"):
            entry["e"] = att["error"]
        if att.get("kind") not in ("ok", "cache") and att.get("raw"):
            entry["r"] = abridge(str(att["raw"]), raw_limit)
        if att.get("finish_reason"):
            entry["f"] = att["finish_reason"]
        if att.get("latency"):
            entry["l"] = round(float(att["latency"]), 4)
        if att.get("prompt_tokens") or att.get("completion_tokens"):
            entry["pt"] = att.get("prompt_tokens") or 0
            entry["ct"] = att.get("completion_tokens") or 0
        if att.get("cached"):
            entry["c"] = 1
        attempts.append(entry)
    if attempts:
        out["a"] = attempts
    return out


def _node_status(whole: dict[str, Any] | None, items: list[dict[str, Any]]) -> str:
    if whole is not None:
        return str(whole.get("s"))
    if not items:
        return "not run"
    statuses = {i.get("s") for i in items}
    if "failed" in statuses:
        return "failed"
    return "partial"  # items ran but the node's own record was never written


def node_path(
    records: list[dict[str, Any]], nodes: list[NodeInfo], opts: DetailOptions
) -> list[dict[str, Any]]:
    """Every node of the graph for one example, in graph order, with its latest execution.

    Earlier executions of the same node and item (a failed try before a resume) are kept
    as `earlier` so a reader sees why the example was run again.
    """
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    earlier: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:  # oldest first
        key = (rec["node"], rec.get("item", WHOLE))
        if key in latest:
            old = latest[key]
            earlier[rec["node"]].append(
                {
                    "i": key[1],
                    "s": old.get("status"),
                    "e": old.get("error"),
                    "run": old.get("run_id"),
                }
            )
        latest[key] = rec
    known = [n.name for n in nodes]
    extra = [name for name in dict.fromkeys(r["node"] for r in records) if name not in known]
    path = []
    for name in known + extra:
        whole_rec = latest.get((name, WHOLE))
        whole = compact_record(whole_rec, opts) if whole_rec else None
        items = sorted(
            (compact_record(r, opts) for (n, i), r in latest.items() if n == name and i != WHOLE),
            key=lambda r: r["i"],
        )
        entry: dict[str, Any] = {"node": name, "status": _node_status(whole, items)}
        if whole is not None:
            entry["rec"] = whole
        if items:
            entry["items"] = items
        if earlier.get(name):
            entry["earlier"] = earlier[name]
        path.append(entry)
    return path


# -- ExPerT -------------------------------------------------------------------------------


def _canonical(aggregation: str) -> str:
    """The compute module's name for an aggregation as a result's scores spell it
    (`content` and `content_only` are one aggregation)."""
    if aggregation in EXPERT_AGGREGATIONS:
        return aggregation
    if f"{aggregation}_only" in EXPERT_AGGREGATIONS:
        return f"{aggregation}_only"
    raise ValueError(f"unknown ExPerT aggregation {aggregation!r}")


def expert_aggregations(scores: dict[str, Any]) -> list[str]:
    """Aggregation names as the result's scores spell them (the paper's five otherwise)."""
    found: list[str] = []
    known = {a.removesuffix("_only") for a in EXPERT_AGGREGATIONS}
    for key in scores:
        for suffixes in _SCORE_SUFFIXES.values():
            for suffix in suffixes:
                name = key.removesuffix(f"_{suffix}")
                if name != key and name.removesuffix("_only") in known and name not in found:
                    found.append(name)
    return found or list(EXPERT_AGGREGATIONS)


def _reported(scores: dict[str, Any], aggregation: str, part: str) -> float | None:
    for suffix in _SCORE_SUFFIXES[part]:
        value = scores.get(f"{aggregation}_{suffix}")
        if _finite(value):
            return float(value)
    return None


def _match_target(entry: dict[str, Any], other: list[dict[str, Any]]) -> int | None:
    """Index on the other side of the aspect this entry names as its match."""
    if not entry.get("matched"):
        return None
    target = entry.get("matched_id", entry.get("matched_aspect"))
    if target is None:
        target = entry.get("matched_aspect")
    for key in ("id", "aspect", "title"):
        for index, cand in enumerate(other):
            if isinstance(cand, dict) and cand.get(key) is not None and cand.get(key) == target:
                return index
    if isinstance(target, int) and not isinstance(target, bool) and 0 <= target < len(other):
        return target
    return None


def expert_view(result: dict[str, Any]) -> dict[str, Any] | None:
    """Aspect table and the P/R/F arithmetic of an ExPerT result line; None for other graphs."""
    explanation = result.get("explanation")
    if not isinstance(explanation, dict):
        return None
    recall = explanation.get("recall")
    precision = explanation.get("precision")
    if not isinstance(recall, list) or not isinstance(precision, list):
        return None
    recall = [e if isinstance(e, dict) else {"aspect": str(e)} for e in recall]
    precision = [e if isinstance(e, dict) else {"aspect": str(e)} for e in precision]
    scores = result.get("scores") if isinstance(result.get("scores"), dict) else {}
    rows = []
    for agg in expert_aggregations(scores):
        canonical = _canonical(agg)
        r_terms = [aspect_credit(e, canonical) for e in recall]
        p_terms = [aspect_credit(e, canonical) for e in precision]
        r, p = mean_credit(recall, canonical), mean_credit(precision, canonical)
        rows.append(
            {
                "aggregation": agg,
                "recall_terms": r_terms,
                "precision_terms": p_terms,
                "recall": r,
                "precision": p,
                "f1": f1(p, r),
                "reported": {part: _reported(scores, agg, part) for part in _SCORE_SUFFIXES},
            }
        )
    return {
        "recall": [{**e, "_to": _match_target(e, precision)} for e in recall],
        "precision": [{**e, "_to": _match_target(e, recall)} for e in precision],
        "aggregations": rows,
    }


# -- the run as a whole -------------------------------------------------------------------


@dataclass
class RunData:
    """Everything the page is built from, with per-example traces built lazily."""

    run_dir: Path
    manifest: dict[str, Any]
    summary: dict[str, Any]
    results: list[dict[str, Any]]
    graph: GraphInfo
    inputs: dict[str, dict[str, str]]
    row_numbers: dict[str, int]
    notes: list[str]
    runs: list[dict[str, Any]]
    numeric_columns: list[str]
    text_columns: list[str]
    score_column: str | None

    @property
    def traces_path(self) -> Path:
        return self.run_dir / TRACES


def _columns(results: list[dict[str, Any]]) -> tuple[list[str], list[str], str | None]:
    """Numeric and text columns of the examples table, and the one called the score."""
    numeric: dict[str, None] = {}
    nested: dict[str, None] = {}
    text: dict[str, None] = {}
    for row in results:
        for key, value in row.items():
            if key in RESULT_META:
                continue
            if _finite(value):
                numeric[key] = None
            elif isinstance(value, str):
                text[key] = None
        if not numeric:
            for key in numeric_leaves(row):
                nested[key] = None
    columns = list(numeric) or list(nested)
    score = "score" if "score" in columns else (columns[0] if columns else None)
    if score is not None:
        columns.remove(score)
        columns.insert(0, score)
    return columns[:MAX_NUMERIC_COLUMNS], list(text)[:MAX_TEXT_COLUMNS], score


def load_run(run_dir: Path, full_prompts: bool = False) -> RunData:
    """Read manifest, summary, results, graph and dataset of a run folder."""
    run_dir = Path(run_dir)
    if not (run_dir / TRACES).is_file() and not (run_dir / "results.jsonl").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no results.jsonl, no {TRACES})")
    notes: list[str] = []
    manifest: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for name, target in ((MANIFEST, manifest), (SUMMARY, summary)):
        path = run_dir / name
        if path.is_file():
            try:
                data = read_json(path)
                if isinstance(data, dict):
                    target.update(data)
            except orjson.JSONDecodeError as exc:
                notes.append(f"{name} is not valid JSON ({exc})")
        else:
            notes.append(f"{name} is missing (the run may still be going or was interrupted)")
    by_id: dict[str, dict[str, Any]] = {}
    for row in read_results(run_dir):
        by_id[str(row.get("id"))] = row  # a resumed run's later line wins
    results = list(by_id.values())
    runs: list[dict[str, Any]] = []
    seen_nodes: list[str] = []
    if (run_dir / TRACES).is_file():
        store = TraceStore.reader(run_dir / TRACES)
        try:
            runs = store.runs()
            # Node names for a drawing without the graph file: those of a few examples.
            for row in results[:5]:
                seen_nodes += [r["node"] for r in store.node_runs(str(row.get("id")))]
        finally:
            store.close()
    for run in runs:
        run.pop("settings", None)
    if not manifest.get("graph") and runs:
        # An interrupted run may lack its manifest; the trace knows which graph it ran.
        manifest["graph"] = {"path": runs[-1].get("graph"), "hash": runs[-1].get("graph_hash")}
    graph = load_graph(manifest, run_dir, seen_nodes)
    if graph.note:
        notes.append(graph.note)
    inputs, numbers, note = load_inputs(
        manifest, run_dir, graph.inputs, None if full_prompts else INPUT_LIMIT
    )
    if note:
        notes.append(note)
    numeric, text, score = _columns(results)
    return RunData(
        run_dir,
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
    )


def example_order(run: RunData) -> list[int]:
    """Failed examples first, then dataset order (results order when the dataset is gone)."""

    def key(index: int) -> tuple[int, int, int]:
        row = run.results[index]
        number = run.row_numbers.get(str(row.get("id")), row.get("row") or 0)
        return (0 if row.get("status") != "ok" else 1, int(number or 0), index)

    return sorted(range(len(run.results)), key=key)


def table_rows(run: RunData, order: list[int]) -> dict[str, Any]:
    """The examples table, column by column (compact for 10,000 rows)."""
    rows = [run.results[i] for i in order]
    numeric = {col: [_column_value(r, col) for r in rows] for col in run.numeric_columns}
    return {
        "id": [str(r.get("id")) for r in rows],
        "status": [str(r.get("status")) for r in rows],
        "error": [r.get("error") for r in rows],
        "row": [run.row_numbers.get(str(r.get("id")), r.get("row")) for r in rows],
        "num": numeric,
        "txt": {
            col: [
                abridge(r[col], TEXT_COLUMN_LIMIT) if isinstance(r.get(col), str) else None
                for r in rows
            ]
            for col in run.text_columns
        },
    }


def _column_value(row: dict[str, Any], column: str) -> float | None:
    value: Any = row.get(column)
    if value is None and "." in column:
        head, _, tail = column.partition(".")
        inner = row.get(head)
        value = inner.get(tail) if isinstance(inner, dict) else None
    return float(value) if _finite(value) else None


def point_into_prompts(inputs: dict[str, str], path: list[dict[str, Any]]) -> dict[str, Any]:
    """Dataset fields, each one found verbatim in a prompt replaced by where it is there.

    The row text is usually the bulk of a prompt, so storing it twice would nearly double
    a large report; ["@", path index, message index, offset, length] points at it instead.
    """
    tails = [
        (p, m, message[2])
        for p, entry in enumerate(path)
        for m, message in enumerate(entry.get("rec", {}).get("m") or [])
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
    run: RunData, result: dict[str, Any], records: list[dict[str, Any]], opts: DetailOptions
) -> dict[str, Any]:
    """One example's page data: outputs, inputs, node path, ExPerT aspects."""
    example_id = str(result.get("id"))
    outputs = {k: v for k, v in result.items() if k not in RESULT_META}
    detail: dict[str, Any] = {
        "outputs": outputs,
        "path": node_path(records, run.graph.nodes, opts),
    }
    if example_id in run.inputs:
        detail["inputs"] = point_into_prompts(run.inputs[example_id], detail["path"])
    expert = expert_view(result)
    if expert is not None:
        detail["expert"] = expert
        outputs.pop("explanation", None)
    return detail


def records_by_example(store: TraceStore) -> dict[str, list[dict[str, Any]]]:
    """All node executions grouped by example, oldest first."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in store.node_runs():
        grouped[str(rec["example_id"])].append(rec)
    return grouped


def shared_heads(
    grouped: dict[str, list[dict[str, Any]]],
) -> tuple[list[str], dict[tuple[str, str], int]]:
    """Prompt heads shared by every execution of a node, over the whole run."""
    heads = PromptHeads()
    for records in grouped.values():
        for rec in records:
            heads.observe(rec["node"], rec.get("messages"))
    return heads.table()
