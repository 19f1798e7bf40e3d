"""Which model and server each LLM node used (issue 26 item 9a): a jury's judges on their
own models and servers, named per node in `orchestrator trace`'s header and the report's."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import write_graph
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.report import build_report
from orchestrator.store.reader import RunReader

RUN_URL = "http://judges-a.test/v1"
OTHER_URL = "http://judges-b.test/v1"
JUDGE = {
    "kind": "llm",
    "prompt": "judge.jinja",
    "output": {"score": {"type": "integer", "min": 1, "max": 10}},
}
JURY = {
    "name": "jury",
    "inputs": ["text"],
    "defaults": {"temperature": 0.0, "max_tokens": 60},
    "nodes": {
        "judge_a": {**JUDGE, "model": "model-a"},
        "judge_b": {**JUDGE, "model": "model-b", "base_url": OTHER_URL},
    },
    "outputs": {"a": "judge_a.score", "b": "judge_b.score"},
}


def _jury_run(tmp_path: Path) -> Path:
    graph = write_graph(tmp_path, JURY, {"judge.jinja": "Rate: {{ text }}"})
    fake = orc.FakeTransport(models=["model-a", "model-b"], root="/weights/jury")
    out = tmp_path / "run"
    orc.run(
        graph,
        [{"id": f"r{i}", "text": f"t{i}"} for i in range(3)],
        out=out,
        base_url=RUN_URL,
        transport=fake,
        allow_servers=[OTHER_URL],
    )
    return out


def test_trace_and_report_name_each_nodes_model_and_server(tmp_path: Path) -> None:
    out = _jury_run(tmp_path)
    with RunReader(out).trace() as trace:
        served = trace.node_servers()
    assert [(s.node, s.model, s.server, s.runs) for s in served] == [
        ("judge_a", "model-a", RUN_URL, 3),
        ("judge_b", "model-b", OTHER_URL, 3),
    ]
    shown = CliRunner().invoke(app, ["trace", str(out)])
    assert shown.exit_code == 0, shown.output
    header = shown.output.split("example r")[0]
    assert "models and servers by node:" in header
    assert f"judge_a: model-a at {RUN_URL} (/weights/jury)" in header, header
    assert f"judge_b: model-b at {OTHER_URL} (/weights/jury)" in header, header
    html = build_report(out).read_text()
    row = re.search(r"<tr><th>models by node</th><td>(.*?)</td></tr>", html)
    assert row, "no models row in the report header"
    assert f"<b>judge_a</b>: model-a at {RUN_URL} (/weights/jury)" in row.group(1)
    assert f"<b>judge_b</b>: model-b at {OTHER_URL} (/weights/jury)" in row.group(1)
