"""Batch files (issue 17): export the frontier as OpenAI batch JSONL, answer it (here with
the fake transport, as a batch runner would), import, and go on until nothing waits; the
results equal a live run's, and a reply lands under the live call's cache key."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.batch import (
    BatchFolder,
    BatchImportError,
    BatchJob,
    ExportOutcome,
    export_round,
    import_output,
)
from orchestrator.batch.rounds import ROUND_CONCURRENCY
from orchestrator.cli import app
from orchestrator.providers.fake import FakeAnswer, FakeRequest, FakeTransport

MODEL = "judge-m"

# Two steps in a chain, plus a branch beside them: extract → judge, and style.
GRAPH = {
    "name": "two_step",
    "inputs": ["text"],
    "defaults": {"temperature": 0.0, "max_tokens": 60},
    "nodes": {
        "extract": {
            "kind": "llm",
            "prompt": "extract.jinja",
            "output": {"topic": {"type": "string"}},
        },
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {"score": {"type": "integer", "min": 1, "max": 10}},
        },
        "style": {
            "kind": "llm",
            "prompt": "style.jinja",
            "output": {"score": {"type": "integer", "min": 1, "max": 10}},
        },
    },
    "outputs": {"topic": "extract.topic", "score": "judge.score", "style": "style.score"},
}
TEMPLATES = {
    "extract.jinja": "Topic of: {{ text }}",
    "judge.jinja": "Rate the text on {{ extract.topic }}: {{ text }}",
    "style.jinja": "Rate the style: {{ text }}",
}
ROWS = [{"id": f"r{i}", "text": f"text number {i}"} for i in range(4)]


def respond(request: FakeRequest) -> str:
    """A deterministic judge: the answer depends on the prompt, so a mix-up would show."""
    text = request.messages[-1]["content"]
    if text.startswith("Topic of"):
        return json.dumps({"topic": "topic of " + text.rsplit(" ", 1)[-1]})
    return json.dumps({"score": 1 + len(text) % 10})


Answer = Callable[[FakeRequest], "str | FakeAnswer"]


def answer_file(requests: Path, output: Path, answer: Answer = respond) -> int:
    """Play a batch runner: answer every line of `requests` with the fake transport into
    `output` in vLLM run_batch's output format; the number of lines answered."""
    transport = FakeTransport(answer, models=[MODEL])
    lines = []
    for raw in requests.read_text().splitlines():
        line = json.loads(raw)
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        reply = asyncio.run(transport.answer("batch", line["body"]))
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.content},
                "finish_reason": c.finish_reason,
                "logprobs": None,
            }
            for i, c in enumerate(reply.choices)
        ]
        usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
        completion = {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 0,
            "model": line["body"]["model"],
            "choices": choices,
            "usage": usage,
        }
        lines.append(
            {
                "id": "vllm-x",
                "custom_id": line["custom_id"],
                "response": {"status_code": 200, "request_id": "r", "body": completion},
                "error": None,
            }
        )
    output.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return len(lines)


def setup(tmp_path: Path, **job: Any) -> tuple[BatchFolder, BatchJob]:
    graph = write_graph(tmp_path / "g", GRAPH, TEMPLATES)
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    # A live run's FakeTransport reports each model's own name as its root.
    spec = BatchJob(
        graph=graph, data=data, model=MODEL, cache=tmp_path / "cache.sqlite", server_root=MODEL
    )
    return BatchFolder(tmp_path / "batch"), spec.model_copy(update=job)


def export(folder: BatchFolder, job: BatchJob | None = None, out: Path | None = None) -> Any:
    return asyncio.run(export_round(folder, job, out))


def do_import(folder: BatchFolder, output: Path, partial: bool = False) -> Any:
    return asyncio.run(import_output(folder, output, partial))


def rounds_until_done(
    folder: BatchFolder, job: BatchJob, answer: Answer = respond
) -> list[ExportOutcome]:
    """export → answer → import until nothing waits; every round's export outcome."""
    done = [export(folder, job)]
    while done[-1].round is not None:
        assert len(done) < 10, "the rounds do not converge"
        (requests,) = done[-1].files
        answer_file(requests, done[-1].outputs[0], answer)
        do_import(folder, done[-1].outputs[0])
        done.append(export(folder))
    return done


