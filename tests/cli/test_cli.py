"""The command line end to end against the fake server: run, summary, trace, CSV data."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary
from typer.testing import CliRunner

from orchestrator.cli import app

ROOT = Path(__file__).parents[2]


def test_run_pointwise_then_trace(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "run"
    with FakeServer(schema_responder) as server:
        result = runner.invoke(
            app,
            [
                "run",
                str(ROOT / "graphs/pointwise.yaml"),
                "--data",
                str(ROOT / "examples/pointwise.jsonl"),
                "--out",
                str(out),
                "--base-url",
                server.base_url,
                "--cache",
                str(tmp_path / "c.sqlite"),
            ],
        )
    assert result.exit_code == 0, result.output
    assert "examples ok / failed" in result.output and "6 / 0" in result.output
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6
    trace = runner.invoke(app, ["trace", str(out), "--example", "email-style-match"])
    assert trace.exit_code == 0, trace.output
    assert "judge" in trace.output and "score" in trace.output
    assert "Friday standup" in trace.output  # the rendered prompt, abridged or not
    assert "temperature=0.0 max_tokens=300" in trace.output
    assert (
        "schema enforced by the server, fields in order: content_reason, content, "
        "style_reason, style" in trace.output
    )
    # An id the run does not have is named as such, not "no node executions recorded".
    missing = runner.invoke(app, ["trace", str(out), "--example", "nope"])
    assert missing.exit_code == 1
    assert "no example 'nope' in" in missing.output and "(it has 6, e.g." in missing.output
    # Without --example it says which one it shows, and that there are others.
    first = runner.invoke(app, ["trace", str(out)])
    assert first.exit_code == 0, first.output
    assert "showing the first of 6 examples; pass --example ID for another" in first.output
    jsonl = runner.invoke(app, ["trace", str(out), "--format", "jsonl", "--node", "judge"])
    records = [json.loads(line) for line in jsonl.output.splitlines()]
    assert len(records) == 6 and all(r["node"] == "judge" for r in records)
    assert all(r["attempts"][-1]["kind"] == "ok" for r in records)
    assert all(next(iter(r["schema"]["properties"])) == "content_reason" for r in records)


def test_failed_examples_give_exit_code_2_and_csv_rows(tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_text("id,input,reference,output\na,req,ref text,out text\nb,req,BROKEN,out text\n")

    def respond(body: dict) -> Reply:
        if not is_canary(body) and "BROKEN" in body["messages"][1]["content"]:
            return Reply(content="{not json")
        return schema_responder(body)

    runner = CliRunner()
    with FakeServer(respond) as server:
        result = runner.invoke(
            app,
            [
                "run",
                str(ROOT / "graphs/pointwise.yaml"),
                "--data",
                str(data),
                "--out",
                str(tmp_path / "run"),
                "--base-url",
                server.base_url,
                "--no-cache",
            ],
        )
    assert result.exit_code == 2, result.output
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "run/results.jsonl").open())}
    assert rows["a"]["status"] == "ok" and rows["b"]["status"] == "failed"
    trace = runner.invoke(app, ["trace", str(tmp_path / "run")])
    assert "example b" in trace.output and "invalid" in trace.output


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "run",
            str(ROOT / "graphs/pointwise.yaml"),
            "--data",
            str(ROOT / "examples/pointwise.jsonl"),
            "--out",
            str(tmp_path / "run"),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--no-cache",
        ],
    )
    assert result.exit_code == 1
    assert "cannot list models" in result.output and "--base-url" in result.output


def test_shipped_protocol_by_name(tmp_path: Path, monkeypatch) -> None:
    """`orchestrator validate expert` finds the shipped graph from any folder (as it does
    from an installed wheel, where graphs/ lives inside the package)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["validate", "expert"])
    assert result.exit_code == 0, result.output
    assert "graph 'expert' is valid" in result.output
    missing = CliRunner().invoke(app, ["validate", "no_such_protocol"])
    assert missing.exit_code == 1


