"""Answers stay with the weights that gave them (issue 24, item 5): the response cache and the
run key know a server by what serves the model (vLLM's `root` with `max_model_len`, or a
`--server-id`, else its address), not by the model name alone.

Each test here failed on the code before: a second server serving other weights under the
same name was answered from the first one's replies, a folder resumed against other weights,
and replicas of different weights were mixed in one run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import (
    is_canary,
    judge_graph,
    orchestrator_command,
    run_graph,
    start_cli_run,
    write_graph,
    write_rows,
)

import orchestrator as orc
from orchestrator import RunFolderError
from orchestrator.errors import ServerError

PROMPTS = {"judge.jinja": "Rate this text.\n<<{{ text }}>>"}
ROWS = 4
WAIT = 30.0  # seconds a test waits for a server-side event before it fails


def scoring(score: int, gate: threading.Event | None = None) -> Callable[[dict], Reply]:
    """A judge that always gives `score` (so whose answer a result holds shows); with `gate`,
    each call takes up to 0.2 s until the gate opens."""

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        if gate is not None:
            gate.wait(0.2)
        return Reply(content=json.dumps({"score": score}))

    return respond


def node_requests(server: FakeServer) -> int:
    return sum(not is_canary(body) for body in server.requests)


def scores(out: Path) -> list[int]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return [json.loads(line)["score"] for line in lines]


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", judge_graph(), PROMPTS)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(ROWS)]
    return write_rows(tmp_path / "rows.jsonl", rows)


def test_other_weights_under_one_name_are_not_answered_from_the_cache(
    graph: Path, data: Path, tmp_path: Path
):
    cache = tmp_path / "cache.sqlite"
    with (
        FakeServer(scoring(3), model="judge", root="/models/a") as a,
        FakeServer(scoring(8), model="judge", root="/models/b") as b,
    ):
        first = run_graph(graph, data, tmp_path / "a", a.base_url, cache=cache)
        second = run_graph(graph, data, tmp_path / "b", b.base_url, cache=cache)
        asked_b = node_requests(b)
    assert first.manifest["counts"]["cache_hits"] == 0
    assert second.manifest["counts"]["cache_hits"] == 0
    assert asked_b == ROWS
    assert scores(tmp_path / "a") == [3] * ROWS
    assert scores(tmp_path / "b") == [8] * ROWS  # B's own answers, none of A's
    (server,) = second.manifest["servers"].values()
    assert server["identity"] == "/models/b (max_model_len 4096)"


def test_replicas_of_the_same_weights_share_the_cache(graph: Path, data: Path, tmp_path: Path):
    cache = tmp_path / "cache.sqlite"
    with (
        FakeServer(scoring(3), root="/models/a") as a,
        FakeServer(scoring(8), root="/models/a") as b,
    ):
        run_graph(graph, data, tmp_path / "a", a.base_url, cache=cache)
        again = run_graph(graph, data, tmp_path / "b", b.base_url, cache=cache)
        asked_b = node_requests(b)
    assert again.manifest["counts"]["cache_hits"] == ROWS and asked_b == 0
    assert scores(tmp_path / "b") == [3] * ROWS


def test_server_id_overrides_the_root(graph: Path, data: Path, tmp_path: Path):
    """Two checkpoints at one path look the same to vLLM; --server-id tells them apart,
    and the same --server-id makes two servers one."""
    cache = tmp_path / "cache.sqlite"
    with FakeServer(scoring(3)) as a, FakeServer(scoring(8)) as b:
        base = ["run", str(graph), "--data", str(data), "--cache", str(cache)]
        one = orchestrator_command(
            *base, "--out", str(tmp_path / "a"), "--base-url", a.base_url, "--server-id", "ckpt-1"
        )
        assert one.returncode == 0, one.stdout + one.stderr
        two = orchestrator_command(
            *base, "--out", str(tmp_path / "b"), "--base-url", b.base_url, "--server-id", "ckpt-2"
        )
        assert two.returncode == 0, two.stdout + two.stderr
        asked_b = node_requests(b)
        three = run_graph(graph, data, tmp_path / "c", b.base_url, cache=cache, server_id="ckpt-1")
        asked_after = node_requests(b)
    assert asked_b == ROWS and scores(tmp_path / "b") == [8] * ROWS
    assert three.manifest["counts"]["cache_hits"] == ROWS and asked_after == asked_b
    assert scores(tmp_path / "c") == [3] * ROWS
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["run_key"]["components"]["server judge"] == "ckpt-2"


def test_resuming_against_other_weights_is_refused_before_any_request(
    graph: Path, data: Path, tmp_path: Path
):
    out = tmp_path / "run"
    with FakeServer(root="/models/a") as server:
        run_graph(graph, data, out, server.base_url, limit=2)
        server.root = "/models/b"
        before = node_requests(server)
        with pytest.raises(
            RunFolderError,
            match=re.escape("server judge: /models/a (max_model_len 4096) → /models/b"),
        ):
            run_graph(graph, data, out, server.base_url)
        assert node_requests(server) == before


def test_a_single_server_at_another_address_is_another_server_even_with_the_same_root(
    graph: Path, data: Path, tmp_path: Path
):
    """The run key has always named one server by its URL (test_replicas); the identity is
    added to it, not put in its place, so that stays."""
    out = tmp_path / "run"
    with FakeServer(root="/models/a") as one, FakeServer(root="/models/a") as other:
        run_graph(graph, data, out, one.base_url, limit=2)
        with pytest.raises(RunFolderError, match=re.escape(f"endpoint judge: {one.base_url} →")):
            run_graph(graph, data, out, other.base_url)


def test_replicas_of_the_same_weights_resume_a_folder_other_weights_do_not(
    graph: Path, data: Path, tmp_path: Path
):
    out = tmp_path / "run"
    with FakeServer(root="/models/a") as a, FakeServer(root="/models/a") as b:
        run_graph(graph, data, out, [a.base_url, b.base_url], limit=2)
    with FakeServer(root="/models/a") as c, FakeServer(root="/models/a") as d:
        again = run_graph(graph, data, out, [c.base_url, d.base_url])
    assert again.manifest["resumed"] and again.manifest["counts"]["examples_resumed"] == 2
    with (
        FakeServer(root="/models/b") as e,
        FakeServer(root="/models/b") as f,
        pytest.raises(RunFolderError, match=re.escape("server judge: /models/a")),
    ):
        run_graph(graph, data, out, [e.base_url, f.base_url])


def test_replicas_of_different_weights_are_refused_at_start_naming_both(
    graph: Path, data: Path, tmp_path: Path
):
    with FakeServer(root="/models/a") as a, FakeServer(root="/models/b") as b:
        with pytest.raises(ServerError) as refused:
            run_graph(graph, data, tmp_path / "run", [a.base_url, b.base_url])
        assert node_requests(a) == node_requests(b) == 0
        message = str(refused.value)
        for part in (a.base_url, "/models/a", b.base_url, "/models/b", "--server-id"):
            assert part in message, message
    # The same two servers named as one by the user run.
    with FakeServer(root="/models/a") as a, FakeServer(root="/models/b") as b:
        done = run_graph(graph, data, tmp_path / "ok", [a.base_url, b.base_url], server_id="j")
    assert done.manifest["counts"]["examples_ok"] == ROWS


def test_a_replica_of_other_weights_that_joins_late_is_kept_out(
    graph: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """B is down at start; when it answers, it reports other weights: it never serves."""
    gate = threading.Event()
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(40)]
    data = write_rows(tmp_path / "many.jsonl", rows)
    with (
        FakeServer(scoring(3, gate), root="/models/a") as a,
        FakeServer(scoring(8), root="/models/b") as b,
    ):
        port = b.port
        urls = [a.base_url, b.base_url]
        b.stop()

        async def until(condition: Callable[[], bool], what: str) -> None:
            for _ in range(int(WAIT / 0.02)):
                if condition():
                    return
                await asyncio.sleep(0.02)
            raise AssertionError(f"waited {WAIT:.0f} s for {what}")

        async def scenario() -> orc.RunResult:
            run = asyncio.ensure_future(
                orc.arun(str(graph), str(data), base_url=urls, out=tmp_path / "run", concurrency=2)
            )
            await until(lambda: node_requests(a) >= 2, "A to serve")
            await asyncio.to_thread(b.start, port)
            await until(lambda: "/v1/models" in b.paths, "B to be probed")
            await asyncio.sleep(1.0)  # room to join (and serve) if it were let in
            gate.set()
            return await run

        with caplog.at_level(logging.ERROR, logger="orchestrator"):
            result = asyncio.run(scenario())
        served_b = node_requests(b)
    assert result.manifest.counts.examples_ok == 40
    assert served_b == 0
    assert scores(tmp_path / "run") == [3] * 40
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(urls[1] in e and "/models/b" in e and "/models/a" in e for e in errors), errors


def test_workers_cache_under_the_identity_the_run_found(graph: Path, data: Path, tmp_path: Path):
    """A worker rebuilds the endpoints: its cache keys must be the owner's, so a run in one
    process is answered from the workers' replies (and a server of other weights is not)."""
    cache = tmp_path / "cache.sqlite"
    with (
        FakeServer(scoring(3), root="/models/a") as a,
        FakeServer(scoring(8), root="/models/b") as b,
    ):
        orc.run(graph, data, base_url=a.base_url, cache=cache, out=tmp_path / "w", workers=2)
        again = run_graph(graph, data, tmp_path / "one", a.base_url, cache=cache)
        other = orc.run(graph, data, base_url=b.base_url, cache=cache, workers=2)
        asked_b = node_requests(b)
    assert again.manifest["counts"]["cache_hits"] == ROWS
    assert other.manifest.counts.cache_hits == 0 and asked_b == ROWS
    assert {line.outputs["score"] for line in other.results} == {8}


