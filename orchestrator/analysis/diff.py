"""`diff`: where two runs of one graph over the same examples part. Per node, how many
examples' node values changed; per example whose final output changed, the first node in
graph order whose value differs, with both values and links into both reports.

Node values come from the traces (the latest execution of each node and foreach item), so
a change upstream is told apart from the changes it causes downstream.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, Field, computed_field

from ..errors import ConfigurationError, GraphError
from ..graph import ONCE_EXAMPLE
from ..store import WHOLE, NodeRun, ResultLine

if TYPE_CHECKING:
    from .compare import RunResult

log = logging.getLogger(__name__)

REPORT = "report.html"  # the file `orchestrator report` writes into a run folder
_FIELDS = ("id", "status", "error")  # a result line's own fields, not outputs
SETTLED = ("ok", "failed", "skipped", "abstained")  # a node's own record; else not run/stopped


class DiffRun(BaseModel):
    """One side of the diff: its folder, graph and how many examples it holds."""

    label: str
    path: str
    graph: str | None = None
    graph_hash: str | None = None
    examples: int = 0


class NodeChange(BaseModel):
    """One node: on how many shared examples it ran in either run, and on how many its value
    differs. A once-node runs once per run, so it counts one 'example', the run itself."""

    node: str
    once: bool = False
    compared: int = 0
    changed: int = 0


class FirstDifference(BaseModel):
    """An example whose final output changed, and the first node in graph order where the
    two runs' values differ (None when the traces hold no difference, e.g. one is missing)."""

    example: str
    outputs_a: dict[str, Any] = Field(default_factory=dict)
    outputs_b: dict[str, Any] = Field(default_factory=dict)
    status_a: str = "ok"
    status_b: str = "ok"
    node: str | None = None
    once: bool = False  # the node is a once-node: shared by every example of the run
    node_status_a: str | None = None
    node_status_b: str | None = None
    value_a: Any = None
    value_b: Any = None
    # A list value (foreach items, n samples): how many positions differ, of how many, and
    # the first that does (its item or sample index).
    parts: int | None = None
    parts_changed: int | None = None
    first_part: int | None = None
    changed_nodes: list[str] = Field(default_factory=list)  # every node that differs
    # The differing nodes whose every input node agrees: where the runs part on their own
    # (that node's prompt, model or settings, or the row's inputs), not by inheritance.
    parted_at: list[str] = Field(default_factory=list)
    link_a: str | None = None
    link_b: str | None = None

    def where(self) -> str:
        """The first differing node as a reader sees it: once-nodes, list parts and the other
        nodes where the runs part on their own noted."""
        if self.node is None:
            return "(no node differs)"
        text = self.node + (" (once)" if self.once else "")
        if self.parts is not None:
            text += f" [{self.parts_changed} of {self.parts} differ]"
        others = [n for n in self.parted_at if n != self.node]
        if others:
            text += f"; also parts at {', '.join(others)}"
        return text

    def _text(self, side: Literal["a", "b"]) -> str:
        """One run's value at the first differing node as text: a failed or skipped node's
        status, and of a list value the first position that differs."""
        status = self.node_status_a if side == "a" else self.node_status_b
        value = self.value_a if side == "a" else self.value_b
        if status != "ok":
            return f"({status})"
        prefix = ""
        if self.first_part is not None and isinstance(value, list):
            prefix = f"[{self.first_part}] "
            value = value[self.first_part] if self.first_part < len(value) else "(none)"
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return prefix + text

    def shown(self, side: Literal["a", "b"], width: int = 60) -> str:
        """One run's value at the first differing node in at most `width` characters, cut
        so that where it departs from the other run's value stays in view: two long texts
        that part late would otherwise show the same beginning twice."""
        text = self._text(side)
        if len(text) <= width:
            return text
        other = self._text("b" if side == "a" else "a")
        shared = zip(text, other, strict=False)  # as far as the shorter goes
        same = next((i for i, (x, y) in enumerate(shared) if x != y), min(len(text), len(other)))
        # Cut from the start while the first differing character fits; else open a third of
        # the width before it (what both share leading up to the change), or earlier where
        # the text ends sooner, so the window stays full.
        start = 0 if same < width - 1 else min(same - width // 3, len(text) - width + 1)
        head = "…" if start else ""
        end = start + width - len(head)
        if end >= len(text):
            return head + text[start:]
        return head + text[start : end - 1] + "…"


class RunDiff(BaseModel):
    """Where run b parts from run a: per-node counts and each changed example's first
    differing node (`orc.diff`, `orchestrator diff`)."""

    run_a: DiffRun
    run_b: DiffRun
    order: list[str] = Field(default_factory=list)  # the graph's nodes, topological
    shared: int = 0  # examples in both runs
    only_in_a: list[str] = Field(default_factory=list)
    only_in_b: list[str] = Field(default_factory=list)
    changed: int = 0  # shared examples whose final output (or status) changed
    nodes: list[NodeChange] = Field(default_factory=list)
    differences: list[FirstDifference] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def identical(self) -> bool:
        """No node value and no final output differs on the shared examples."""
        return not self.changed and not any(n.changed for n in self.nodes)


@dataclass(frozen=True)
class _Value:
    """A node's latest value for one example, as compared: a failed or skipped node's value
    is its status alone (error texts carry times and addresses that differ run to run)."""

    status: str
    value: Any

    @property
    def key(self) -> tuple[str, Any]:
        return (self.status, self.value if self.status == "ok" else None)


@dataclass
class _Side:
    info: DiffRun
    lines: dict[str, ResultLine]
    values: dict[str, dict[str, _Value]]  # example id (or ONCE_EXAMPLE) → node → value
    order: list[str] | None  # from the snapshot graph; None when it cannot be read
    once: set[str]
    deps: dict[str, set[str]]  # node → the nodes it reads (empty without the graph)
    note: str | None  # why `order` is None


def path_anchor(example: str, node: str | None = None) -> str:
    """The fragment that opens an example's decision path in a report (report/app.js reads
    `#example=ID`, the id quoted as its own rows quote it; `&node=` scrolls to that node)."""
    anchor = f"example={quote(example, safe='')}"
    return anchor if node is None else f"{anchor}&node={quote(node, safe='')}"


def _folder(run: str | Path | RunResult, position: int) -> Path:
    if isinstance(run, str | Path):
        return Path(run)
    folder = getattr(run, "folder", None)
    if folder is None:
        raise ConfigurationError(
            f"run {position + 1} was held in memory: diff reads node values from a run "
            "folder's trace, so run it with out=FOLDER"
        )
    return Path(folder)


_Shape = tuple[list[str] | None, set[str], dict[str, set[str]], str | None]


def _graph_order(reader: Any) -> _Shape:
    """The graph's nodes in run order, its once-nodes and what each node reads, from the
    run's snapshot; no order, with a note, when the snapshot is missing or does not compile."""
    from ..kinds import compile_graph

    snapshot = reader.snapshot_graph
    if snapshot is None:
        return None, set(), {}, f"{reader.path} keeps no graph snapshot: node order from the trace"
    try:
        # Compiled without the user's functions: only the order is needed, no code runs.
        graph = compile_graph(snapshot, prompts_dir=reader.snapshot_prompts, functions=False)
    except (GraphError, OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, set(), {}, f"{snapshot} does not compile ({first}): node order from the trace"
    once = {name for name in graph.order if graph.nodes[name].spec.once}
    deps = {name: set(graph.nodes[name].deps) for name in graph.order}
    return list(graph.order), once, deps, None


def _values(records: Iterable[NodeRun]) -> dict[str, dict[str, _Value]]:
    """Each example's latest value per node: the node's own record where written, else the
    list of its foreach items' values (a node stopped before it gathered them)."""
    whole: dict[tuple[str, str], NodeRun] = {}
    items: dict[tuple[str, str], dict[int, NodeRun]] = {}
    for rec in records:  # oldest first: a later run's record replaces an earlier one's
        key = (rec.example_id, rec.node)
        if rec.item == WHOLE:
            whole[key] = rec
        else:
            items.setdefault(key, {})[rec.item] = rec
    found: dict[str, dict[str, _Value]] = {}
    for key in dict.fromkeys([*whole, *items]):
        example, node = key
        own = whole.get(key)
        if own is not None:
            value = _Value(own.status, own.value)
        else:
            parts = [items[key][i] for i in sorted(items[key])]
            failed = any(p.status == "failed" for p in parts)
            value = _Value("failed" if failed else "partial", [p.value for p in parts])
        found.setdefault(example, {})[node] = value
    return found


def _load(run: str | Path | RunResult, position: int) -> _Side:
    from ..store import RunReader

    folder = _folder(run, position)
    reader = RunReader(folder)
    if not reader.has_results:
        raise ConfigurationError(f"{folder} has no results.jsonl; is it a run folder?")
    if not reader.has_trace:
        raise ConfigurationError(
            f"{folder} has no {reader.traces_path.name}: diff compares node values, which "
            "only the trace keeps"
        )
    lines = {line.id: line for line in reader.latest_results()}
    manifest = reader.manifest
    order, once, deps, note = _graph_order(reader)
    info = DiffRun(
        label=folder.name or f"run{position + 1}",
        path=str(folder),
        graph=manifest.graph.name,
        graph_hash=manifest.graph.hash,
        examples=len(lines),
    )
    return _Side(info, lines, _values(reader.node_runs()), order, once, deps, note)


def _check(a: _Side, b: _Side, notes: list[str]) -> list[str]:
    """Refuse runs of different graphs; the node order both runs share."""
    if a.info.graph and b.info.graph and a.info.graph != b.info.graph:
        raise ConfigurationError(
            f"runs of different graphs cannot be diffed: {a.info.label} runs {a.info.graph!r}, "
            f"{b.info.label} runs {b.info.graph!r}"
        )
    notes += [side.note for side in (a, b) if side.note]
    order_a = a.order or _seen_order(a)
    order_b = b.order or _seen_order(b)
    if a.order is not None and b.order is not None and set(order_a) != set(order_b):
        only_a = [n for n in order_a if n not in order_b]
        only_b = [n for n in order_b if n not in order_a]
        parts = [f"only {a.info.label} has {', '.join(only_a)}" if only_a else ""]
        parts.append(f"only {b.info.label} has {', '.join(only_b)}" if only_b else "")
        raise ConfigurationError(
            "the runs' graphs have different nodes, so no node can be matched to another: "
            + "; ".join(p for p in parts if p)
        )
    if a.info.graph_hash and b.info.graph_hash and a.info.graph_hash != b.info.graph_hash:
        notes.append(
            f"the graphs share their nodes but not their hash ({a.info.graph_hash} vs "
            f"{b.info.graph_hash}): a prompt or setting was edited between the runs"
        )
    if a.info.label == b.info.label:
        a.info.label, b.info.label = a.info.path, b.info.path
    # A graph's own order where either run kept its snapshot; the traces' order otherwise.
    first, second = (
        (order_a, order_b) if a.order is not None or b.order is None else (order_b, order_a)
    )
    return first + [n for n in second if n not in first]


def _seen_order(side: _Side) -> list[str]:
    """Node names in the order the trace first saw them (once-nodes run first)."""
    return list(dict.fromkeys(n for nodes in side.values.values() for n in nodes))


def _outputs(line: ResultLine) -> dict[str, Any]:
    return {k: v for k, v in line.outputs.items() if k not in _FIELDS}


def _parts(found: FirstDifference) -> None:
    """For two list values (foreach items, n samples): how many positions there are, how many
    differ and the first that does; a shorter list's missing positions differ."""
    a, b = found.value_a, found.value_b
    if not isinstance(a, list) or not isinstance(b, list):
        return
    size = max(len(a), len(b))
    missing = object()
    pad_a = a + [missing] * (size - len(a))
    pad_b = b + [missing] * (size - len(b))
    differ = [i for i, (x, y) in enumerate(zip(pad_a, pad_b, strict=True)) if x != y]
    found.parts, found.parts_changed = size, len(differ)
    found.first_part = differ[0] if differ else None


def _link(side: _Side, example: str, node: str) -> str:
    return f"{Path(side.info.path) / REPORT}#{path_anchor(example, node)}"


def diff(run_a: str | Path | RunResult, run_b: str | Path | RunResult) -> RunDiff:
    """Where run b parts from run a (two run folders of one graph over the same examples).

    Per node: on how many shared examples its value changed. Per example whose final output
    or status changed: the first node in graph order whose value differs, both values and
    links into both runs' reports. A once-node's value is every example's, so it is compared
    once and, where it differs, is the first difference of the examples downstream of it.
    Raises ConfigurationError for runs of different graphs or with no example in common.
    """
    a, b = _load(run_a, 0), _load(run_b, 1)
    notes: list[str] = []
    order = _check(a, b, notes)
    once = a.once | b.once
    deps = a.deps or b.deps
    shared = [key for key in a.lines if key in b.lines]
    only_a = [key for key in a.lines if key not in b.lines]
    only_b = [key for key in b.lines if key not in a.lines]
    if not shared:
        raise ConfigurationError(
            f"the runs share no example id ({a.info.label} has {len(a.lines)}, "
            f"{b.info.label} has {len(b.lines)}), so there is nothing to diff"
        )
    if only_a or only_b:
        notes.append(
            f"{len(only_a)} examples only in {a.info.label}, {len(only_b)} only in "
            f"{b.info.label}: the diff covers the {len(shared)} in both"
        )
    counts = {node: NodeChange(node=node, once=node in once) for node in order}
    differing: dict[str, list[str]] = {}  # example → nodes that differ, in graph order
    once_a, once_b = a.values.get(ONCE_EXAMPLE, {}), b.values.get(ONCE_EXAMPLE, {})
    once_changed = []
    for node in order:
        if node not in once or (node not in once_a and node not in once_b):
            continue
        counts[node].compared = 1
        if _key(once_a.get(node)) != _key(once_b.get(node)):
            counts[node].changed = 1
            once_changed.append(node)
    for example in shared:
        va, vb = a.values.get(example, {}), b.values.get(example, {})
        nodes = []
        for node in order:
            if node in once:
                nodes += [node] if node in once_changed else []
                continue
            if node not in va and node not in vb:
                continue
            counts[node].compared += 1
            if _key(va.get(node)) != _key(vb.get(node)):
                counts[node].changed += 1
                nodes.append(node)
        differing[example] = nodes
    differences = []
    for example in shared:
        la, lb = a.lines[example], b.lines[example]
        if la.status == lb.status and _outputs(la) == _outputs(lb):
            continue
        found = FirstDifference(
            example=example,
            outputs_a=_outputs(la),
            outputs_b=_outputs(lb),
            status_a=la.status,
            status_b=lb.status,
            changed_nodes=differing[example],
            parted_at=_parted(differing[example], deps, once, example, a, b),
        )
        if differing[example]:
            node = _first(differing[example], once, example, a, b)
            where = ONCE_EXAMPLE if node in once else example
            got_a = a.values.get(where, {}).get(node)
            got_b = b.values.get(where, {}).get(node)
            found.node, found.once = node, node in once
            found.node_status_a = got_a.status if got_a else "not run"
            found.node_status_b = got_b.status if got_b else "not run"
            found.value_a = got_a.value if got_a else None
            found.value_b = got_b.value if got_b else None
            _parts(found)
            found.link_a, found.link_b = _link(a, example, node), _link(b, example, node)
        differences.append(found)
    unexplained = sum(d.node is None for d in differences)
    if unexplained:
        notes.append(
            f"{unexplained} examples changed their final output with no node value differing "
            "in the traces (a trace incomplete, or outputs computed after the nodes)"
        )
    log.debug(
        "diff %s → %s: %d shared examples, %d changed",
        a.info.path,
        b.info.path,
        len(shared),
        len(differences),
    )
    return RunDiff(
        run_a=a.info,
        run_b=b.info,
        order=order,
        shared=len(shared),
        only_in_a=only_a,
        only_in_b=only_b,
        changed=len(differences),
        nodes=list(counts.values()),
        differences=differences,
        notes=notes,
    )


def _settled(node: str, once: set[str], example: str, a: _Side, b: _Side) -> bool:
    """Both runs finished the node (ok, failed, skipped or abstained) for the example."""
    where = ONCE_EXAMPLE if node in once else example
    sides = (a.values.get(where, {}).get(node), b.values.get(where, {}).get(node))
    return all(v is not None and v.status in SETTLED for v in sides)


def _first(nodes: list[str], once: set[str], example: str, a: _Side, b: _Side) -> str:
    """The first differing node that both runs settled: a node one run never ran or never
    finished is what an earlier failure left behind, not where the runs part, so it is named
    only when no settled node differs."""
    return next((n for n in nodes if _settled(n, once, example, a, b)), nodes[0])


def _parted(
    nodes: list[str], deps: dict[str, set[str]], once: set[str], example: str, a: _Side, b: _Side
) -> list[str]:
    """The settled differing nodes none of whose input nodes differ (empty without the
    graph, which alone says what a node reads)."""
    if not deps:
        return []
    differ = set(nodes)
    return [
        n for n in nodes if not deps.get(n, set()) & differ and _settled(n, once, example, a, b)
    ]


def _key(value: _Value | None) -> tuple[str, Any]:
    return ("not run", None) if value is None else value.key
