"""The aligned folder on disk: graph.yaml, its templates and shots under prompts/, and
alignment.json (the page, alignment.html, comes from the report layer)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ...errors import ConfigurationError
from .record import Alignment
from .variants import PROMPTS

GRAPH_FILE = "graph.yaml"
RECORD_FILE = "alignment.json"
PAGE_FILE = "alignment.html"


def _inside(root: Path, name: str) -> Path:
    """Where a template named `name` goes under root; a name leaving it is refused."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
        raise ConfigurationError(f"template name {name!r} would leave the aligned folder")
    return root.joinpath(*parts)


def write_graph(out: Path, spec: Mapping[str, Any], texts: Mapping[str, str]) -> Path:
    """Write OUT/graph.yaml and every text under OUT/prompts/; return the graph's path."""
    prompts = out / PROMPTS
    for name, text in texts.items():
        path = _inside(prompts, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    prompts.mkdir(parents=True, exist_ok=True)
    graph = out / GRAPH_FILE
    graph.write_text(
        yaml.safe_dump(dict(spec), sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
    return graph


def write_record(out: Path, record: Alignment) -> Path:
    """Write OUT/alignment.json, the full record."""
    path = out / RECORD_FILE
    path.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return path