@pytest.mark.reliability
def test_runs_at_once_on_one_cache_against_other_weights_keep_their_own_answers(
    graph: Path, tmp_path: Path
):
    """As seen: two runs started together on the default cache, A slow and B fast, and
    B's replies landed in A's folder. A is held to one slow request at a time, so B has
    finished (and written its cache) long before A asks its last questions."""
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(30)]
    data = write_rows(tmp_path / "many.jsonl", rows)
    cache = str(tmp_path / "cache.sqlite")
    slow = threading.Event()  # never set: every A reply takes 0.2 s
    with (
        FakeServer(scoring(3, slow), root="/models/a") as a,
        FakeServer(scoring(8), root="/models/b") as b,
    ):
        run_a = start_cli_run(
            graph, data, tmp_path / "a", a.base_url, "--cache", cache, "--concurrency", "1"
        )
        run_b = start_cli_run(graph, data, tmp_path / "b", b.base_url, "--cache", cache)
        out_b, _ = run_b.communicate(timeout=WAIT * 4)
        out_a, _ = run_a.communicate(timeout=WAIT * 4)
        assert run_b.returncode == 0, out_b
        assert run_a.returncode == 0, out_a
        asked = node_requests(a), node_requests(b)
    assert scores(tmp_path / "a") == [3] * 30, "B's answers in A's run folder"
    assert scores(tmp_path / "b") == [8] * 30
    assert asked == (30, 30)
