"""`orchestrator run --otlp URL` / `orc.run(otlp=...)` (issue 40, item 2): spans sent while
the run goes, none lost on a normal end (the same spans `export --otlp` sends after it), a
resumed run's joining the traces its first part began, and a backend that is down costing
spans, counted and said, never the run."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, user_text, write_rows
from test_otlp_export import ROWS, SECRET, answer, by_kind, export, graph_file
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError
from orchestrator.otel import trace_id
from orchestrator.store import RunReader

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
from otlp_receiver import Span, otlp_receiver


def shape(spans: list[Span]) -> set[tuple[object, ...]]:
    return {(s.trace_id, s.span_id, s.parent_id, s.name, s.start, s.end) for s in spans}


def test_a_live_run_sends_every_span_the_export_after_it_sends(tmp_path: Path) -> None:
    out = tmp_path / "run"
    fake = orc.FakeTransport(answer, faults=["malformed"])
    with otlp_receiver() as receiver:
        result = orc.run(
            graph_file(tmp_path / "g"),
            ROWS,
            out=out,
            transport=fake,
            concurrency=1,
            otlp=receiver.url,
        )
        live = receiver.take()
        export(out, receiver.url)
        after = receiver.take()
    assert result.manifest.status == "complete"
    assert len(live) == 22
    assert shape(live) == shape(after)
    assert {s.name: s.attributes for s in live} == {s.name: s.attributes for s in after}


def test_a_backend_that_is_down_costs_spans_said_with_their_count_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("orchestrator.otel.live.LIVE_TIMEOUT", 0.5)
    with otlp_receiver() as receiver:
        down = receiver.url
    # The receiver is gone: its port refuses connections.
    caplog.set_level(logging.WARNING, logger="orchestrator.otel")
    result = orc.run(
        graph_file(tmp_path / "g"),
        ROWS,
        out=tmp_path / "run",
        transport=orc.FakeTransport(answer),
        otlp=down,
    )
    assert result.manifest.status == "complete"
    lost = [r.getMessage() for r in caplog.records if r.name == "orchestrator.otel.live"]
    assert lost == [
        f"21 of 21 spans did not reach {down} (is the backend up?); the run is complete on "
        f"disk: `orchestrator export {tmp_path / 'run'} --otlp URL` sends them again, with "
        "the same ids"
    ]


def test_otlp_needs_a_run_folder_and_a_url() -> None:
    with pytest.raises(ConfigurationError, match=r"give the run a folder \(out=\)"):
        orc.run(
            orc.graph_from_dict(
                {
                    "name": "x",
                    "inputs": ["a"],
                    "nodes": {
                        "c": {"kind": "compute", "function": "identity", "args": {"value": "a"}}
                    },
                    "outputs": {"c": "c"},
                }
            ),
            [{"id": "1", "a": 1}],
            otlp="http://127.0.0.1:9/v1/traces",
        )
    with pytest.raises(ConfigurationError, match="--otlp takes the full OTLP/HTTP traces URL"):
        orc.run(graph_file_or_skip(), [], out="never", otlp="localhost:4318")


def graph_file_or_skip() -> orc.Graph:
    return orc.graph_from_dict(
        {
            "name": "x",
            "inputs": ["a"],
            "nodes": {"c": {"kind": "compute", "function": "identity", "args": {"value": "a"}}},
            "outputs": {"c": "c"},
        }
    )


def test_a_resumed_run_of_the_command_sends_its_own_spans_into_the_first_parts_traces(
    tmp_path: Path,
) -> None:
    """The command's options (header, no content) and a resume, in one live run."""

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        text = user_text(body)
        return Reply(content='{"score": 4}' if text.startswith("judge") else '{"ok": true}')

    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    out, graph = tmp_path / "run", graph_file(tmp_path / "g")
    with FakeServer(respond) as server, otlp_receiver() as receiver:
        command = ["run", str(graph), "-d", str(data), "--out", str(out)]
        command += ["--base-url", server.base_url, "--no-cache"]
        first = CliRunner().invoke(app, [*command, "--limit", "1"])
        assert first.exit_code == 0, first.output
        resumed = CliRunner().invoke(
            app,
            [
                *command,
                "--otlp",
                receiver.url,
                "--otlp-header",
                f"x-api-key={SECRET}",
                "--no-otlp-content",
            ],
        )
        spans = receiver.take()
    assert resumed.exit_code == 0, resumed.output
    root = RunReader(out).manifest.parts[0].run_id
    assert len(RunReader(out).manifest.parts) == 2
    # Only the resumed part's example, in the trace the first part's run id names.
    assert {s.attributes.get("orchestrator.example_id") for s in spans} - {None} == {"b"}
    assert {s.trace_id for s in spans} == {trace_id(root, "b")}
    assert {k: len(v) for k, v in by_kind(spans).items()} == {
        "example": 1,
        "node": 3,
        "item": 1,
        "chat": 2,
        "attempt": 2,
    }
    assert all(not s.events for s in spans)
    assert all("input.value" not in s.attributes for s in spans)
    assert {h.get("x-api-key") for h in receiver.headers} == {SECRET}
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_an_examples_root_span_goes_once_its_result_line_is_written(tmp_path: Path) -> None:
    """The sender hands an example's root span on the read that finds its result line, so
    the run's end does not wait for all of them; one a result line does not name yet (or
    of an earlier part, before `results_from`) goes at the end, and none goes twice."""
    from orchestrator.otel.live import Follower

    out = tmp_path / "run"
    orc.run(graph_file(tmp_path / "g"), ROWS, out=out, transport=orc.FakeTransport(answer))
    size = (out / "results.jsonl").stat().st_size
    with otlp_receiver() as receiver:
        job = {"folder": str(out), "endpoint": receiver.url, "headers": {}, "content": True}
        job |= {"timeout": 5.0, "current": RunReader(out).manifest.run_id}
        early = Follower({**job, "results_from": 0})
        early.read()
        roots_early = [s for s in early.pending if s.name.startswith("example ")]
        assert len(roots_early) == len(ROWS)  # every example's, before the end
        early.finish()
        late = Follower({**job, "results_from": size})  # no result line is this part's
        late.read()
        assert not [s for s in late.pending if s.name.startswith("example ")]
        late.finish()
        sent = receiver.take()
    assert early.handed == late.handed == early.delivered == late.delivered == 21
    # The same spans either way, each root span once.
    first, second = sent[:21], sent[21:]
    assert len(shape(first)) == 21 and shape(first) == shape(second)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="a Linux scheduling policy")
def test_the_sender_runs_only_on_cores_the_run_leaves_idle(tmp_path: Path) -> None:
    """At nice 10 the sender still took a share of a busy core from the run; under
    SCHED_IDLE a waking run preempts it at once (docs/BENCHMARKS.md)."""
    from orchestrator.otel.live import OtlpObserver

    observer = OtlpObserver(tmp_path, "http://127.0.0.1:9/v1/traces")
    child = observer._child
    assert child is not None
    try:
        deadline = time.monotonic() + 20  # the sender's imports come first
        while os.sched_getscheduler(child.pid) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE
    finally:
        observer._stop_child()
