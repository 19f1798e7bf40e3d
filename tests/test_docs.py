"""The complete example in docs/graph-format.md is a valid graph, so the doc cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from helpers import write_graph

from orchestrator import compile_graph

DOC = Path(__file__).parent.parent / "docs" / "graph-format.md"


def test_graph_format_example_compiles(tmp_path: Path) -> None:
    block = re.search(r"## A complete small example\s+```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert block, "the example block moved; keep this test pointing at it"
    spec = yaml.safe_load(block.group(1))
    spec["prompts"] = "prompts"  # the doc assumes graphs/ beside prompts/
    templates = {
        "mine/system.jinja": "You judge texts.",
        "mine/judge.jinja": "{{ input }} {{ reference }} {{ output }}",
        "mine/point.jinja": "{{ point.title }} {{ point_index }}",
    }
    graph = compile_graph(write_graph(tmp_path, spec, templates))
    assert graph.order.index("judge") < graph.order.index("per_point")
    assert graph.nodes["per_point"].deps == {"judge"}
    assert graph.nodes["flagged"].deps == {"judge"}
