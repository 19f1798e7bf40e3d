"""Nodes with `once: true`: run once per run, before the rows fan out, their value shared
by every row (G-Eval writes its evaluation steps once per dataset, every row's judge reads
them). Here: the check that such a node reads nothing a row has, and the split of a graph's
order into the once-nodes and the per-row rest."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .checks import Checker
    from .compiled import CompiledGraph
    from .spec import GraphSpec

# The example id the trace records once-node executions under, so a resumed run finds their
# values there as it finds a row's. A row that happens to have this id shares it harmlessly:
# it never runs a once-node, so the two never record the same node.
ONCE_EXAMPLE = "__once__"

# Names every once-node may read: the run's params and its server facts; nothing of a row.
_RUN_WIDE = frozenset({"params", "run"})


def check_once(ck: Checker, spec: GraphSpec, inputs: set[str]) -> None:
    """A problem for each once-node that reads a row input, the row's id or a per-row node
    (by the first field that reads it): it would have nothing to read before the rows."""
    for name, node in spec.nodes.items():
        if not node.once:
            continue
        item_names = {node.as_, f"{node.as_}_index"} if node.foreach else set()
        for ref, field in sorted(ck.refs.get(name, {}).items()):
            if ref in item_names or ref in _RUN_WIDE or ref == name:
                continue
            if ref in inputs or ref == "id":
                what = f"the row input '{ref}'"
            elif ref in spec.nodes and not spec.nodes[ref].once:
                what = f"the per-row node '{ref}'"
            else:
                continue
            ck.problem(
                f"a once-node runs before any row, so it cannot read {what}; it may read "
                f"params and other once-nodes only (drop `once: true` or the reference)",
                name,
                field,
            )


def once_order(graph: CompiledGraph) -> list[str]:
    """The once-nodes in the graph's run order (each after the once-nodes it reads)."""
    return [name for name in graph.order if graph.nodes[name].spec.once]


def row_order(graph: CompiledGraph) -> list[str]:
    """The nodes every row runs, in the graph's run order."""
    return [name for name in graph.order if not graph.nodes[name].spec.once]
