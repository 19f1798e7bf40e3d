"""The aligned folder on disk: manifest.json (whose folder it is), graph.yaml, its
templates and shots under prompts/, and alignment.json (the page, alignment.html, comes
from the report layer; the runs under runs/ from the API's)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ...errors import ConfigurationError
from ...store import check_out, claim_out, clear_out, command_output
from .record import Alignment
from .variants import PROMPTS

GRAPH_FILE = "graph.yaml"
RECORD_FILE = "alignment.json"
PAGE_FILE = "alignment.html"
RUNS = "runs"  # every run of the search and the test, as ordinary run folders
# What `orchestrator align` writes in its --out, and how it knows the folder is its own.
ALIGNED_FOLDER = command_output("align", {GRAPH_FILE, PROMPTS, RECORD_FILE, PAGE_FILE, RUNS})


def open_folder(out: Path, overwrite: bool, reads: Iterable[Path]) -> None:
    """Make `out` the aligned folder before anything is run: missing, empty or one align
    wrote before (its runs then resume), never the folder of a file it reads (the graph,
    its prompts, the labels); `overwrite` first deletes what align wrote there. The rule
    and messages are the run folder's (store/outfolder.py)."""
    check_out(out, ALIGNED_FOLDER, overwrite, reads=reads)
    if overwrite and out.is_dir():
        clear_out(out, ALIGNED_FOLDER)
    claim_out(out, ALIGNED_FOLDER)


def _inside(root: Path, name: str) -> Path:
    """Where a template named `name` goes under root; a name leaving it is refused."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
        raise ConfigurationError(f"template name {name!r} would leave the aligned folder")
    return root.joinpath(*parts)


def write_graph(out: Path, spec: Mapping[str, Any], texts: Mapping[str, str]) -> Path:
    """Write OUT/graph.yaml and every text under OUT/prompts/ (replacing what an earlier
    alignment left there, such as an isotonic map the new graph does not use); return the
    graph's path. `open_folder` has made OUT align's own."""
    prompts = out / PROMPTS
    if prompts.is_dir() and not prompts.is_symlink():
        shutil.rmtree(prompts)
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