def live(tmp_path: Path, job: BatchJob, transport: FakeTransport, **kwargs: Any) -> orc.RunResult:
    kwargs.setdefault("cache", False)
    return orc.run(
        job.graph, job.data, model=job.model, structured="server", transport=transport, **kwargs
    )


def outputs(result: orc.RunResult) -> dict[str, dict[str, Any]]:
    return {line.id: {"status": line.status, **line.outputs} for line in result.results}


def folder_outputs(folder: Path | None) -> dict[str, dict[str, Any]]:
    assert folder is not None
    return outputs(orc.RunResult(orc.Manifest(), orc.Summary(), folder=folder))


def test_rounds_follow_the_graph_and_end_with_a_live_runs_results(tmp_path: Path) -> None:
    folder, job = setup(tmp_path)
    rounds = rounds_until_done(folder, job)
    # Round 1: extract and style of every example (the branch beside the chain comes in
    # the same round); round 2: judge, which needs extract; then nothing waits.
    assert [r.round for r in rounds] == [1, 2, None]
    first = [json.loads(x) for x in rounds[0].files[0].read_text().splitlines()]
    assert len(first) == 2 * len(ROWS)
    assert {x["body"]["messages"][-1]["content"].split(":")[0] for x in first} == {
        "Topic of",
        "Rate the style",
    }
    assert rounds[0].state.waiting == len(ROWS) and rounds[0].state.failed == 0
    assert len(rounds[1].state.frontier) == len(ROWS)
    assert rounds[-1].state.ok == len(ROWS) and rounds[-1].state.waiting == 0

    final = export(folder, out=tmp_path / "run")
    assert final.run_folder == tmp_path / "run"
    from_batch = folder_outputs(final.run_folder)
    expected = outputs(live(tmp_path, job, FakeTransport(respond, models=[MODEL])))
    assert from_batch == expected
    assert all(v["status"] == "ok" and v["topic"].startswith("topic of") for v in expected.values())


def test_a_request_body_is_the_live_one_with_the_schema(tmp_path: Path) -> None:
    folder, job = setup(tmp_path)
    done = export(folder, job)
    exported = {
        json.dumps(json.loads(x)["body"], sort_keys=True)
        for x in done.files[0].read_text().splitlines()
    }
    transport = FakeTransport(respond, models=[MODEL])
    live(tmp_path, job, transport)
    sent = {json.dumps(r.body, sort_keys=True) for r in transport.node_requests}
    assert exported < sent  # the first frontier, byte for byte as a live run sends it
    body = json.loads(next(iter(exported)))
    assert body["model"] == MODEL
    assert body["response_format"]["type"] == "json_schema"

    prompt_folder, prompt_job = setup(tmp_path / "p", structured="prompt")
    line = json.loads(export(prompt_folder, prompt_job).files[0].read_text().splitlines()[0])
    assert "response_format" not in line["body"]
    assert "JSON Schema" in line["body"]["messages"][-1]["content"]


def test_an_imported_reply_is_under_the_key_a_live_call_uses(tmp_path: Path) -> None:
    folder, job = setup(tmp_path)
    rounds_until_done(folder, job)
    cache = job.cache
    assert cache is not None

    def never(request: FakeRequest) -> str:
        wrong = (
            {"topic": "WRONG"} if "topic" in (request.schema or {})["properties"] else {"score": 10}
        )
        return json.dumps(wrong)

    # A live run with the same model and prompts finds every reply in the cache.
    silent = FakeTransport(never, models=[MODEL])
    result = live(tmp_path, job, silent, cache=cache)
    assert silent.node_requests == []
    assert outputs(result) == outputs(live(tmp_path, job, FakeTransport(respond, models=[MODEL])))

    # Another model asks again: no reply of MODEL is taken for it.
    other = FakeTransport(never, models=["other-model"])
    result = orc.run(
        job.graph, job.data, model="other-model", structured="server", transport=other, cache=cache
    )
    assert len(other.node_requests) == 3 * len(ROWS)
    assert {line.outputs["topic"] for line in result.results} == {"WRONG"}

    # A new prompt version asks again too.
    changed = write_graph(
        tmp_path / "g2", GRAPH, {**TEMPLATES, "style.jinja": "Rate the style, v2: {{ text }}"}
    )
    newer = FakeTransport(respond, models=[MODEL])
    live(tmp_path, job.model_copy(update={"graph": changed}), newer, cache=cache)
    asked = [r.messages[-1]["content"] for r in newer.node_requests]
    assert len(asked) == len(ROWS) and all(a.startswith("Rate the style, v2") for a in asked)


