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

import orjson

from ..runfolder import (
    MANIFEST,
    SUMMARY,
    TRACES,
    read_json,
    read_results,
)
from ..summary import numeric_leaves
from ..trace import WHOLE, TraceStore
from .expert_view import expert_view
from .sources import GraphInfo, NodeInfo, load_graph, load_inputs
from .values import abridge, finite

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
            if finite(value):
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
    return float(value) if finite(value) else None


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
