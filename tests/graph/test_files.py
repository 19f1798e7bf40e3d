"""A graph's `files:` and an LLM node's `shots:`: data that travels with the graph, obeys its
prompts folder, joins its identity, and reaches the model as example turns or a variable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, schema_responder
from helpers import is_canary, judge_graph, results, run_graph, write_graph, write_rows

import orchestrator as orc
from orchestrator.errors import GraphError
from orchestrator.store.folder import snapshot_graph, snapshot_prompts

SHOTS = [
    {"id": "s1", "inputs": {"text": "dull and long"}, "output": {"score": 2}},
    {"id": "s2", "inputs": {"text": "sharp and warm"}, "output": {"score": 9}},
]


def _shot_graph(**node: Any) -> dict[str, Any]:
    graph = judge_graph()
    graph["files"] = {"shots": "shots.json"}
    graph["nodes"]["judge"].update({"shots": "files.shots", **node})
    return graph


def _folder(tmp_path: Path, graph: dict[str, Any], **extra: str) -> Path:
    templates = {"judge.jinja": "Rate: {{ text }}", "shots.json": json.dumps(SHOTS), **extra}
    return write_graph(tmp_path, graph, templates)


def _judged(server: FakeServer) -> int:
    return sum(not is_canary(body) for body in server.requests)


def _problems(path: Path) -> str:
    with pytest.raises(GraphError) as caught:
        orc.load_graph(path)
    return str(caught.value)


def test_each_shot_is_a_user_turn_and_an_answer_before_the_row(tmp_path: Path) -> None:
    path = _folder(tmp_path, _shot_graph())
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "the row"}])
    with FakeServer(schema_responder) as server:
        run_graph(path, data, tmp_path / "run", server.base_url)
        body = server.requests[-1]
    turns = [(m["role"], m["content"]) for m in body["messages"]]
    assert turns == [
        ("user", "Rate: dull and long"),
        ("assistant", '{"score": 2}'),
        ("user", "Rate: sharp and warm"),
        ("assistant", '{"score": 9}'),
        ("user", "Rate: the row"),
    ]
    assert results(tmp_path / "run")["a"]["status"] == "ok"


def test_a_template_that_reads_shots_lays_them_out_itself(tmp_path: Path) -> None:
    prompt = (
        "{% for s in shots %}[{{ s.inputs.text }} => {{ s.output.score }}]{% endfor %} {{ text }}"
    )
    plain = _folder(tmp_path / "with", _shot_graph(), **{"judge.jinja": prompt})
    bare = judge_graph()  # no `shots:` key: the same template renders with none
    none = write_graph(tmp_path / "without", bare, {"judge.jinja": prompt})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "row"}])
    with FakeServer(schema_responder) as server:
        run_graph(plain, data, tmp_path / "run1", server.base_url)
        run_graph(none, data, tmp_path / "run2", server.base_url)
        first, second = [b for b in server.requests if not is_canary(b)][-2:]
    assert [m["content"] for m in first["messages"]] == [
        "[dull and long => 2][sharp and warm => 9] row"
    ]
    assert [m["content"] for m in second["messages"]] == [" row"]


def test_a_shot_turn_never_reads_the_current_row(tmp_path: Path) -> None:
    # The template reads `topic`, which the shots do not carry: the render fails and says
    # so, instead of filling the example turn with the row's own topic.
    graph = _shot_graph()
    graph["inputs"] = ["text", "topic"]
    path = _folder(tmp_path, graph, **{"judge.jinja": "{{ topic }}: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "x", "topic": "SECRET"}])
    with FakeServer(schema_responder) as server:
        run_graph(path, data, tmp_path / "run", server.base_url)
        assert not server.requests or all(
            "SECRET" not in json.dumps(b["messages"][:-1]) for b in server.requests
        )
    line = results(tmp_path / "run")["a"]
    assert line["status"] == "failed"
    assert "topic" in line["error"] and "undefined" in line["error"]


def test_file_content_is_part_of_the_graph_and_its_cache_keys(tmp_path: Path) -> None:
    path = _folder(tmp_path, _shot_graph())
    before = orc.load_graph(path).content_hash
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "t"}])
    with FakeServer(schema_responder) as server:
        first = run_graph(path, data, tmp_path / "run1", server.base_url)
        changed = [dict(SHOTS[0], output={"score": 3}), SHOTS[1]]
        (tmp_path / "prompts" / "shots.json").write_text(json.dumps(changed))
        assert orc.load_graph(path).content_hash != before
        sent = _judged(server)
        second = run_graph(path, data, tmp_path / "run2", server.base_url)
        # Same cache file, new shots: the answer is asked again, not served from the cache.
        assert _judged(server) == sent + 1
    assert first.manifest["graph"]["hash"] != second.manifest["graph"]["hash"]


def test_the_run_folder_snapshot_keeps_the_file(tmp_path: Path) -> None:
    path = _folder(tmp_path, _shot_graph())
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "t"}])
    with FakeServer(schema_responder) as server:
        run_graph(path, data, tmp_path / "run", server.base_url)
    (tmp_path / "prompts" / "shots.json").unlink()  # the original is gone ...
    run = tmp_path / "run"
    snapshot = orc.load_graph(snapshot_graph(run) or run, prompts_dir=snapshot_prompts(run))
    manifest = json.loads((run / "manifest.json").read_text())
    # ... and the run folder still holds the same graph, shots and all.
    assert snapshot.content_hash == manifest["graph"]["hash"]
    assert json.loads(snapshot.templates["shots.json"]) == SHOTS


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("../outside.json", "leaves the prompts folder"),
        ("/etc/passwd", "absolute path"),
        ("missing.json", "not found under"),
        ("broken.json", "not JSON"),
        ("broken.jsonl", "line 2 is not JSON"),
    ],
)
def test_a_file_that_cannot_be_read_is_named(tmp_path: Path, path: str, expected: str) -> None:
    (tmp_path / "outside.json").write_text("[]")
    graph = _shot_graph()
    graph["files"] = {"shots": path}
    extra = {"broken.json": "[1,", "broken.jsonl": '{"a": 1}\n{oops\n'}
    message = _problems(_folder(tmp_path, graph, **extra))
    assert "files.shots" in message and expected in message, message


def test_a_link_out_of_the_prompts_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text('["key"]')
    path = _folder(tmp_path / "g", _shot_graph())
    (tmp_path / "g" / "prompts" / "shots.json").unlink()
    (tmp_path / "g" / "prompts" / "shots.json").symlink_to(tmp_path / "secret.json")
    message = _problems(path)
    assert "files.shots" in message and "outside the prompts folder" in message


def test_jsonl_and_text_files_and_their_names(tmp_path: Path) -> None:
    graph = judge_graph()
    graph["files"] = {"rubric": "rubric.txt", "rows": "rows.jsonl"}
    graph["nodes"]["judge"]["prompt"] = "r.jinja"
    template = "{{ files.rubric }}|{{ files.rows | length }}|{{ files.rows[1].k }}"
    extra = {"r.jinja": template, "rubric.txt": "be fair", "rows.jsonl": '{"k":1}\n\n{"k":2}\n'}
    path = write_graph(tmp_path, graph, extra)
    data = write_rows(tmp_path / "d.jsonl", [{"id": "a", "text": "t"}])
    with FakeServer(schema_responder) as server:
        run_graph(path, data, tmp_path / "run", server.base_url)
        assert server.requests[-1]["messages"][-1]["content"] == "be fair|2|2"
    bad = dict(graph, files={"not a name": "rubric.txt"})
    assert "not a plain name" in _problems(write_graph(tmp_path / "b", bad, extra))


def test_a_render_cannot_change_a_shared_file(tmp_path: Path) -> None:
    graph = _shot_graph()
    graph["nodes"]["judge"]["prompt"] = "m.jinja"
    template = "{{ files.shots.append(1) }}{{ text }}"
    path = _folder(tmp_path, graph, **{"m.jinja": template})
    data = write_rows(tmp_path / "d.jsonl", [{"id": "a", "text": "t"}])
    with FakeServer(schema_responder) as server:
        run_graph(path, data, tmp_path / "run", server.base_url)
    line = results(tmp_path / "run")["a"]
    assert line["status"] == "failed" and "unsafe" in line["error"].lower(), line


def test_a_graph_dict_takes_its_files_with_its_templates() -> None:
    graph = orc.CompiledGraph.from_dict(
        _shot_graph(), {"judge.jinja": "Rate: {{ text }}", "shots.json": json.dumps(SHOTS)}
    )
    assert graph.templates["shots.json"] == json.dumps(SHOTS)
    messages = graph.nodes["judge"].messages({"text": "row", "params": {}, "run": {}})  # type: ignore[attr-defined]
    assert len(messages) == 5


def test_a_bad_shot_is_named(tmp_path: Path) -> None:
    graph = _shot_graph()
    path = _folder(tmp_path, graph, **{"shots.json": json.dumps([{"inputs": {"text": "x"}}])})
    data = write_rows(tmp_path / "d.jsonl", [{"id": "a", "text": "t"}])
    with FakeServer(schema_responder) as server:
        run_graph(path, data, tmp_path / "run", server.base_url)
    error = results(tmp_path / "run")["a"]["error"]
    assert "item 0" in error and "`output`" in error


def test_a_worker_compiles_the_files_from_what_it_was_sent(tmp_path: Path) -> None:
    from orchestrator.kinds.graphs import compile_source

    graph = orc.load_graph(_folder(tmp_path, _shot_graph()))
    (tmp_path / "prompts" / "shots.json").unlink()  # a worker reads no file of the graph
    again = compile_source(graph.source, graph.templates, path=graph.path, label="sent")
    assert again.content_hash == graph.content_hash
    context = {"text": "row", "params": {}, "run": {}}
    assert again.nodes["judge"].messages(context) == graph.nodes["judge"].messages(context)  # type: ignore[attr-defined]
