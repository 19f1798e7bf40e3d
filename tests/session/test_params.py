"""Params are checked before anything runs (issue 16, item 6): a misspelt override is
refused naming the known ones, not ignored in silence."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import judge_graph, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app

DEAD = "http://127.0.0.1:9/v1"  # nothing listens: reaching it would be a different error


def _graph(tmp_path: Path) -> Path:
    graph = judge_graph()
    graph["params"] = {"samples": 3, "scale": 10}
    return write_graph(
        tmp_path, graph, {"judge.jinja": "Rate {{ text }} out of {{ params.scale }}"}
    )


def test_misspelt_param_is_refused_before_the_server_or_folder(tmp_path: Path) -> None:
    graph = _graph(tmp_path)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}])
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(graph),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "run"),
            "--base-url",
            DEAD,
            "--param",
            "sample=5",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "unknown param 'sample' (did you mean 'samples'?)" in result.output
    assert "Its params are: samples, scale" in result.output
    assert not (tmp_path / "run").exists()


def test_python_api_raises_a_configuration_error(tmp_path: Path) -> None:
    graph = orc.load_graph(_graph(tmp_path))
    with pytest.raises(orc.ConfigurationError, match="unknown param 'scal'"):
        orc.run(graph, [{"id": "a", "text": "x"}], base_url=DEAD, params={"scal": 5})
    assert isinstance(orc.ConfigurationError("x"), orc.OrchestratorError)


def test_a_node_model_may_come_from_a_param(tmp_path: Path) -> None:
    """A jury's judges name their models; `model: params.X` lets a run or a sweep switch
    one of them without editing the graph, and the run key records the model used."""
    from fakeserver import FakeServer

    graph = judge_graph()
    graph["params"] = {"judge_model": "judge-a"}
    graph["nodes"]["judge"]["model"] = "params.judge_model"
    path = write_graph(tmp_path, graph, {"judge.jinja": "Rate {{ text }}"})
    rows = [{"id": "a", "text": "x"}]
    with FakeServer(also_serves=("judge-a", "judge-b")) as server:
        first = orc.run(path, rows, base_url=server.base_url, structured="server")
        second = orc.run(
            path,
            rows,
            base_url=server.base_url,
            structured="server",
            params={"judge_model": "judge-b"},
        )
        models = [body["model"] for body in server.requests]
    assert models == ["judge-a", "judge-b"]
    assert first.manifest.run_key != second.manifest.run_key
    broken = judge_graph()
    broken["nodes"]["judge"]["model"] = "params.nobody"
    with pytest.raises(orc.GraphError, match="declares no param 'nobody'"):
        orc.load_graph(write_graph(tmp_path / "b", broken, {"judge.jinja": "Rate {{ text }}"}))


def test_a_param_that_does_not_fit_its_function_is_refused_before_any_request(
    tmp_path: Path,
) -> None:
    """ExPerT's `failed_judgment` goes straight to `expert_scores`, which takes "reference"
    or "keep_other". A typo used to fail every example at its last node, after all its calls were
    paid for; now the run is refused before the first, naming param, node and argument."""
    root = Path(__file__).resolve().parents[2]
    fake = orc.FakeTransport()
    with pytest.raises(orc.ConfigurationError) as refused:
        orc.run(
            root / "graphs" / "expert.yaml",
            root / "examples" / "expert.jsonl",
            transport=fake,
            params={"failed_judgment": "refrence"},
        )
    said = str(refused.value)
    assert "param 'failed_judgment' for node 'expert' args.failed_judgment" in said
    assert "'refrence' does not fit 'failed_judgment'" in said
    assert fake.requests == []
    ok = orc.run(
        root / "graphs" / "expert.yaml",
        root / "examples" / "expert.jsonl",
        transport=orc.FakeTransport(),
        params={"failed_judgment": "keep_other"},
        limit=1,
    )
    assert ok.manifest.status == "complete" and ok.manifest.counts.examples_ok == 1
