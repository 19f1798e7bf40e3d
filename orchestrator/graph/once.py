"""Nodes with `once: true`: run once per run, before the rows fan out, their value shared
by every row (G-Eval writes its evaluation steps once per dataset, every row's judge reads
them); and nodes with `once_per: FIELD`: run once per distinct value of a row field, their
value shared by the rows that have it (MT-Bench asks the judge's own answer once per
question). Here: the checks that such nodes read nothing else of a row, the trace example
id of a group, and the split of a graph's order into once-, once_per- and per-row nodes."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checks import Checker
    from .compiled import CompiledGraph
    from .spec import GraphSpec, NodeBase

# The example id the trace records once-node executions under, so a resumed run finds their
# values there as it finds a row's. A row that happens to have this id shares it harmlessly:
# it never runs a once-node, so the two never record the same node.
ONCE_EXAMPLE = "__once__"

# The prefix of a group's example id (`group_example`); the same reasoning holds.
GROUP_EXAMPLE = "__once_per__"
# A group value longer than this (as JSON) is named in its example id by a digest.
_LONGEST_KEY = 64

# Names every once-node may read: the run's params and its server facts; nothing of a row.
_RUN_WIDE = frozenset({"params", "run"})


def _reader(spec: GraphSpec, name: str, ref: str, inputs: set[str]) -> tuple[str, str] | None:
    """What `ref`, read by node `name`, is in terms of a row: (its kind, how to name it), or
    None when it is nothing of a row (params, run, files, an item name, a once-node)."""
    node = spec.nodes[name]
    item_names = {node.as_, f"{node.as_}_index"} if node.foreach else set()
    if ref in item_names or ref in _RUN_WIDE or ref == name:
        return None
    if ref in inputs or ref == "id":
        return "input", f"the row input '{ref}'"
    if ref not in spec.nodes or spec.nodes[ref].once:
        return None
    other = spec.nodes[ref].once_per
    if other is not None:
        return f"group:{other}", f"the once_per node '{ref}' (one value per '{other}')"
    return "row", f"the per-row node '{ref}'"


def check_once(ck: Checker, spec: GraphSpec, inputs: set[str]) -> None:
    """A problem for each once-node that reads a row input, the row's id, a once_per node or
    a per-row node (by the first field that reads it): it would have nothing to read before
    the rows."""
    for name, node in spec.nodes.items():
        if not node.once:
            continue
        for ref, field in sorted(ck.refs.get(name, {}).items()):
            found = _reader(spec, name, ref, inputs)
            if found is None:
                continue
            ck.problem(
                f"a once-node runs before any row, so it cannot read {found[1]}; it may read "
                f"params and other once-nodes only (drop `once: true` or the reference)",
                name,
                field,
            )


def check_once_per(ck: Checker, spec: GraphSpec, inputs: set[str]) -> None:
    """A problem for each once_per node that is also `once`, groups by a field that is not
    an input, or reads a row field other than its own, the row's id, a per-row node or a
    once_per node of another field: its one value per group could not depend on those."""
    for name, node in spec.nodes.items():
        by = node.once_per
        if by is None:
            continue
        if node.once:
            ck.problem("a node runs `once: true` or `once_per: FIELD`, not both", name, "once_per")
            continue
        if by not in inputs:
            listed = ", ".join(sorted(inputs)) or "none"
            ck.problem(
                f"once_per names '{by}', which is not an input of the graph (inputs: {listed})",
                name,
                "once_per",
            )
            continue
        for ref, field in sorted(ck.refs.get(name, {}).items()):
            if ref == by:
                continue
            found = _reader(spec, name, ref, inputs)
            if found is None or found[0] == f"group:{by}":
                continue
            ck.problem(
                f"a once_per node runs once per distinct '{by}', so it cannot read "
                f"{found[1]}; it may read '{by}', params, files, once-nodes and other "
                f"`once_per: {by}` nodes only (drop `once_per` or the reference)",
                name,
                field,
            )


def group_example(field: str, value: Any) -> str:
    """The example id the trace records a group's once_per nodes under: the field and its
    value as JSON (by a digest when long), e.g. `__once_per__ question="q1"`."""
    key = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(key) > _LONGEST_KEY:
        # JSON never starts with '#', so a digest cannot be taken for a short value.
        key = "#" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return f"{GROUP_EXAMPLE} {field}={key}"


def _is_shared(node: NodeBase) -> bool:
    return node.once or node.once_per is not None


def once_order(graph: CompiledGraph) -> list[str]:
    """The once-nodes in the graph's run order (each after the once-nodes it reads)."""
    return [name for name in graph.order if graph.nodes[name].spec.once]


def group_orders(graph: CompiledGraph) -> dict[str, list[str]]:
    """The once_per nodes by the field they group by, each list in the graph's run order."""
    orders: dict[str, list[str]] = {}
    for name in graph.order:
        by = graph.nodes[name].spec.once_per
        if by is not None:
            orders.setdefault(by, []).append(name)
    return orders


def row_order(graph: CompiledGraph) -> list[str]:
    """The nodes every row runs itself, in the graph's run order."""
    return [name for name in graph.order if not _is_shared(graph.nodes[name].spec)]
