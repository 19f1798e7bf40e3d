"""The `examples` verb: where the shipped protocols and their example data are installed."""

from __future__ import annotations

import shlex

from .app import app, console, fail


@app.command()
def examples() -> None:
    """Print a ready-to-paste `orchestrator run` line for each shipped graph and its data."""
    from ..shipped import shipped_data, shipped_root

    root = shipped_root()
    if root is None:
        fail("the shipped protocols are not installed; reinstall orchestrator")
    for graph in sorted((root / "graphs").glob("*.yaml")):
        data = shipped_data(graph.stem)
        where = shlex.quote(str(data)) if data is not None else "YOUR_DATA.jsonl"
        line = f"orchestrator run {graph.stem} --data {where}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