def wrong(request: FakeRequest) -> str:
    """Answers no batch gave: a result holding one was not taken from the cache."""
    schema = request.schema or {}
    return json.dumps({"topic": "WRONG"} if "topic" in schema["properties"] else {"score": 10})


def test_imported_replies_answer_only_the_weights_the_batch_names(tmp_path: Path) -> None:
    folder, job = setup(tmp_path, server_root="/models/judge", max_model_len=2048)
    rounds_until_done(folder, job)
    saved = json.loads((folder.path / "batch.json").read_text())
    assert (saved["server_root"], saved["max_model_len"]) == ("/models/judge", 2048)
    expected = outputs(live(tmp_path, job, FakeTransport(respond, models=[MODEL])))

    # A live server reporting the batch's weights: every reply from the cache.
    same = FakeTransport(wrong, models=[MODEL], root="/models/judge", max_model_len=2048)
    assert outputs(live(tmp_path, job, same, cache=job.cache)) == expected
    assert same.node_requests == []
    # Other weights under the same model name (or another context length) ask again.
    for root, length in (("/models/other", 2048), ("/models/judge", 4096)):
        other = FakeTransport(wrong, models=[MODEL], root=root, max_model_len=length)
        result = live(tmp_path, job, other, cache=job.cache)
        assert len(other.node_requests) == 3 * len(ROWS)
        assert {line.outputs["topic"] for line in result.results} == {"WRONG"}


def test_a_batch_named_by_server_id_answers_a_live_run_with_that_id(tmp_path: Path) -> None:
    folder, job = setup(tmp_path, server_root=None, server_id="judge-ckpt-7")
    rounds_until_done(folder, job)
    named = FakeTransport(wrong, models=[MODEL])
    live(tmp_path, job, named, cache=job.cache, server_id="judge-ckpt-7")
    assert named.node_requests == []
    unnamed = FakeTransport(wrong, models=[MODEL])
    live(tmp_path, job, unnamed, cache=job.cache)
    assert len(unnamed.node_requests) == 3 * len(ROWS)


def test_a_batch_job_that_names_no_weights_is_refused(tmp_path: Path) -> None:
    folder, job = setup(tmp_path, server_root=None)
    with pytest.raises(orc.OrchestratorError, match="--server-root PATH"):
        export(folder, job)
    assert not (folder.path / "batch.json").exists()


def test_a_folder_exported_before_jobs_named_weights_takes_them_on_import(
    tmp_path: Path,
) -> None:
    folder, job = setup(tmp_path)
    done = export(folder, job)
    saved = json.loads((folder.path / "batch.json").read_text())
    for key in ("server_root", "max_model_len", "server_id"):
        del saved[key]  # as batch.json was written before jobs named their weights
    (folder.path / "batch.json").write_text(json.dumps(saved))
    output = done.outputs[0]
    answer_file(done.files[0], output)
    runner = CliRunner()
    refused = runner.invoke(app, ["batch", "import", str(output)])
    assert refused.exit_code == 1 and "--server-root" in refused.output
    replies = folder.replies()
    assert len(replies) == 0  # nothing kept from a job that names no weights
    replies.close()
    named = runner.invoke(app, ["batch", "import", str(output), "--server-root", MODEL])
    assert named.exit_code == 0, named.output
    assert json.loads((folder.path / "batch.json").read_text())["server_root"] == MODEL
    other = runner.invoke(app, ["batch", "import", str(output), "--server-root", "/models/x"])
    assert other.exit_code == 1 and "/models/x" in other.output
    assert json.loads((folder.path / "batch.json").read_text())["server_root"] == MODEL


