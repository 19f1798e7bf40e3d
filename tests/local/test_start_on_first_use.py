"""A run that needs no request starts no server (issue 26 item 7): the embedded server is
started on the first request not answered from the cache, once however many race it, and
its identity (in every cache key and the run key) is known without starting it."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import test_embedded_unit as embedded_tests
from helpers import judge_graph, trace_records, write_graph, write_rows
from test_auto_concurrency import VLLM_TEXT
from test_embedded_unit import default_port
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.local import server as embedded
from orchestrator.providers.base import ServedModel, identity_at
from orchestrator.servers.deferred import DeferredServer, StartOnFirstUse

fake_vllm = embedded_tests.fake_vllm  # the stand-in for vLLM, put in `server_command`
URL = "http://127.0.0.1:65001/v1"  # never reached: the fake transport answers in-process


class Starter:
    """A stand-in server start: counts its calls, takes `seconds`, may fail."""

    def __init__(self, seconds: float = 0.0, error: Exception | None = None) -> None:
        self.seconds, self.error = seconds, error
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.calls += 1
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error


def _run(
    tmp_path: Path, rows: list[dict[str, Any]], starter: Starter, **kwargs: Any
) -> tuple[orc.RunResult, orc.FakeTransport]:
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    fake = orc.FakeTransport(models=[embedded.DEFAULT_MODEL_NAME])
    server = DeferredServer(URL, embedded.served_models(tmp_path / "model"), starter)
    result = orc.run(
        graph,
        rows,
        base_url=URL,
        transport=StartOnFirstUse(fake, [server]),
        cache=tmp_path / "cache.sqlite",
        **kwargs,
    )
    return result, fake


def _cache_keys(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT key FROM responses")}


ROWS = [{"id": f"r{i}", "text": f"text {i}"} for i in range(8)]


def test_a_run_answered_from_the_cache_starts_no_server(tmp_path: Path) -> None:
    first_start, again_start = Starter(), Starter()
    first, _ = _run(tmp_path, ROWS, first_start)
    again, fake = _run(tmp_path, ROWS, again_start)
    assert first_start.calls == 1 and len(first.ok) == 8
    assert again_start.calls == 0 and fake.requests == []  # not even the canary
    assert again.manifest.counts.cache_hits == 8 and len(again.ok) == 8


def test_eight_misses_at_once_start_the_server_once(tmp_path: Path) -> None:
    starter = Starter(seconds=0.5)
    result, fake = _run(tmp_path, ROWS, starter, concurrency=8)
    assert starter.calls == 1
    assert len(result.ok) == 8 and len(fake.node_requests) == 8
    assert fake.requests == fake.node_requests  # no canary: the schema is known enforced
    server = next(iter(result.manifest.servers.values()))
    assert server["structured_output"] == "server"


def test_the_start_is_not_part_of_a_request_deadline(tmp_path: Path) -> None:
    """A start slower than --timeout still lets the requests through."""
    starter = Starter(seconds=1.5)
    result, _ = _run(tmp_path, ROWS[:2], starter, timeout=0.5)
    assert starter.calls == 1 and len(result.ok) == 2


async def test_the_progress_line_says_the_server_is_starting() -> None:
    """While a server started on first use comes up (minutes on a CPU), the progress line
    says so instead of "in flight 0 · 0.0 req/s" (issue 35 item 14)."""
    from orchestrator.servers.registry import ServerRegistry

    fake = orc.FakeTransport(models=[embedded.DEFAULT_MODEL_NAME])
    server = DeferredServer(URL, embedded.served_models(), Starter())
    registry = ServerRegistry(StartOnFirstUse(fake, [server]))
    registry.endpoint(URL, embedded.DEFAULT_MODEL_NAME)
    assert registry.limits_text().startswith("limit ")
    server.starting_since = time.perf_counter() - 12
    assert registry.limits_text() == f"starting the server at {URL} (12 s)"
    await registry.close()


def test_a_nodes_latency_leaves_out_the_servers_start(tmp_path: Path) -> None:
    """The first requests wait 1.5 s for the start; their nodes' latency is the call's own
    (issue 34 item 7: 154 s on every pointwise call of a first run)."""
    starter = Starter(seconds=1.5)
    result, _ = _run(tmp_path, ROWS[:3], starter, out=tmp_path / "run")
    assert starter.calls == 1 and len(result.ok) == 3
    latencies = [r["latency"] for r in trace_records(tmp_path / "run" / "traces.sqlite")]
    assert len(latencies) == 3 and all(0 <= latency < 1.0 for latency in latencies), latencies


def test_the_limit_is_tuned_from_vllm_metrics_once_the_server_runs(tmp_path: Path) -> None:
    """Before the start there is no /metrics to read; the mode is chosen once it is up."""
    starter = Starter()
    scraped_before_start: list[int] = []

    def metrics(url: str) -> str | None:
        scraped_before_start.append(starter.calls == 0)
        return VLLM_TEXT

    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    fake = orc.FakeTransport(models=[embedded.DEFAULT_MODEL_NAME], metrics=metrics)
    server = DeferredServer(URL, embedded.served_models(tmp_path / "model"), starter)
    result = orc.run(graph, ROWS, base_url=URL, transport=StartOnFirstUse(fake, [server]))
    (replica,) = result.manifest.replicas
    assert replica["limit_mode"] == "vllm metrics", replica
    assert scraped_before_start and not any(scraped_before_start)


def test_a_failed_start_stops_the_run_and_is_tried_once(tmp_path: Path) -> None:
    starter = Starter(error=embedded.EmbeddedServerError("vLLM exited with code 1"))
    with pytest.raises(orc.ServerGone, match="could not be started: vLLM exited with code 1"):
        _run(tmp_path, ROWS, starter, concurrency=8)
    assert starter.calls == 1


def test_cache_keys_and_run_key_are_the_same_whether_the_server_started(tmp_path: Path) -> None:
    """A silent mix guard: the run that started the server and the one that did not (every
    reply cached) key their replies and their run alike."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    starters = [Starter(), Starter()]
    results = []
    cache_keys: list[set[str]] = []
    for out, starter in zip(("started", "not-started"), starters, strict=True):
        server = DeferredServer(URL, embedded.served_models(tmp_path / "model"), starter)
        transport = StartOnFirstUse(
            orc.FakeTransport(models=[embedded.DEFAULT_MODEL_NAME]), [server]
        )
        results.append(
            orc.run(
                graph,
                ROWS,
                out=tmp_path / out,
                base_url=URL,
                transport=transport,
                cache=tmp_path / "cache.sqlite",
            )
        )
        cache_keys.append(_cache_keys(tmp_path / "cache.sqlite"))
    assert [s.calls for s in starters] == [1, 0]
    started, not_started = (r.manifest for r in results)
    assert not_started.counts.cache_hits == len(ROWS)  # each key the first run wrote
    assert cache_keys[0] == cache_keys[1]  # and no other
    assert started.run_key == not_started.run_key
    identity = next(iter(not_started.servers.values()))["identity"]
    assert identity == f"{tmp_path / 'model'} (max_model_len {embedded.MAX_MODEL_LEN})"


