"""The judging node's answers in a finished run folder, and the values of the nodes it
reads (for its shots), read from the run's trace."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...store import WHOLE, RunReader
from ..metaeval import field_value


def node_answers(folder: Path, node: str, field: str) -> dict[str, Any]:
    """Each example's answer in the node's `field`: a sample's value, or over n samples
    their mean (scores) or most common value (choices)."""
    found: dict[str, Any] = {}
    for run in RunReader(folder).node_runs(node=node):
        if run.status != "ok":
            continue
        values = run.value if isinstance(run.value, list) else [run.value]
        said = [field_value(v, field) for v in values if isinstance(v, dict)]
        said = [v for v in said if v is not None]
        if not said:
            continue
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in said)
        found[run.example_id] = (
            float(np.mean(said)) if numeric else max(said, key=lambda v: (said.count(v), str(v)))
        )
    return found


def node_values(folder: Path, nodes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each example's values of `nodes` as the run left them: a node's value, a `foreach`
    node's list of item values, None for a node that was skipped or failed."""
    latest: dict[tuple[str, str, int], Any] = {}
    for run in RunReader(folder).node_runs():  # oldest first: a later run wins
        if run.node in nodes:
            value = run.value if run.status == "ok" else None
            latest[(run.example_id, run.node, run.item)] = value
    found: dict[str, dict[str, Any]] = {}
    items: dict[tuple[str, str], list[Any]] = {}
    for (example, node, item), value in sorted(latest.items(), key=lambda kv: kv[0]):
        if item == WHOLE:
            found.setdefault(example, {})[node] = value
        else:
            items.setdefault((example, node), []).append(value)
    for (example, node), values in items.items():
        found.setdefault(example, {})[node] = values
    return found