def malformed_style(request: FakeRequest) -> str:
    """Out of range the first time a style is asked; valid for its re-ask (which carries
    the rejected reply and the error), as a model that corrects itself."""
    if request.messages[0]["content"].startswith("Rate the style") and len(request.messages) == 1:
        return '{"score": 42}'
    return respond(request)


def test_a_malformed_reply_is_reasked_in_the_next_export(tmp_path: Path) -> None:
    folder, job = setup(tmp_path)
    first = export(folder, job)
    answer_file(first.files[0], first.outputs[0], malformed_style)
    imported = do_import(folder, first.outputs[0])
    reasks = [r for r in imported.state.frontier if len(r.body["messages"]) > 1]
    assert len(reasks) == len(ROWS)  # one re-ask per style call, with the error fed back
    assert all("rejected" in r.body["messages"][-1]["content"] for r in reasks)
    assert all(r.body["messages"][-2]["content"] == '{"score": 42}' for r in reasks)
    assert imported.state.failed == 0
    rounds = rounds_until_done(folder, job, malformed_style)
    assert rounds[-1].state.ok == len(ROWS)
    from_batch = folder_outputs(export(folder, out=tmp_path / "o").run_folder)
    transport = FakeTransport(malformed_style, models=[MODEL])
    assert from_batch == outputs(live(tmp_path, job, transport))
    assert len(transport.node_requests) == 4 * len(ROWS)  # the live run re-asked as well


def test_deferred_examples_are_not_failed_even_with_on_error_record(tmp_path: Path) -> None:
    graph = {
        **GRAPH,
        "nodes": {**GRAPH["nodes"], "extract": {**GRAPH["nodes"]["extract"], "on_error": "record"}},
        "outputs": {"score": "judge.score"},
    }
    folder, job = setup(tmp_path)
    job = job.model_copy(update={"graph": write_graph(tmp_path / "rec", graph, TEMPLATES)})
    done = export(folder, job)
    # extract waits; had it been "recorded" as failed, judge would have been asked already.
    assert all(
        not r.body["messages"][-1]["content"].startswith("Rate the text")
        for r in done.state.frontier
    )
    assert done.state.failed == 0 and done.state.waiting == len(ROWS)
    assert not (tmp_path / "run").exists()


def test_the_same_request_in_two_examples_is_exported_once(tmp_path: Path) -> None:
    folder, job = setup(tmp_path)
    rows = write_rows(tmp_path / "twice.jsonl", [{"id": f"c{i}", "text": "same"} for i in range(3)])
    done = export(folder, job.model_copy(update={"data": rows}))
    assert len(done.state.frontier) == 2  # extract and style, each once for three examples


@pytest.fixture
def exported(tmp_path: Path) -> tuple[BatchFolder, ExportOutcome]:
    folder, job = setup(tmp_path)
    done = export(folder, job)
    answer_file(done.files[0], done.outputs[0])
    return folder, done


def rewrite(path: Path, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(x) + "\n" for x in change(lines)))


def import_error(folder: BatchFolder, output: Path, partial: bool = False) -> str:
    with pytest.raises(BatchImportError) as caught:
        do_import(folder, output, partial)
    # Nothing of a refused file is kept: the same requests are exported again.
    assert len(export(folder).state.frontier) == 2 * len(ROWS)
    return str(caught.value)


def test_an_unknown_custom_id_names_its_line(exported: tuple[BatchFolder, ExportOutcome]) -> None:
    folder, done = exported
    rewrite(done.outputs[0], lambda xs: [*xs[:2], {**xs[2], "custom_id": "nope"}, *xs[3:]])
    message = import_error(folder, done.outputs[0], partial=True)
    assert f"{done.outputs[0]}:3: custom_id nope was never exported" in message