def test_the_identity_known_before_the_start_is_the_one_vllm_reports(tmp_path: Path) -> None:
    """vLLM's /v1/models gives `root` = the --model it was started with and `max_model_len`
    = its --max-model-len (vllm/entrypoints/openai/models/serving.py): read both from the
    command line the embedded server is started with, as vLLM's reply carries them."""
    command = embedded.server_command(tmp_path / "model", 8765)
    flag = {name: command[i + 1] for i, name in enumerate(command) if name.startswith("--")}
    reply = {
        "object": "list",
        "data": [
            {
                "id": flag["--served-model-name"],
                "object": "model",
                "root": flag["--model"],
                "max_model_len": int(flag["--max-model-len"]),
            }
        ],
    }
    reported = [
        ServedModel(m["id"], m["root"], m["max_model_len"])
        for m in json.loads(json.dumps(reply))["data"]
    ]
    known = embedded.served_models(tmp_path / "model")
    model = embedded.DEFAULT_MODEL_NAME
    assert identity_at(URL, known, model) == identity_at(URL, reported, model)
    assert known == reported


@pytest.mark.reliability
def test_the_cli_starts_the_embedded_server_only_for_a_miss(
    fake_vllm: embedded_tests.FakeVLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    default_port(monkeypatch, embedded.free_port())
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", ROWS[:3])
    command = [
        "run", str(graph), "--data", str(data), "--out", str(tmp_path / "run"),
        "--cache", str(tmp_path / "cache.sqlite"),
    ]  # fmt: skip
    runner = CliRunner()
    first = runner.invoke(app, command)
    assert first.exit_code == 0, first.output
    assert len(fake_vllm.started()) == 1 and "Stopping the embedded server" in first.output
    assert "starting the embedded vLLM CPU server" in first.output
    again = runner.invoke(app, [*command, "--overwrite"])
    assert again.exit_code == 0, again.output
    assert len(fake_vllm.started()) == 1  # every reply from the cache: nothing started
    assert "Stopping the embedded server" not in again.output
    # Nor does it announce a start it will not make (issue 34 item 7), nor does a run that
    # only resumes finished work.
    assert "embedded vLLM" not in again.output
    resumed = runner.invoke(app, command)
    assert resumed.exit_code == 0, resumed.output
    assert "embedded vLLM" not in resumed.output and len(fake_vllm.started()) == 1
    # Under --no-cache the start is not blamed on the cache.
    with caplog.at_level(logging.INFO, logger="orchestrator"):
        fresh = runner.invoke(app, [*command, "--overwrite", "--no-cache"])
    assert fresh.exit_code == 0, fresh.output
    said = [r.getMessage() for r in caplog.records if "starting it at" in r.getMessage()]
    assert said and not any("cache" in line for line in said), said


@pytest.mark.reliability
def test_the_demo_runs_twice_on_one_machine(
    fake_vllm: embedded_tests.FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two graphs in one process against one server started on first use (issue 34 item 1).
    The first demo starts it for pointwise (cold cache). The second, into a new folder,
    answers pointwise from the cache, so the server is first needed by ExPerT: the
    pointwise run's tuning hook, registered on the server it never started, must not run
    on that finished run's closed connections ("the client has been closed")."""
    default_port(monkeypatch, embedded.free_port())
    runner = CliRunner()
    for folder in ("first", "second"):
        done = runner.invoke(app, ["demo", "--out", str(tmp_path / folder), "--limit", "2"])
        assert done.exit_code == 0, done.output
        assert "client has been closed" not in done.output
        for name in ("pointwise", "expert"):
            lines = (tmp_path / folder / name / "results.jsonl").read_text().splitlines()
            assert [json.loads(line)["status"] for line in lines] == ["ok", "ok"], name
    assert len(fake_vllm.started()) == 2  # one server per demo, started on its first miss


@pytest.mark.reliability
def test_an_embedded_server_that_exits_mid_run_is_reported_at_once(
    fake_vllm: embedded_tests.FakeVLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    figure: Any,
) -> None:
    """The server this command started dies mid-run (issue 34 item 3): the run does not
    wait --server-wait (600 s) for a process that cannot come back. It stops within
    seconds, exit 3, naming the exit code, the cause in its log and the log's path, and the
    examples that finished are kept for a re-run, which starts a new server."""
    default_port(monkeypatch, embedded.free_port())
    error = "RuntimeError: CPU Generator does not use offset"

    def command(model_dir: Path, port: int) -> list[str]:
        return [
            sys.executable, str(embedded_tests.FAKE_VLLM), "--port", str(port),
            "--model", embedded.DEFAULT_MODEL_NAME, "--pids", str(fake_vllm.pids),
            "--root", str(model_dir), "--latency", "0.3", "--exit-after", "4",
            "--exit-code", "1", "--error", f"(Worker pid=1) ERROR {error}",
        ]  # fmt: skip

    monkeypatch.setattr(embedded, "server_command", command)
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": f"text {i}"} for i in range(40)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    command_line = ["run", str(graph), "--data", str(data), "--out", str(out), "--concurrency", "2"]
    started = time.monotonic()
    done = CliRunner().invoke(app, command_line)
    seconds = time.monotonic() - started
    assert done.exit_code == 3, done.output
    assert seconds < 60  # not --server-wait's 600 s
    said = " ".join(done.output.split())
    assert "exited with code 1" in said and error in said, said
    assert "vllm-" in said and ".log" in said  # the log's path
    assert "waiting up to" not in said  # no wait for a server that cannot come back
    assert "re-run the same command to resume (it starts a new server)" in said
    finished = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert finished and all(line["status"] == "ok" for line in finished)
    assert len(finished) < len(rows)
    figure(
        "the embedded server exits mid-run",
        "stand-in vLLM exits with code 1 after ~4 s, 40 rows in flight at 2",
        runs=1,
        lost=0,
        recover_s=seconds - 4,
        note="stops at once, exit 3, the log's cause named; no --server-wait",
    )


class WatchingStarter:
    """A start that waits for `server.abandoned` (as the embedded server's wait does)."""

    def __init__(self) -> None:
        self.server: DeferredServer | None = None
        self.gave_up = threading.Event()

    def __call__(self) -> None:
        assert self.server is not None
        if self.server.abandoned.wait(30):
            self.gave_up.set()
            raise embedded.StartCancelled("given up")


def test_a_run_stopped_while_the_server_starts_gives_the_start_up() -> None:
    """Ctrl-C while vLLM starts must not wait minutes for the start to finish; one cancelled
    waiter among several must not take the server from the others."""
    starter = WatchingStarter()
    server = starter.server = DeferredServer(URL, [], starter)

    async def scenario() -> None:
        waiters = [asyncio.ensure_future(server.ready()) for _ in range(3)]
        await asyncio.sleep(0.2)
        waiters[0].cancel()  # one row's task cancelled: the start goes on
        await asyncio.sleep(0.3)
        assert not server.abandoned.is_set() and not starter.gave_up.is_set()
        began = time.monotonic()
        for waiter in waiters[1:]:
            waiter.cancel()  # the run stopping
        await asyncio.gather(*waiters, return_exceptions=True)
        assert await asyncio.to_thread(starter.gave_up.wait, 5)
        assert time.monotonic() - began < 5

    asyncio.run(scenario())
    assert server.abandoned.is_set() and not server.started


def test_start_server_gives_up_and_stops_vllm_when_cancelled(
    fake_vllm: embedded_tests.FakeVLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    never = [sys.executable, str(embedded_tests.FAKE_VLLM), "--never-listen"]

    def command(model_dir: Path, port: int) -> list[str]:
        return [*never, "--pids", str(fake_vllm.pids), "--port", str(port), "--model", "m"]

    monkeypatch.setattr(embedded, "server_command", command)
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    began = time.monotonic()
    with pytest.raises(embedded.StartCancelled, match="given up"):
        embedded.start_server(
            port=embedded.free_port(),
            model_dir=fake_vllm.folder,
            log=lambda _m: None,
            startup_timeout=60,
            cancel=cancel,
        )
    assert time.monotonic() - began < 20  # not the 60 s timeout
    (pid,) = fake_vllm.started()
    assert not embedded_tests._alive(pid)  # the half-started server was stopped


def test_align_starts_the_embedded_server_as_run_does(
    fake_vllm: embedded_tests.FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --base-url and no OPENAI_BASE_URL: `align` starts the embedded server on its first
    miss and stops it after; a repeat is all cache and starts nothing."""
    default_port(monkeypatch, embedded.free_port())
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"e{i}", "text": f"text {i}"} for i in range(12)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    labels = write_rows(tmp_path / "l.jsonl", [{"id": r["id"], "score": 5} for r in rows])
    command = [
        "align", str(graph), "--data", str(data), "--labels", str(labels), "--node", "judge",
        "--out", str(tmp_path / "aligned"), "--shots", "0,1", "--folds", "2",
        "--cache", str(tmp_path / "cache.sqlite"), "--format", "json",
    ]  # fmt: skip
    runner = CliRunner()
    first = runner.invoke(app, command)
    assert first.exit_code == 0, first.output
    assert len(fake_vllm.started()) == 1 and "Stopping the embedded server" in first.output
    assert json.loads(first.stdout)["graph"].endswith("graph.yaml")
    again = runner.invoke(app, command)
    assert again.exit_code == 0, again.output
    assert len(fake_vllm.started()) == 1  # every reply from the cache: nothing started
