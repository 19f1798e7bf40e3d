"""Several servers for one model, on real sockets: requests spread over the replicas and
each attempt names its replica; a replica that dies mid-run leaves the rotation without
failing an example and comes back once it answers; and the run key names the logical
server, so another list of replicas of the same model resumes the folder."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, latency_responder, schema_responder
from helpers import is_canary, judge_graph, refusing_urls, run_graph, write_graph, write_rows

import orchestrator as orc
from orchestrator.errors import RunFolderError, ServerError
from orchestrator.providers.fake import FakeTransport
from orchestrator.servers.limiter import Limiter
from orchestrator.servers.outage import ServerWatch
from orchestrator.servers.registry import ServerRegistry
from orchestrator.servers.replicas import Replica, ReplicaSet, start_example
from orchestrator.store.runkey import REPLICAS, server_components

PROMPTS = {"judge.jinja": "Rate this text.\n<<{{ text }}>>"}
WAIT = 30.0  # seconds a test waits for a server-side event before it fails


def rows(tmp_path: Path, count: int) -> Path:
    return write_rows(
        tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(count)]
    )


def slow_until(event: threading.Event) -> Callable[[dict], Reply]:
    """A responder that takes 0.2 s a call until `event` is set (B back), then answers at
    once, so the run cannot end on A alone before B has served again."""

    def respond(body: dict) -> Reply:
        if not is_canary(body):
            event.wait(0.2)
        return schema_responder(body)

    return respond


def start_run(
    graph: Path, data: Path, out: Path, urls: list[str], concurrency: int
) -> asyncio.Future[orc.RunResult]:
    """The run as a task on the running loop, so a scenario can stop and start servers
    while it goes."""
    return asyncio.ensure_future(
        orc.arun(
            str(graph),
            str(data),
            base_url=urls,
            out=out,
            concurrency=concurrency,
            server_wait=WAIT,
        )
    )


def node_requests(server: FakeServer) -> int:
    return sum(not is_canary(body) for body in server.requests)


def attempt_replicas(folder: Path) -> list[tuple[str, str | None, str | None]]:
    """(kind, replica, error) of every attempt in the run's trace."""
    with sqlite3.connect(folder / "traces.sqlite") as db:
        return list(db.execute("SELECT kind, replica, error FROM attempts ORDER BY rowid"))


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(int(WAIT / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"waited {WAIT:.0f} s for {what}")


def test_requests_spread_over_replicas_and_each_attempt_names_its_own(tmp_path: Path):
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    with FakeServer(latency_responder(0.02)) as a, FakeServer(latency_responder(0.02)) as b:
        urls = [a.base_url, b.base_url]
        outcome = run_graph(graph, rows(tmp_path, 40), tmp_path / "run", urls, concurrency=4)
        served = {a.base_url: node_requests(a), b.base_url: node_requests(b)}
    assert outcome.manifest["counts"]["examples_ok"] == 40
    # Least outstanding first: with both as fast, neither is left idle.
    assert all(count >= 8 for count in served.values()), served
    traced = [replica for kind, replica, _ in attempt_replicas(tmp_path / "run") if kind == "ok"]
    assert len(traced) == 40 and set(traced) == set(urls)
    for url in urls:
        assert traced.count(url) == served[url]
    reports = {r["base_url"]: r for r in outcome.manifest["replicas"]}
    assert set(reports) == set(urls)
    (server,) = outcome.manifest["servers"].values()
    assert server["base_url"] == urls


def test_a_replica_that_dies_mid_run_fails_no_example_and_returns_when_it_answers(
    tmp_path: Path,
):
    """B serves, then dies: its calls go to A. A answers slowly (0.2 s each, 4 at a time)
    until B, restarted on its port, has served again, so the run cannot end before B is
    back in rotation. (test_replica_slots has A block instead: the requests waiting for a
    slot then go to B when it is back.)"""
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    b_back = threading.Event()
    held = slow_until(b_back)
    data = rows(tmp_path, 80)
    with FakeServer(held) as a, FakeServer() as b:
        port = b.port
        urls = [a.base_url, b.base_url]

        async def scenario() -> orc.RunResult:
            run = start_run(graph, data, tmp_path / "run", urls, 4)
            await until(lambda: node_requests(b) >= 3, "B to serve")
            await asyncio.to_thread(b.stop)
            before = node_requests(b)
            await asyncio.sleep(0.3)  # calls fail on B and move to A meanwhile
            await asyncio.to_thread(b.start, port)
            await until(lambda: node_requests(b) >= before + 3, "B back in rotation")
            b_back.set()
            return await run

        result = asyncio.run(scenario())
    assert result.manifest.counts.examples_ok == 80
    assert result.manifest.counts.examples_failed == 0
    b_url = urls[1]
    outages = [o for o in result.manifest.outages if o["base_url"] == b_url]
    assert outages and all(o["recovered"] for o in outages)
    attempts = attempt_replicas(tmp_path / "run")
    moved = [e for kind, replica, e in attempts if kind == "transport" and replica == b_url]
    assert any("out of rotation; sent to another replica" in (e or "") for e in moved)
    served_by = {replica for kind, replica, _ in attempts if kind == "ok"}
    assert served_by == set(urls)


def test_with_every_replica_down_the_run_stops_after_its_patience(tmp_path: Path):
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    data = rows(tmp_path, 20)
    with FakeServer() as a, FakeServer() as b:
        urls = [a.base_url, b.base_url]

        async def scenario() -> None:
            run = asyncio.ensure_future(
                orc.arun(
                    str(graph),
                    str(data),
                    base_url=urls,
                    out=tmp_path / "run",
                    concurrency=2,
                    server_wait=1.0,
                )
            )
            await until(lambda: node_requests(a) + node_requests(b) >= 2, "first requests")
            await asyncio.gather(asyncio.to_thread(a.stop), asyncio.to_thread(b.stop))
            await run

        with pytest.raises(orc.ServerGone, match="none of the 2 replicas"):
            asyncio.run(scenario())


def test_a_replica_down_at_start_is_left_out_until_it_answers(tmp_path: Path):
    """B is down when the run starts: the run starts on A (a warning, not a refusal), and
    B, started on its port while A still holds the run, joins and serves."""
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    b_back = threading.Event()
    held = slow_until(b_back)
    data = rows(tmp_path, 60)
    with FakeServer(held) as a, FakeServer() as b:
        port = b.port
        urls = [a.base_url, b.base_url]
        b.stop()

        async def scenario() -> orc.RunResult:
            run = start_run(graph, data, tmp_path / "run", urls, 4)
            await until(lambda: node_requests(a) >= 3, "A to serve")
            await asyncio.to_thread(b.start, port)
            await until(lambda: node_requests(b) >= 3, "B back in rotation")
            b_back.set()
            return await run

        result = asyncio.run(scenario())
    assert result.manifest.counts.examples_ok == 60
    served_by = {replica for kind, replica, _ in attempt_replicas(tmp_path / "run") if kind == "ok"}
    assert served_by == set(urls)
    outages = [o for o in result.manifest.outages if o["base_url"] == urls[1]]
    assert outages and all(o["recovered"] for o in outages)


def test_every_replica_down_at_start_is_a_server_error_naming_one(tmp_path: Path):
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    with refusing_urls(2) as urls, pytest.raises(ServerError, match="cannot list models at"):
        run_graph(graph, rows(tmp_path, 2), tmp_path / "run", urls)


def test_replica_lists_of_one_model_resume_one_folder_another_model_does_not(tmp_path: Path):
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    data = rows(tmp_path, 6)
    out = tmp_path / "run"
    with FakeServer() as a, FakeServer() as b:
        first = run_graph(graph, data, out, [a.base_url, b.base_url], limit=3)
    assert first.manifest["run_key"]["components"]["endpoint judge"] == REPLICAS
    with FakeServer() as c, FakeServer() as d, FakeServer() as e:
        # Other addresses, another count of replicas: the same logical server.
        again = run_graph(graph, data, out, [c.base_url, d.base_url, e.base_url])
        sent = sum(node_requests(server) for server in (c, d, e))
    assert again.manifest["resumed"] and again.manifest["counts"]["examples_resumed"] == 3
    assert again.manifest["counts"]["examples_ok"] == 6 and sent == 3  # only the rest asked
    assert again.manifest["run_key"]["digest"] == first.manifest["run_key"]["digest"]
    with (
        FakeServer(model="other-judge") as f,
        FakeServer(model="other-judge") as g,
        pytest.raises(RunFolderError, match="model judge: fake-model → other-judge"),
    ):
        run_graph(graph, data, out, [f.base_url, g.base_url])


def test_the_run_key_names_one_url_but_not_a_set_of_replicas():
    one = server_components([("judge", "m", ["http://a/v1"], "server", "/w")])
    other = server_components([("judge", "m", ["http://b/v1"], "server", "/w")])
    pair = server_components([("judge", "m", ["http://a/v1", "http://b/v1"], "server", "/w")])
    trio = server_components([("judge", "m", ["http://c/v1", "http://d/v1", "e"], "server", "/w")])
    assert one["endpoint judge"] == "http://a/v1" != other["endpoint judge"]
    assert pair == trio and pair["endpoint judge"] == REPLICAS
    assert server_components([("judge", "n", ["x", "y"], "server", "/w")]) != pair
    # Replicas are one server only while they serve the same weights.
    assert server_components([("judge", "m", ["x", "y"], "server", "/v")]) != pair


def test_every_replica_must_serve_the_model(tmp_path: Path):
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    data = rows(tmp_path, 2)
    with FakeServer() as a, FakeServer(model="other") as b:
        urls = [a.base_url, b.base_url]
        with pytest.raises(ServerError, match=f"not served by {b.base_url}.*every replica"):
            run_graph(graph, data, tmp_path / "run", urls, model="fake-model")


def replica_set(limits: list[int], affinity: bool = True) -> ReplicaSet:
    async def probe() -> bool:
        return True

    async def metrics() -> str | None:
        return None

    replicas = [
        Replica(f"http://r{i}/v1", Limiter(limit), ServerWatch(f"r{i}", probe, 1.0), metrics)
        for i, limit in enumerate(limits)
    ]
    return ReplicaSet(replicas, 1.0, affinity=affinity)


def hold(replica: Replica, slots: int) -> None:
    """Take `slots` of the replica's slots, as requests in flight there would."""
    for _ in range(slots):
        assert replica.limit.try_acquire()


async def test_a_slot_goes_to_the_least_load_relative_to_each_limit_skipping_dead_replicas():
    replicas = replica_set([16, 32, 16], affinity=False)
    a, b, c = replicas.replicas
    hold(a, 8), hold(b, 12), hold(c, 9)
    assert await replicas.acquire() is b  # 12/32 is the lightest
    b.up = False
    assert await replicas.acquire() is a  # 8/16 beats 9/16
    assert (a.outstanding, b.outstanding, c.outstanding) == (9, 13, 9)


async def test_an_example_sticks_to_its_replica_within_the_slack_only():
    replicas = replica_set([20, 20])
    a, b = replicas.replicas
    start_example()
    chosen = [await replicas.acquire()]  # a: both idle, first wins
    hold(a, 1)  # a two busier: within max(2, 20 // 10)
    chosen.append(await replicas.acquire())
    chosen.append(await replicas.acquire())  # a three busier: past the slack, balance wins
    assert chosen == [a, a, b]
    # Without affinity the least loaded is taken every time.
    plain = replica_set([20, 20], affinity=False)
    hold(plain.replicas[0], 1)
    assert await plain.acquire() is plain.replicas[1]


def test_the_progress_bar_shows_each_live_servers_limit():
    registry = ServerRegistry(FakeTransport(), concurrency=24)
    registry.endpoint(["http://a/v1", "http://b/v1"], "m")
    assert registry.limits_text() == "limits 24/24"
    registry._replicas["http://b/v1"].up = False
    assert registry.limits_text() == "limit 24"
    registry._replicas["http://a/v1"].up = False
    assert registry.limits_text() == "no server answers"


def test_expert_truncation_finds_the_replicas_by_run_base_url(tmp_path: Path):
    """ExPerT's truncation asks for the endpoint at `run.base_url`, which names the replica
    set; before, no endpoint matched it and every example failed (bench/replica_affinity.py
    caught it on two vLLM servers)."""
    import json

    from test_expert import EXAMPLES, GRAPH, ExpertResponder

    lines = EXAMPLES.read_text().splitlines()[:3]
    data = write_rows(tmp_path / "rows.jsonl", [json.loads(line) for line in lines])
    with FakeServer(ExpertResponder()) as a, FakeServer(ExpertResponder()) as b:
        urls = [a.base_url, b.base_url]
        outcome = run_graph(GRAPH, data, tmp_path / "run", urls, params={"max_tokens_per_text": 8})
        tokenized = sum(p.endswith("/tokenize") for p in [*a.paths, *b.paths])
    assert outcome.manifest["counts"]["examples_ok"] == 3
    assert tokenized >= 6  # both texts of every example, through the replicas
    for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines():
        assert json.loads(line)["truncation"]["reference"]["method"] == "tokenize+words"
