"""The engine against the fake server: structured output, retries, failures, cache, resume,
foreach/when, sandboxing and bad rows."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, results, run_graph, trace_records, user_text, write_graph, write_rows

import orchestrator as orc
from orchestrator import GraphError, RetryPolicy, RunFolderError

JUDGE_OUT = {"reason": "string", "score": {"type": "integer", "min": 1, "max": 10}}
GRAPH: dict[str, Any] = {
    "name": "judge",
    "inputs": ["text"],
    "defaults": {"temperature": 0.0, "max_tokens": 100, "retries": 2},
    "nodes": {"judge": {"kind": "llm", "prompt": "judge.jinja", "output": JUDGE_OUT}},
    "outputs": {"score": "judge.score", "reason": "judge.reason"},
}
TEMPLATES = {"judge.jinja": "Rate this text.\n<<{{ text }}>>"}


def good(score: int = 7) -> Reply:
    return Reply(content=json.dumps({"reason": "fine", "score": score}))


def by_text(replies: dict[str, Any], default: Any = None):
    """Responder that picks a reply by which row text the prompt contains."""

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        # All messages: a re-ask ends with our feedback, the row text is further up.
        text = "\n".join(m["content"] for m in body["messages"])
        for key, reply in replies.items():
            if f"<<{key}>>" in text:
                return reply(body) if callable(reply) else reply
        return default(body) if callable(default) else (default or good())

    return respond


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", GRAPH, TEMPLATES)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(4)])


def quick_retries(timeout: float = 120.0) -> RetryPolicy:
    """The default retry budget without the backoff sleeps (the tests count tries, not
    seconds); `timeout` is the whole-reply deadline."""
    return RetryPolicy(timeout=timeout, backoff_first=0.0, jitter=0.0)


def judge_requests(server: FakeServer) -> list[dict[str, Any]]:
    return [b for b in server.requests if not is_canary(b)]


def test_schema_reaches_server_and_results_stream(graph: Path, data: Path, tmp_path: Path):
    with FakeServer(by_text({}, lambda b: good(int(user_text(b)[-3]) + 1))) as server:
        outcome = run_graph(graph, data, tmp_path / "run", server.base_url)
        url = server.base_url
    body = judge_requests(server)[0]
    schema = body["response_format"]["json_schema"]["schema"]
    assert body["response_format"]["type"] == "json_schema"
    assert schema["properties"]["score"] == {
        "maximum": 10,
        "minimum": 1,
        "title": "Score",
        "type": "integer",
    }
    assert schema["required"] == ["reason", "score"]
    got = results(tmp_path / "run")
    assert {k: v["score"] for k, v in got.items()} == {"e0": 1, "e1": 2, "e2": 3, "e3": 4}
    assert all(r["status"] == "ok" for r in got.values())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["counts"]["examples_ok"] == 4 and manifest["status"] == "complete"
    assert manifest["means"]["score"] == pytest.approx(2.5)
    assert manifest["servers"][f"{url} fake-model"]["structured_output"] == "server"
    assert outcome.summary["means"]["score"] == pytest.approx(2.5)


def test_malformed_json_is_reasked_with_the_error(graph: Path, data: Path, tmp_path: Path):
    state = {"n": 0}

    def flaky(body: dict[str, Any]) -> Reply:
        state["n"] += 1
        if state["n"] == 1:
            return Reply(content='{"reason": "x", "score": 11}')  # out of range
        return good(5)

    with FakeServer(by_text({"t0": flaky})) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    e0 = [b for b in judge_requests(server) if "<<t0>>" in b["messages"][0]["content"]]
    assert len(e0) == 2
    feedback = e0[1]["messages"]
    assert feedback[-2] == {"role": "assistant", "content": '{"reason": "x", "score": 11}'}
    assert (
        "score" in feedback[-1]["content"] and "less than or equal to 10" in feedback[-1]["content"]
    )
    assert results(tmp_path / "run")["e0"]["score"] == 5
    rows = _trace_rows(tmp_path / "run", "e0")
    assert [a["kind"] for a in rows[0]["attempts"]] == ["invalid", "ok"]


def _trace_rows(run: Path, example: str) -> list[dict[str, Any]]:
    return trace_records(run / "traces.sqlite", example)


def test_server_errors_and_timeouts_are_retried(graph: Path, data: Path, tmp_path: Path):
    calls = {"t1": 0, "t2": 0}

    def fail_once(key: str, reply: Reply):
        def respond(body: dict[str, Any]) -> Reply:
            calls[key] += 1
            return reply if calls[key] == 1 else good(3)

        return respond

    replies = {
        "t1": fail_once("t1", Reply(status=500)),
        "t2": fail_once("t2", Reply(delay=3.0, content="late")),
    }
    with FakeServer(by_text(replies)) as server:
        run_graph(
            graph, data, tmp_path / "run", server.base_url, timeout=1.0, retry=quick_retries(1.0)
        )
    got = results(tmp_path / "run")
    assert got["e1"]["status"] == "ok" and got["e2"]["status"] == "ok"
    assert calls == {"t1": 2, "t2": 2}
    kinds = [a["kind"] for a in _trace_rows(tmp_path / "run", "e1")[0]["attempts"]]
    assert kinds == ["transport", "ok"]
    assert "HTTP 500" in _trace_rows(tmp_path / "run", "e1")[0]["attempts"][0]["error"]
    assert "timed out" in _trace_rows(tmp_path / "run", "e2")[0]["attempts"][0]["error"]


def test_exhausted_budget_fails_only_that_example(graph: Path, data: Path, tmp_path: Path):
    bad = Reply(content="this is not json")
    with FakeServer(by_text({"t2": bad})) as server:
        outcome = run_graph(graph, data, tmp_path / "run", server.base_url)
    got = results(tmp_path / "run")
    assert got["e2"]["status"] == "failed"
    assert "judge" in got["e2"]["error"] and "3 attempts" in got["e2"]["error"]
    assert [r["status"] for k, r in got.items() if k != "e2"] == ["ok"] * 3
    assert outcome.manifest["counts"]["examples_failed"] == 1
    assert (
        len(
            [
                b
                for b in judge_requests(server)
                if "<<t2>>" in user_text(b) or "<<t2>>" in b["messages"][0]["content"]
            ]
        )
        == 3
    )


def test_truncated_reply_is_reasked_with_more_tokens(graph: Path, data: Path, tmp_path: Path):
    seen: list[int] = []

    def respond(body: dict[str, Any]) -> Reply:
        seen.append(body["max_tokens"])
        if len(seen) == 1:
            return Reply(content='{"reason": "cut', finish_reason="length")
        return good(4)

    with FakeServer(by_text({"t0": respond})) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    assert seen == [100, 200]
    assert results(tmp_path / "run")["e0"]["score"] == 4
    kinds = [a["kind"] for a in _trace_rows(tmp_path / "run", "e0")[0]["attempts"]]
    assert kinds == ["truncated", "ok"]


def test_second_run_is_served_from_cache(graph: Path, data: Path, tmp_path: Path):
    cache = tmp_path / "shared-cache.sqlite"
    with FakeServer(by_text({})) as server:
        run_graph(graph, data, tmp_path / "run1", server.base_url, cache=cache)
        first = len(judge_requests(server))
        outcome = run_graph(graph, data, tmp_path / "run2", server.base_url, cache=cache)
        assert len(judge_requests(server)) == first == 4
    assert outcome.manifest["counts"]["cache_hits"] == 4
    assert outcome.manifest["counts"]["requests"] == 1  # the canary only
    assert results(tmp_path / "run2") == results(tmp_path / "run1")


def test_resume_after_interrupt_requests_nothing_finished(graph: Path, tmp_path: Path):
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(6)])
    release = threading.Event()

    def hang(body: dict[str, Any]) -> Reply:
        release.wait(10)
        return good(9)

    out = tmp_path / "run"
    with FakeServer(by_text({"t5": hang})) as server:

        async def interrupted() -> None:
            task = asyncio.create_task(
                orc.arun(graph, data, out=out, base_url=server.base_url, cache=False)
            )
            for _ in range(200):
                await asyncio.sleep(0.05)
                if (
                    out.joinpath("results.jsonl").exists()
                    and len(out.joinpath("results.jsonl").read_text().splitlines()) == 5
                ):
                    break
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(interrupted())
        release.set()
        assert len(results(out)) == 5
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "interrupted"
        before = len(judge_requests(server))
        # No cache at all: only the trace/results of the run folder prevent re-requests.
        outcome = run_graph(graph, data, out, server.base_url, use_cache=False)
        after = judge_requests(server)[before:]
    # Only the unfinished example reaches the server again (a transport-level retry of its
    # one call may add a request; a finished example never does).
    assert after and all("<<t5>>" in user_text(b) for b in after)
    assert outcome.manifest["counts"]["examples_resumed"] == 5
    assert len(results(out)) == 6 and results(out)["e5"]["score"] == 9


def test_resume_reuses_finished_nodes_of_unfinished_example(tmp_path: Path):
    graph_spec = {
        "name": "two",
        "inputs": ["text"],
        "nodes": {
            "first": {"kind": "llm", "prompt": "a.jinja", "output": JUDGE_OUT},
            "second": {"kind": "llm", "prompt": "b.jinja", "output": JUDGE_OUT},
        },
        "outputs": {"score": "second.score"},
    }
    graph = write_graph(
        tmp_path / "g",
        graph_spec,
        {
            "a.jinja": "step one <<{{ text }}>>",
            "b.jinja": "step two {{ first.score }} <<{{ text }}>>",
        },
    )
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "only", "text": "x"}])

    def second_fails(body: dict[str, Any]) -> Reply:
        return Reply(status=400) if "step two" in user_text(body) else good(2)

    with FakeServer(by_text({}, second_fails)) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, use_cache=False)
        assert results(tmp_path / "run")["only"]["status"] == "failed"
        server.responder = by_text({}, lambda b: good(6))
        before = len(judge_requests(server))
        run_graph(graph, data, tmp_path / "run", server.base_url, use_cache=False)
        again = judge_requests(server)[before:]
    assert [("step two" in user_text(b)) for b in again] == [True]
    assert results(tmp_path / "run")["only"] == {"id": "only", "status": "ok", "score": 6}


def test_other_graph_in_existing_folder_is_refused(graph: Path, data: Path, tmp_path: Path):
    other = write_graph(tmp_path / "g2", {**GRAPH, "name": "other"}, TEMPLATES)
    with FakeServer(by_text({})) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
        with pytest.raises(RunFolderError, match="graph changed"):
            run_graph(other, data, tmp_path / "run", server.base_url)
        run_graph(other, data, tmp_path / "run", server.base_url, overwrite=True)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["graph"]["name"] == "other"


def test_foreach_and_when(tmp_path: Path):
    spec = {
        "name": "fan",
        "inputs": ["items"],
        "nodes": {
            "check": {
                "kind": "llm",
                "prompt": "check.jinja",
                "foreach": "items",
                "as": "it",
                "when": "it.keep",
                "output": {"ok": "boolean"},
            },
            "gate": {
                "kind": "llm",
                "prompt": "gate.jinja",
                "when": "false",
                "output": {"ok": "boolean"},
            },
            "count": {
                "kind": "compute",
                "function": "identity",
                "args": {"value": "check | select | list | length"},
            },
        },
        "outputs": {"checks": "check", "count": "count", "gate": "gate"},
    }
    graph = write_graph(
        tmp_path / "g",
        spec,
        {"check.jinja": "item {{ it_index }}: {{ it.word }}", "gate.jinja": "never"},
    )
    data = write_rows(
        tmp_path / "rows.jsonl",
        [
            {
                "id": "a",
                "items": [
                    {"word": "x", "keep": True},
                    {"word": "y", "keep": False},
                    {"word": "z", "keep": True},
                ],
            }
        ],
    )

    def respond(body: dict[str, Any]) -> Reply:
        return (
            Reply(content=json.dumps({"ok": "x" in user_text(body)}))
            if not is_canary(body)
            else schema_responder(body)
        )

    with FakeServer(respond) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    prompts = sorted(user_text(b) for b in server.requests if not is_canary(b))
    assert prompts == ["item 0: x", "item 2: z"]
    row = results(tmp_path / "run")["a"]
    assert row["checks"] == [{"ok": True}, None, {"ok": False}]
    assert row["gate"] is None and row["count"] == 2
    statuses = [(r["node"], r["item"], r["status"]) for r in _trace_rows(tmp_path / "run", "a")]
    assert ("check", 1, "skipped") in statuses and ("gate", -1, "skipped") in statuses


def test_dataset_text_stays_literal_and_sandbox_refuses_internals(tmp_path: Path):
    graph = write_graph(tmp_path / "g", GRAPH, TEMPLATES)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "x", "text": "{{ 7*7 }} {% if 1 %}"}])
    with FakeServer(by_text({}, lambda b: good())) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    assert user_text(judge_requests(server)[0]).endswith("<<{{ 7*7 }} {% if 1 %}>>")

    evil = write_graph(
        tmp_path / "evil",
        GRAPH,
        {"judge.jinja": "{{ text.__class__.__mro__[1].__subclasses__() }}"},
    )
    # Refused when the graph is checked, before the run folder or any request exists.
    with FakeServer(by_text({}, lambda b: good())) as server:
        with pytest.raises(GraphError, match="Python internal"):
            run_graph(evil, data, tmp_path / "run2", server.base_url)
        assert server.requests == []
    assert not (tmp_path / "run2").exists()


def test_bad_rows_fail_with_row_number_and_others_run(graph: Path, tmp_path: Path):
    data = tmp_path / "rows.jsonl"
    data.write_text(
        '{"id": "a", "text": "fine"}\n{"id": "b"}\nnot json\n{"id": "c", "text": "fine too"}\n'
    )
    with FakeServer(by_text({}, lambda b: good())) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    got = results(tmp_path / "run")
    assert got["a"]["status"] == "ok" and got["c"]["status"] == "ok"
    assert got["b"]["status"] == "failed" and ":2:" in got["b"]["error"]
    assert "text" in got["b"]["error"]
    assert got["row-3"]["status"] == "failed" and "not valid JSON" in got["row-3"]["error"]
    # A repeated id is not a bad row but bad data: the run is refused before any request
    # (tests/data/test_whole_data_checks.py).


def test_canary_falls_back_when_server_ignores_schema(graph: Path, data: Path, tmp_path: Path):
    def ignores_schema(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return Reply(content="The sea is calm today.")
        return Reply(content='Sure! ```json\n{"reason": "ok", "score": 6}\n```')

    with FakeServer(ignores_schema) as server:
        outcome = run_graph(graph, data, tmp_path / "run", server.base_url)
    canaries = [b for b in server.requests if is_canary(b)]
    assert len(canaries) == 3
    served = next(iter(outcome.manifest["servers"].values()))
    assert served["structured_output"] == "prompt"
    judge = judge_requests(server)[0]
    assert "response_format" not in judge
    assert "JSON Schema" in judge["messages"][-1]["content"]
    assert all(r["score"] == 6 for r in results(tmp_path / "run").values())


def test_noisy_canary_is_not_proof_of_ignoring(graph: Path, data: Path, tmp_path: Path):
    state = {"canary": 0}

    def noisy(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            state["canary"] += 1
            return Reply(content="oops") if state["canary"] == 1 else schema_responder(body)
        return good()

    with FakeServer(noisy) as server:
        outcome = run_graph(graph, data, tmp_path / "run", server.base_url)
    assert next(iter(outcome.manifest["servers"].values()))["structured_output"] == "server"


def test_n_samples_become_a_list(tmp_path: Path):
    spec = {
        **GRAPH,
        "params": {"k": 3},
        "nodes": {
            "judge": {
                "kind": "llm",
                "prompt": "judge.jinja",
                "output": JUDGE_OUT,
                "n": "params.k",
                "temperature": 0.7,
            }
        },
        "outputs": {"scores": "judge | map(attribute='score') | list"},
    }
    graph = write_graph(tmp_path / "g", spec, TEMPLATES)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "t"}])

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        return Reply(
            samples=[json.dumps({"reason": "r", "score": s}) for s in range(1, body["n"] + 1)]
        )

    with FakeServer(respond) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    assert judge_requests(server)[0]["n"] == 3
    assert results(tmp_path / "run")["a"]["scores"] == [1, 2, 3]


def test_aggregates_run_once_with_the_runs_params(tmp_path: Path):
    spec = {
        **GRAPH,
        "params": {"offset": 1},
        "aggregates": {
            "total": {
                "function": "identity",
                "args": {"value": "(results | map(attribute='score') | sum) + params.offset"},
            }
        },
    }
    graph = write_graph(tmp_path / "g", spec, TEMPLATES)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(3)])
    with FakeServer(by_text({}, lambda b: good(2))) as server:
        outcome = run_graph(graph, data, tmp_path / "run", server.base_url, params={"offset": 100})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["total"] == 106 == outcome.summary["total"]
    assert summary["counts"]["examples_ok"] == 3


def test_server_that_fails_every_request_is_a_clear_error(graph: Path, data: Path, tmp_path: Path):
    from orchestrator.errors import ServerError

    with (
        FakeServer(lambda body: Reply(status=503)) as server,
        pytest.raises(ServerError, match=r"first request .* failed after 5 tries: HTTP 503"),
    ):
        run_graph(graph, data, tmp_path / "run", server.base_url, retry=quick_retries())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "error" and "HTTP 503" in manifest["error"]


def test_sampling_value_from_an_expression_is_range_checked_per_call(tmp_path: Path):
    spec = {**GRAPH, "params": {"samples": 1}, "defaults": {"n": "params.samples"}}
    graph = write_graph(tmp_path / "g", spec, TEMPLATES)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "e0", "text": "t0"}])
    with FakeServer(by_text({}, lambda b: good(2))) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, params={"samples": 0})
        assert judge_requests(server) == []
    line = results(tmp_path / "run")["e0"]
    assert line["status"] == "failed"
    assert line["error"] == "node 'judge': n `params.samples`: n must be at least 1, got 0"