def test_an_error_line_names_its_line_and_partial_keeps_the_rest(
    exported: tuple[BatchFolder, ExportOutcome],
) -> None:
    folder, done = exported
    refused = {
        "status_code": 400,
        "request_id": "r",
        "body": None,
    }
    error = {"error": {"message": "max_tokens too large", "code": 400}}
    rewrite(done.outputs[0], lambda xs: [{**xs[0], "response": refused, "error": error}, *xs[1:]])
    message = import_error(folder, done.outputs[0])
    assert f"{done.outputs[0]}:1:" in message and "HTTP 400: max_tokens too large" in message
    assert "--partial" in message
    kept = do_import(folder, done.outputs[0], partial=True)
    assert kept.imported == 2 * len(ROWS) - 1
    again = export(folder)
    first_id = json.loads(done.files[0].read_text().splitlines()[0])["custom_id"]
    assert first_id in {r.custom_id for r in again.state.frontier}  # asked again


def test_missing_lines_are_named(exported: tuple[BatchFolder, ExportOutcome]) -> None:
    folder, done = exported
    rewrite(done.outputs[0], lambda xs: xs[:-2])
    message = import_error(folder, done.outputs[0])
    assert "2 request(s) of round-001.requests.jsonl have no line here" in message


def test_a_reply_from_another_model_is_refused(exported: tuple[BatchFolder, ExportOutcome]) -> None:
    folder, done = exported

    def swap(xs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        xs[1]["response"]["body"]["model"] = "other-model"
        return xs

    rewrite(done.outputs[0], swap)
    message = import_error(folder, done.outputs[0], partial=True)
    assert f"{done.outputs[0]}:2:" in message
    assert f"from model 'other-model' but the request asked '{MODEL}'" in message


def test_garbage_duplicates_and_wrong_sample_counts_are_named(
    exported: tuple[BatchFolder, ExportOutcome],
) -> None:
    folder, done = exported

    def spoil(xs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        xs[2]["response"]["body"]["choices"] *= 2
        xs[3]["response"]["body"]["choices"] = "none"
        return [*xs, xs[0]]

    rewrite(done.outputs[0], spoil)
    with done.outputs[0].open("a") as handle:
        handle.write("{not json\n")
    message = import_error(folder, done.outputs[0], partial=True)
    out = done.outputs[0]
    assert f"{out}:3: custom_id" in message and "2 choice(s), the request asked for 1" in message
    assert f"{out}:4: custom_id" in message and "not a chat completion (the reply has no" in message
    assert (
        f"{out}:{2 * len(ROWS) + 1}: custom_id" in message and "answered twice (line 1" in message
    )
    assert f"{out}:{2 * len(ROWS) + 2}: not a batch output line" in message


def test_cli_export_then_import(tmp_path: Path) -> None:
    folder, job = setup(tmp_path)
    runner = CliRunner()
    args = ["batch", "export", str(job.graph), "--data", str(job.data), "--model", MODEL]
    args += ["--dir", str(folder.path), "--cache", str(job.cache)]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1 and "--server-root" in refused.output
    first = runner.invoke(app, [*args, "--server-root", "/models/judge", "--max-model-len", "2048"])
    assert first.exit_code == 0, first.output
    requests = folder.path / "round-001.requests.jsonl"
    assert f"wrote {requests}" in first.output and "vllm run-batch -i" in first.output
    assert f"--model /models/judge --served-model-name {MODEL} --max-model-len 2048" in (
        first.output.replace("\n", "")
    )
    answer_file(requests, folder.path / "round-001.output.jsonl")
    imported = runner.invoke(app, ["batch", "import", str(folder.path / "round-001.output.jsonl")])
    assert imported.exit_code == 0, imported.output
    assert f"Imported {2 * len(ROWS)} replies" in imported.output
    assert f"{len(ROWS)} requests to ask next" in imported.output
    again = runner.invoke(app, ["batch", "export", "--dir", str(folder.path)])
    assert again.exit_code == 0 and "round-002.requests.jsonl" in again.output

    (folder.path / "bad.jsonl").write_text('{"custom_id": "x", "response": null}\n')
    bad = runner.invoke(app, ["batch", "import", str(folder.path / "bad.jsonl")])
    assert bad.exit_code == 1 and "bad.jsonl:1: custom_id x was never exported" in bad.output


def test_deferred_examples_are_not_reported_as_lost_tasks(tmp_path: Path) -> None:
    """asyncio would log every deferred example's task as "exception never retrieved" (those
    that end while the engine still feeds rows: more rows than its window)."""
    folder, job = setup(tmp_path)
    many = [{"id": f"m{i}", "text": str(i)} for i in range(4 * ROUND_CONCURRENCY + 100)]
    rows = write_rows(tmp_path / "many.jsonl", many)
    reported: list[dict[str, Any]] = []

    async def main() -> ExportOutcome:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(context)
        )
        done = await export_round(folder, job.model_copy(update={"data": rows}))
        gc.collect()  # finalize what is left of the round's tasks
        await asyncio.sleep(0)
        return done

    assert len(asyncio.run(main()).state.frontier) == 2 * len(many)
    assert reported == []


def test_the_next_round_runs_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """batch.json keeps the graph and data as absolute paths, not relative to where the
    first export ran."""
    folder, job = setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    relative = job.model_copy(
        update={"graph": job.graph.relative_to(tmp_path), "data": job.data.relative_to(tmp_path)}
    )
    first = export(folder, relative)
    saved = json.loads((folder.path / "batch.json").read_text())
    assert Path(saved["graph"]) == job.graph and Path(saved["data"]) == job.data
    (requests,) = first.files
    answer_file(requests, first.outputs[0])
    do_import(folder, first.outputs[0])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = export(folder)
    assert again.round == 2


def test_a_once_node_is_one_request_in_the_first_round_then_the_rows_follow(
    tmp_path: Path,
) -> None:
    """A `once: true` node is the first round's only request; the rows run after it is
    answered, and the results equal a live run's."""
    spec = {
        **GRAPH,
        "nodes": {**GRAPH["nodes"], "extract": {**GRAPH["nodes"]["extract"], "once": True}},
    }
    templates = {**TEMPLATES, "extract.jinja": "Topic of: the whole dataset"}
    folder, job = setup(tmp_path)
    graph = write_graph(tmp_path / "g_once", spec, templates)
    job = job.model_copy(update={"graph": graph})
    rounds = rounds_until_done(folder, job)
    assert [r.round for r in rounds] == [1, 2, None]
    assert len(rounds[0].state.frontier) == 1 and rounds[0].state.examples == 0
    assert len(rounds[1].state.frontier) == 2 * len(ROWS)  # judge and style of every row
    final = export(folder, out=tmp_path / "run")
    expected = outputs(live(tmp_path, job, FakeTransport(respond, models=[MODEL])))
    assert folder_outputs(final.run_folder) == expected
    assert {v["topic"] for v in expected.values()} == {"topic of dataset"}


def test_once_per_nodes_are_one_request_per_group_in_the_first_round(tmp_path: Path) -> None:
    """A `once_per: group` node is asked once per distinct group in the first round (beside
    the rows' own first requests); the rows that read it follow, and the results equal a
    live run's."""
    spec = {
        **GRAPH,
        "inputs": ["text", "group"],
        "nodes": {**GRAPH["nodes"], "extract": {**GRAPH["nodes"]["extract"], "once_per": "group"}},
    }
    templates = {**TEMPLATES, "extract.jinja": "Topic of: the group {{ group }}"}
    rows = [{**row, "group": f"g{i % 2}"} for i, row in enumerate(ROWS)]
    folder, job = setup(tmp_path)
    graph = write_graph(tmp_path / "g_per", spec, templates)
    data = write_rows(tmp_path / "rows_per.jsonl", rows)
    job = job.model_copy(update={"graph": graph, "data": data})
    rounds = rounds_until_done(folder, job)
    assert [r.round for r in rounds] == [1, 2, None]
    first = [json.loads(x) for x in rounds[0].files[0].read_text().splitlines()]
    asked = sorted(x["body"]["messages"][-1]["content"] for x in first)
    topics = [text for text in asked if text.startswith("Topic of")]
    assert topics == ["Topic of: the group g0", "Topic of: the group g1"]
    assert len(asked) == 2 + len(ROWS)  # the two groups, and style of every row
    assert len(rounds[1].state.frontier) == len(ROWS)  # judge of every row
    final = export(folder, out=tmp_path / "run")
    expected = outputs(live(tmp_path, job, FakeTransport(respond, models=[MODEL])))
    assert folder_outputs(final.run_folder) == expected
    assert {v["topic"] for v in expected.values()} == {"topic of g0", "topic of g1"}
