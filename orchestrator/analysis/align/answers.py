"""The judging node's answers in a finished run folder, read from its trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...store.reader import RunReader
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
