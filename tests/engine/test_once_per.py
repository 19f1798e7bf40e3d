"""`once_per: FIELD` nodes (issue 35, item 15): MT-Bench's reference-guided grading asks the
judge for its own answer once per question, while the data holds several systems' answers
per question. The reference is asked once per distinct question with or without the cache
and with workers, every row of a question reads it, a resumed run does not ask a finished
group again, and `validate` refuses a once_per node that reads anything else of a row."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, results, run_graph, trace_records, user_text, write_graph, write_rows

import orchestrator as orc
from orchestrator import GraphError
from orchestrator.graph.once import group_example

QUESTIONS = ["q0", "q1", "q2", "q3"]
SYSTEMS = ["s0", "s1", "s2"]
GRAPH: dict[str, Any] = {
    "name": "mtbench_reference",
    "inputs": ["question", "answer"],
    "defaults": {"temperature": 0.0, "max_tokens": 100},
    "nodes": {
        "reference": {
            "kind": "llm",
            "once_per": "question",
            "prompt": "reference.jinja",
            "output": {"answer": "string"},
        },
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {"score": {"type": "integer", "min": 1, "max": 10}},
        },
    },
    "outputs": {"score": "judge.score", "reference": "reference.answer"},
}
TEMPLATES = {
    "reference.jinja": "Answer this question yourself: <<{{ question }}>>",
    "judge.jinja": "Grade. Question <<{{ question }}>> reference [{{ reference.answer }}] "
    "answer {{ answer }}",
}


def respond(hang: threading.Event | None = None, hang_on: str = "", fail_on: str = "") -> Any:
    """The reference is "ref-Q" after 50 ms (so a question's rows overlap while it is asked);
    the judge scores by the answer's system number. A reference whose prompt names `hang_on`
    waits for `hang`; one naming `fail_on` gets a 400."""

    def answer(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        text = user_text(body)
        if text.startswith("Answer this question"):
            question = text.split("<<")[1].split(">>")[0]
            if hang is not None and question == hang_on:
                hang.wait(10)
            if question == fail_on:
                return Reply(status=400)
            time.sleep(0.05)
            return Reply(json.dumps({"answer": f"ref-{question}"}))
        system = int(text.rsplit("answer a-", 1)[1].split("-")[0][1:])
        return Reply(json.dumps({"score": system + 1}))

    return answer


def references(server: FakeServer) -> Counter[str]:
    """Reference requests by question."""
    return Counter(
        user_text(b).split("<<")[1].split(">>")[0]
        for b in server.requests
        if not is_canary(b) and user_text(b).startswith("Answer this question")
    )


def judged(server: FakeServer) -> list[str]:
    return [user_text(b) for b in server.requests if user_text(b).startswith("Grade.")]


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", GRAPH, TEMPLATES)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    # By system, then question: the rows of one question are spread over the data.
    rows = [
        {"id": f"{q}-{s}", "question": q, "answer": f"a-{s}-{q}"}
        for s in SYSTEMS
        for q in QUESTIONS
    ]
    return write_rows(tmp_path / "rows.jsonl", rows)


def _expected() -> dict[str, dict[str, Any]]:
    return {
        f"{q}-{s}": {"id": f"{q}-{s}", "status": "ok", "score": i + 1, "reference": f"ref-{q}"}
        for i, s in enumerate(SYSTEMS)
        for q in QUESTIONS
    }


@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
def test_reference_is_asked_once_per_question(graph: Path, data: Path, tmp_path: Path, cache):
    out = tmp_path / "run"
    with FakeServer(respond()) as server:
        ran = run_graph(graph, data, out, server.base_url, use_cache=cache)
    assert references(server) == dict.fromkeys(QUESTIONS, 1)
    prompts = judged(server)
    assert len(prompts) == len(QUESTIONS) * len(SYSTEMS)
    # Every row's judge read its own question's reference.
    for prompt in prompts:
        question = prompt.split("<<")[1].split(">>")[0]
        assert f"reference [ref-{question}]" in prompt
    assert ran.manifest["status"] == "complete"
    assert results(out) == _expected()
    for q in QUESTIONS:
        found = trace_records(out / "traces.sqlite", group_example("question", q), "reference")
        assert [(r["status"], r["value"]) for r in found] == [("ok", {"answer": f"ref-{q}"})]


def test_two_workers_ask_once_per_question(graph: Path, data: Path, tmp_path: Path):
    """At concurrency 2 rows go out in chunks of 8: each worker gets rows of every
    question, and still no worker asks a reference of its own."""
    out = tmp_path / "run"
    with FakeServer(respond()) as server:
        ran = run_graph(
            graph, data, out, server.base_url, use_cache=False, workers=2, concurrency=2
        )
    assert ran.manifest["status"] == "complete"
    assert [w["examples"] > 0 for w in ran.manifest["workers"]] == [True, True]
    assert references(server) == dict.fromkeys(QUESTIONS, 1)
    assert len(judged(server)) == len(QUESTIONS) * len(SYSTEMS)
    # The owner's reference requests are counted with the workers' own.
    assert ran.manifest["counts"]["requests"] == len(server.requests)
    assert results(out) == _expected()


def test_a_failed_reference_fails_its_rows_and_is_asked_again_on_resume(
    graph: Path, data: Path, tmp_path: Path
):
    out = tmp_path / "run"
    with FakeServer(respond(fail_on="q2")) as server:
        ran = run_graph(graph, data, out, server.base_url, use_cache=False)
        first = results(out)
        assert references(server) == dict.fromkeys(QUESTIONS, 1)
        failed = {key for key, line in first.items() if line["status"] != "ok"}
        assert failed == {f"q2-{s}" for s in SYSTEMS}
        assert all("'reference'" in first[key]["error"] for key in failed)
        assert ran.manifest["status"] == "complete"
        before = len(server.requests)
        server.responder = respond()
        again = run_graph(graph, data, out, server.base_url, use_cache=False)
        later = server.requests[before:]
    asked = Counter(
        "reference" if user_text(b).startswith("Answer") else "judge"
        for b in later
        if not is_canary(b)
    )
    assert asked == {"reference": 1, "judge": len(SYSTEMS)}
    assert again.manifest["status"] == "complete"
    assert results(out) == _expected()


def test_resume_after_an_interruption_does_not_ask_finished_groups(
    graph: Path, data: Path, tmp_path: Path
):
    """q3's reference hangs; the run is stopped once every other row has finished. The
    same run again asks q3's reference and its rows' judges, nothing else."""
    out = tmp_path / "run"
    hang = threading.Event()
    others = len(QUESTIONS[:-1]) * len(SYSTEMS)
    with FakeServer(respond(hang, hang_on="q3")) as server:

        async def interrupted() -> None:
            task = asyncio.create_task(
                orc.arun(graph, data, out=out, base_url=server.base_url, cache=False)
            )
            lines = out / "results.jsonl"
            for _ in range(200):
                await asyncio.sleep(0.05)
                if lines.exists() and len(lines.read_text().splitlines()) == others:
                    break
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(interrupted())
        hang.set()
        assert len(results(out)) == others
        assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
        before = len(server.requests)
        ran = run_graph(graph, data, out, server.base_url, use_cache=False)
        later = server.requests[before:]
    asked_again = Counter(
        user_text(b).split("<<")[1].split(">>")[0]
        for b in later
        if not is_canary(b) and user_text(b).startswith("Answer")
    )
    assert asked_again == {"q3": 1}
    assert sum(user_text(b).startswith("Grade.") for b in later) == len(SYSTEMS)
    assert ran.manifest["status"] == "complete"
    assert results(out) == _expected()


def _problems(tmp_path: Path, nodes: dict[str, Any], templates: dict[str, str]) -> dict:
    spec = json.loads(json.dumps(GRAPH))
    spec["inputs"] = ["question", "answer", "category"]
    spec["nodes"].update(nodes)
    path = write_graph(tmp_path / "g", spec, {**TEMPLATES, **templates})
    with pytest.raises(GraphError) as caught:
        orc.load_graph(path)
    assert all(p.file == str(path) for p in caught.value.problems)
    return {(p.node, p.field): p.message for p in caught.value.problems}


def test_validate_refuses_a_once_per_node_reading_other_row_fields(tmp_path: Path):
    found = _problems(
        tmp_path,
        {
            "reference": {**GRAPH["nodes"]["reference"], "prompt": "bad.jinja"},
            "by_category": {
                "kind": "compute",
                "once_per": "category",
                "function": "identity",
                "args": {"value": "category"},
            },
            "mixed": {
                "kind": "compute",
                "once_per": "question",
                "function": "identity",
                "args": {"value": "[judge.score, by_category]"},
            },
            "cross": {
                "kind": "compute",
                "once_per": "question",
                "function": "identity",
                "args": {"value": "by_category"},
            },
        },
        {"bad.jinja": "Answer <<{{ question }}>> like {{ answer }}"},
    )
    assert "once per distinct 'question'" in found["reference", "prompt"]
    assert "row input 'answer'" in found["reference", "prompt"]
    assert "per-row node 'judge'" in found["mixed", "args.value"]
    assert "once_per node 'by_category'" in found["cross", "args.value"]
    assert "'category'" in found["cross", "args.value"]


def test_validate_refuses_a_once_per_field_that_is_no_input_and_once_with_once_per(
    tmp_path: Path,
):
    found = _problems(
        tmp_path,
        {
            "topic": {
                "kind": "compute",
                "once_per": "topic_name",
                "function": "identity",
                "args": {"value": "params"},
            },
            "both": {
                "kind": "compute",
                "once": True,
                "once_per": "question",
                "function": "identity",
                "args": {"value": "question"},
            },
            "steps": {
                "kind": "compute",
                "once": True,
                "function": "identity",
                "args": {"value": "reference"},
            },
        },
        {},
    )
    assert "'topic_name'" in found["topic", "once_per"]
    assert "not an input" in found["topic", "once_per"]
    assert "not both" in found["both", "once_per"]
    assert "once_per node 'reference'" in found["steps", "args.value"]


def test_a_once_per_node_may_read_its_field_params_once_nodes_and_its_group(tmp_path: Path):
    spec = json.loads(json.dumps(GRAPH))
    spec["params"] = {"style": "brief"}
    spec["nodes"]["rubric"] = {
        "kind": "compute",
        "once": True,
        "function": "identity",
        "args": {"value": "params.style"},
    }
    spec["nodes"]["reference"]["prompt"] = "ok.jinja"
    spec["nodes"]["length"] = {
        "kind": "compute",
        "once_per": "question",
        "function": "identity",
        "args": {"value": "[reference.answer, question, rubric]"},
    }
    spec["outputs"]["length"] = "length"
    path = write_graph(
        tmp_path / "g",
        spec,
        {**TEMPLATES, "ok.jinja": "{{ params.style }} {{ rubric }} <<{{ question }}>>"},
    )
    graph = orc.load_graph(path)
    assert graph.nodes["length"].deps == {"reference", "rubric"}
    assert graph.nodes["reference"].deps == {"rubric"}


DOC = Path(__file__).parent.parent.parent / "docs" / "graph-format.md"


def test_the_docs_example_asks_one_reference_per_question(tmp_path: Path):
    """The `once_per` example of docs/graph-format.md, its templates as its comments give
    them, over two questions with two answers each: two references, four gradings."""
    block = re.search(r"### `once_per`.*?```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert block, "the once_per example moved; keep this test pointing at it"
    spec = yaml.safe_load(block.group(1))
    templates = dict(re.findall(r'prompt: (\S+)\s+# "(.*)"', block.group(1)))
    assert set(templates) == {"reference.jinja", "grade.jinja"}
    graph = write_graph(tmp_path / "g", spec, templates)
    rows = [{"id": f"{q}{a}", "question": q, "answer": a} for a in "xy" for q in ("Q1", "Q2")]
    data = write_rows(tmp_path / "rows.jsonl", rows)

    def answer(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        text = user_text(body)
        if text.startswith("Answer this question: "):
            return Reply(json.dumps({"answer": "mine to " + text.rsplit(" ", 1)[1]}))
        return Reply(json.dumps({"score": 7}))

    with FakeServer(answer) as server:
        ran = run_graph(graph, data, tmp_path / "run", server.base_url, use_cache=False)
    texts = [user_text(b) for b in server.requests if not is_canary(b)]
    assert sorted(t for t in texts if t.startswith("Answer")) == [
        "Answer this question: Q1",
        "Answer this question: Q2",
    ]
    assert len([t for t in texts if t.startswith("Reference:")]) == 4
    assert ran.manifest["status"] == "complete"
    assert {k: v["reference"] for k, v in results(tmp_path / "run").items()} == {
        row["id"]: f"mine to {row['question']}" for row in rows
    }