def test_trace_shows_data_and_prompts_as_sent(tmp_path: Path) -> None:
    """No Rich emoji codes, markup or highlighting: an audit view shows the bytes sent."""
    text = ":thumbs_up: root:x:0:0 [bold]x[/bold]"
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "e1", "text": text}) + "\n")
    graph = tmp_path / "graph.yaml"
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "judge.jinja").write_text("Rate [i]this[/i] :smile: {{ text }}")
    graph.write_text(
        json.dumps(
            {
                "name": "judge",
                "prompts": "prompts",
                "inputs": ["text"],
                "nodes": {
                    "judge": {
                        "kind": "llm",
                        "prompt": "judge.jinja",
                        "output": {"score": {"type": "integer", "min": 1, "max": 10}},
                    }
                },
                "outputs": {"score": "judge.score", "echo": "text"},
            }
        )
    )
    runner = CliRunner()
    out = tmp_path / "run"
    with FakeServer(schema_responder) as server:
        args = ["run", str(graph), "--data", str(data), "--out", str(out)]
        args += ["--base-url", server.base_url, "--cache", str(tmp_path / "c.sqlite")]
        done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    shown = runner.invoke(app, ["trace", str(out), "--example", "e1"])
    assert shown.exit_code == 0, shown.output
    assert f"Rate [i]this[/i] :smile: {text}" in shown.output
    assert "👍" not in shown.output and "😄" not in shown.output
    jsonl = runner.invoke(app, ["trace", str(out), "--format", "jsonl"])
    (record,) = [json.loads(line) for line in jsonl.output.splitlines()]
    assert record["messages"][-1]["content"] == f"Rate [i]this[/i] :smile: {text}"


def test_validate_counts_nodes_in_words(tmp_path: Path) -> None:
    """ "1 node", not "1 nodes" (issue 34 item 7); several stay plural."""
    from helpers import judge_graph, write_graph

    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    one = CliRunner().invoke(app, ["validate", str(graph)])
    assert one.exit_code == 0 and "is valid — 1 node (1 LLM)" in one.output, one.output
    many = CliRunner().invoke(app, ["validate", str(ROOT / "graphs/expert.yaml")])
    assert re.search(r"is valid — \d+ nodes \(", many.output), many.output


def test_validate_checks_every_graph_given_and_fails_if_one_is_broken(tmp_path: Path) -> None:
    """Several graphs in one command: each valid one said, each broken one's problems named
    by its file, the count of broken ones, exit 1; all valid, exit 0."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("nodes: {}\nfoo: 1\n", encoding="utf-8")
    runner = CliRunner()
    mixed = runner.invoke(app, ["validate", "pointwise", str(broken), "expert"])
    assert mixed.exit_code == 1, mixed.output
    assert "graph 'pointwise' is valid" in mixed.output
    assert "graph 'expert' is valid" in mixed.output
    assert f"{broken}: field 'foo': unknown key" in mixed.output
    assert f"problems in {broken}" in mixed.output
    assert "1 of 3 graphs has problems" in mixed.output
    fine = runner.invoke(app, ["validate", "pointwise", "aupel"])
    assert fine.exit_code == 0, fine.output
    assert fine.output.count("is valid") == 2 and "problems" not in fine.output


def test_a_finished_run_leaves_only_its_own_files(tmp_path: Path) -> None:
    """No `run.lock`, no SQLite `-wal`/`-shm` after a clean finish, nor after the readers
    (`trace`, `report`) opened the trace (issue 34 item 7); a resume still works after."""
    out = tmp_path / "run"
    command = [
        "run", str(ROOT / "graphs/pointwise.yaml"), "--data",
        str(ROOT / "examples/pointwise.jsonl"), "--out", str(out), "--no-cache",
    ]  # fmt: skip
    runner = CliRunner()
    with FakeServer(schema_responder) as server:
        done = runner.invoke(app, [*command, "--base-url", server.base_url, "--limit", "3"])
        assert done.exit_code == 0, done.output
        assert runner.invoke(app, ["trace", str(out)]).exit_code == 0
        assert runner.invoke(app, ["report", str(out)]).exit_code == 0
        left = sorted(p.name for p in out.iterdir())
        assert left == [
            "inputs.jsonl", "manifest.json", "report.html", "results.jsonl", "snapshot",
            "summary.json", "traces.sqlite",
        ]  # fmt: skip
        resumed = runner.invoke(app, [*command, "--base-url", server.base_url])
        assert resumed.exit_code == 0, resumed.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 6
    assert not {"run.lock", "traces.sqlite-wal", "traces.sqlite-shm"} & {
        p.name for p in out.iterdir()
    }
