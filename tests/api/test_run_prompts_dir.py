"""`orc.run` / `orc.arun` take `prompts_dir=` as `load_graph` and `--prompts` do (issue 35,
item 14): a graph file run by path reads its templates from the folder the caller names."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import judge_graph

import orchestrator as orc


def _graph_file(tmp_path: Path) -> tuple[Path, Path]:
    """A graph file whose own prompts folder says one thing, and a folder elsewhere that
    says another."""
    home = tmp_path / "graph"
    (home / "prompts").mkdir(parents=True)
    (home / "prompts" / "judge.jinja").write_text("OWN {{ text }}", encoding="utf-8")
    path = home / "graph.yaml"
    path.write_text(yaml.safe_dump({"prompts": "prompts", **judge_graph()}), encoding="utf-8")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "judge.jinja").write_text("MINE {{ text }}", encoding="utf-8")
    return path, mine


def _sent(fake: orc.FakeTransport) -> list[str]:
    return [str(r.messages[-1]["content"]) for r in fake.requests if not r.is_canary]


def test_run_and_arun_read_templates_from_prompts_dir(tmp_path: Path) -> None:
    path, mine = _graph_file(tmp_path)
    rows: list[dict[str, Any]] = [{"id": "a", "text": "x"}]
    fake = orc.FakeTransport()
    orc.run(path, rows, transport=fake, prompts_dir=mine)
    asyncio.run(orc.arun(path, rows, transport=fake, prompts_dir=str(mine)))
    orc.run(path, rows, transport=fake)  # without it: the graph's own folder
    assert _sent(fake) == ["MINE x", "MINE x", "OWN x"]


def test_prompts_dir_with_a_compiled_graph_is_refused(tmp_path: Path) -> None:
    """A compiled graph has read its templates already: the folder would be ignored."""
    path, mine = _graph_file(tmp_path)
    graph = orc.load_graph(path)
    with pytest.raises(orc.ConfigurationError, match="load_graph"):
        orc.run(graph, [{"id": "a", "text": "x"}], transport=orc.FakeTransport(), prompts_dir=mine)
