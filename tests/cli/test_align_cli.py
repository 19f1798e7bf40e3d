"""`orchestrator align` against the fake HTTP server: the JSON the issue names, the plain
summary, a written graph that `validate` accepts, and the exit codes of what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, write_graph, write_rows
from typer.testing import CliRunner

from orchestrator.cli import app

TRUTH = {f"e{i:02d}": (2 if i % 2 else 9) for i in range(30)}


def _respond(body: dict) -> Reply:
    """Right when shown example turns, always 5 without them."""
    if is_canary(body):
        return schema_responder(body)
    key = str(body["messages"][-1]["content"]).rsplit(" ", 1)[-1]
    return Reply(content=json.dumps({"score": TRUTH[key] if len(body["messages"]) > 1 else 5}))


def _files(tmp_path: Path, graph: dict | None = None) -> tuple[Path, Path, Path]:
    path = write_graph(tmp_path / "g", graph or judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": k, "text": f"t {k}"} for k in TRUTH])
    labels = write_rows(tmp_path / "l.jsonl", [{"id": k, "score": v} for k, v in TRUTH.items()])
    return path, data, labels


def _args(files: tuple[Path, Path, Path], out: Path, *more: str) -> list[str]:
    graph, data, labels = files
    return [
        "align", str(graph), "--data", str(data), "--labels", str(labels), "--node", "judge",
        "--out", str(out), "--shots", "0,2", "--folds", "3", "--metric", "accuracy",
        "--cache", str(out.parent / "cache.sqlite"), *more,
    ]  # fmt: skip


def test_json_has_the_fields_the_issue_names_and_the_graph_validates(tmp_path: Path) -> None:
    files = _files(tmp_path)
    with FakeServer(_respond) as server:
        url = ["--base-url", server.base_url, "--structured", "server"]
        result = CliRunner().invoke(app, _args(files, tmp_path / "out", *url, "--format", "json"))
        assert result.exit_code == 0, result.output
        found = json.loads(result.stdout)
        plain = CliRunner().invoke(app, _args(files, tmp_path / "out", *url))
    assert found["metric"] == "accuracy"
    assert found["baseline"]["test"]["value"] == 0.0 and found["aligned"]["test"]["value"] == 1.0
    assert len(found["baseline"]["test"]["ci"]) == 2 and len(found["aligned"]["test"]["ci"]) == 2
    assert len(found["shots"]) == 2 and len(found["test_ids"]) == 9
    assert found["graph"] == str(tmp_path / "out" / "graph.yaml") and found["verdict"] == "better"
    assert plain.exit_code == 0 and "better" in plain.output and "graph:" in plain.output
    valid = CliRunner().invoke(app, ["validate", found["graph"]])
    assert valid.exit_code == 0 and "judge-aligned" in valid.output


def test_a_node_with_several_fields_needs_field(tmp_path: Path) -> None:
    graph = judge_graph()
    graph["nodes"]["judge"]["output"]["reason"] = {"type": "string"}
    result = CliRunner().invoke(app, _args(_files(tmp_path, graph), tmp_path / "out"))
    assert result.exit_code == 1
    assert "--field" in result.output and "score, reason" in result.output


def test_bad_options_exit_1_with_a_message(tmp_path: Path) -> None:
    files = _files(tmp_path)
    for more, said in (
        (["--format", "xml"], "--format"),
        (["--metric", "f1"], "metric"),
        (["--shots", "a,b"], "--shots"),
        (["--variant", "colour=red"], "colour"),
        (["--test-share", "1.5"], "test_share"),
    ):
        result = CliRunner().invoke(app, _args(files, tmp_path / "out", *more))
        assert result.exit_code == 1, (more, result.output)
        assert said in result.output, (more, result.output)


# -- issue 35 item 4: --out never replaces the user's files ---------------------------------


def _one_line_refusal(result: object, *said: str) -> str:
    output = str(getattr(result, "output", "")).strip()
    assert getattr(result, "exit_code", None) == 1, output
    assert len(output.splitlines()) == 1 and "Traceback" not in output, output
    for part in said:
        assert part in output, output
    return output


def test_out_at_the_graphs_own_folder_is_refused_and_the_graph_kept(tmp_path: Path) -> None:
    files = _files(tmp_path)
    graph = files[0]
    mine = graph.read_text() + "# my notes\n"
    graph.write_text(mine)
    with FakeServer(_respond) as server:
        url = ["--base-url", server.base_url, "--structured", "server"]
        for more in ([], ["--overwrite"]):
            result = CliRunner().invoke(app, _args(files, graph.parent, *url, *more))
            _one_line_refusal(result, str(graph), "reads")
        assert server.requests == []
    assert graph.read_text() == mine
    assert sorted(p.name for p in graph.parent.iterdir()) == ["graph.yaml", "prompts"]


def test_out_at_a_folder_of_yours_is_refused_and_nothing_replaced(tmp_path: Path) -> None:
    """A folder holding a hand-written graph.yaml and prompts/j.jinja, the names the
    aligned folder uses: both used to be replaced."""
    files = _files(tmp_path)
    yours = tmp_path / "yours"
    (yours / "prompts").mkdir(parents=True)
    (yours / "graph.yaml").write_text("name: mine\n")
    (yours / "prompts" / "j.jinja").write_text("my prompt")
    with FakeServer(_respond) as server:
        url = ["--base-url", server.base_url, "--structured", "server"]
        result = CliRunner().invoke(app, _args(files, yours, *url))
        _one_line_refusal(result, "is not empty", "manifest.json", "choose another --out")
        result = CliRunner().invoke(app, _args(files, yours, *url, "--overwrite"))
        _one_line_refusal(result, "nothing was deleted")
        assert server.requests == []
    assert (yours / "graph.yaml").read_text() == "name: mine\n"
    assert (yours / "prompts" / "j.jinja").read_text() == "my prompt"
    assert sorted(p.name for p in yours.rglob("*")) == ["graph.yaml", "j.jinja", "prompts"]


def test_its_own_folder_is_written_again_and_overwrite_keeps_your_files(tmp_path: Path) -> None:
    files = _files(tmp_path)
    out = tmp_path / "out"
    out.mkdir()  # an empty folder is fine
    with FakeServer(_respond) as server:
        url = ["--base-url", server.base_url, "--structured", "server"]
        first = CliRunner().invoke(app, _args(files, out, *url))
        assert first.exit_code == 0, first.output
        assert json.loads((out / "manifest.json").read_text())["written_by"] == "orchestrator align"
        (out / "notes.txt").write_text("mine")
        stale = out / "runs" / "stale-run"
        stale.mkdir()
        again = CliRunner().invoke(app, _args(files, out, *url))  # resumes, as before
        assert again.exit_code == 0, again.output
        assert stale.is_dir()
        fresh = CliRunner().invoke(app, _args(files, out, *url, "--overwrite"))
        assert fresh.exit_code == 0, fresh.output
    assert not stale.exists()  # runs/ was the command's own: replaced
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "graph.yaml").is_file() and (out / "alignment.json").is_file()
