"""`orchestrator export RUN --otlp URL` (issue 40): a run's decision trace sent over
OTLP/HTTP to a plain receiver on a real socket, decoded with opentelemetry-proto: a trace
per example, spans per node run, foreach item, LLM call and attempt, linked to their
parents, with the GenAI attributes; ids and times that do not change between exports; no
prompt text with --no-content; headers sent and never written."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError, ExportError
from orchestrator.store import RunReader

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
from otlp_receiver import Span, otlp_receiver

PROMPTS = {"check.jinja": "item {{ it_index }}: {{ it }}", "judge.jinja": "judge {{ items }}"}
SPEC = {
    "name": "traced",
    "inputs": ["items"],
    "defaults": {"temperature": 0.0, "max_tokens": 60, "retries": 1},
    "nodes": {
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {"score": {"type": "integer", "min": 1, "max": 10}},
        },
        "check": {
            "kind": "llm",
            "prompt": "check.jinja",
            "foreach": "items",
            "as": "it",
            "output": {"ok": "boolean"},
        },
        "count": {"kind": "compute", "function": "identity", "args": {"value": "check | length"}},
    },
    "outputs": {"score": "judge.score", "count": "count"},
}
ROWS = [{"id": "a", "items": ["apple", "pear"]}, {"id": "b", "items": ["plum"]}]
SECRET = "s3cret-token-value"


def answer(request: Any) -> str:
    text = request.messages[0]["content"]
    return '{"score": 4}' if text.startswith("judge") else '{"ok": true}'


def graph_file(root: Path) -> Path:
    import yaml

    (root / "prompts").mkdir(parents=True)
    for name, text in PROMPTS.items():
        (root / "prompts" / name).write_text(text, encoding="utf-8")
    path = root / "traced.yaml"
    path.write_text(yaml.safe_dump({"prompts": "prompts", **SPEC}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("otel")
    out = root / "run"
    # The first request is answered with broken JSON: that call is re-asked once.
    fake = orc.FakeTransport(answer, faults=["malformed"])
    orc.run(graph_file(root), ROWS, out=out, transport=fake, concurrency=1)
    return out


def export(folder: Path, url: str, *extra: str) -> None:
    result = CliRunner().invoke(app, ["export", str(folder), "--otlp", url, *extra])
    assert result.exit_code == 0, result.output
    assert "spans of 2 examples sent to" in result.output


def by_kind(spans: list[Span]) -> dict[str, list[Span]]:
    kinds: dict[str, list[Span]] = {}
    for span in spans:
        kind = span.name.split(" ")[0]
        if kind == "node" and "[" in span.name:
            kind = "item"
        kinds.setdefault(kind, []).append(span)
    return kinds


def test_a_trace_per_example_with_its_nodes_items_calls_and_attempts(run: Path) -> None:
    with otlp_receiver() as receiver:
        export(run, receiver.url, "--otlp-header", f"x-api-key={SECRET}")
        spans = receiver.take()
    kinds = by_kind(spans)
    assert {k: len(v) for k, v in kinds.items()} == {
        "example": 2,  # one root per example
        "node": 6,  # judge, check and count, per example
        "item": 3,  # apple, pear; plum
        "chat": 5,  # judge twice, one call per item
        "attempt": 6,  # one call was re-asked
    }
    ids = {s.span_id: s for s in spans}
    assert len(ids) == len(spans)
    roots = {s.trace_id: s for s in kinds["example"]}
    assert len(roots) == 2
    for span in spans:
        assert span.trace_id in roots  # every span sits in its example's trace
        if span.parent_id is None:
            assert span in kinds["example"]
            continue
        parent = ids[span.parent_id]
        assert parent.trace_id == span.trace_id
        assert parent.start <= span.start and span.end <= parent.end, (span.name, parent.name)
        expected = {
            "node": "example",
            "item": "node",
            "attempt": "chat",
        }.get(by_kind([span]).popitem()[0])
        if expected is not None:
            assert by_kind([parent]).popitem()[0] == expected
    for item in kinds["item"]:
        assert ids[item.parent_id].name == "node check"  # type: ignore[index]
    for call in kinds["chat"]:
        assert ids[call.parent_id].name in ("node judge", *[i.name for i in kinds["item"]])  # type: ignore[index]
        assert call.kind == 3  # SPAN_KIND_CLIENT
    count = next(s for s in kinds["node"] if s.name == "node count")
    assert count.attributes["orchestrator.kind"] == "compute"
    assert "orchestrator.cache_hit" not in count.attributes
    assert {s.scope for s in spans} == {"orchestrator"}
    assert spans[0].resource["service.name"] == "orchestrator"
    # The header reached the receiver and is nowhere in the run folder.
    assert {h.get("x-api-key") for h in receiver.headers} == {SECRET}
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_calls_carry_the_genai_attributes_and_a_reask_its_error(run: Path) -> None:
    with otlp_receiver() as receiver:
        export(run, receiver.url)
        spans = receiver.take()
    kinds = by_kind(spans)
    trace = {(r.example_id, r.node, r.item): r for r in RunReader(run).node_runs()}
    manifest = RunReader(run).manifest
    ids = {s.span_id: s for s in spans}
    for call in kinds["chat"]:
        a = call.attributes
        owner = ids[call.parent_id].attributes  # type: ignore[index]
        record = trace[
            (
                owner["orchestrator.example_id"],
                a["orchestrator.node"],
                owner.get("orchestrator.item", -1),
            )
        ]
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == record.model == "fake-model"
        assert a["gen_ai.response.model"] == "fake-model"  # what serves it, from the manifest
        assert a["gen_ai.request.max_tokens"] == 60
        assert a["gen_ai.request.temperature"] == 0.0
        assert a["gen_ai.usage.input_tokens"] == record.prompt_tokens
        assert a["gen_ai.usage.output_tokens"] == record.completion_tokens
        assert a["gen_ai.response.finish_reasons"] == ["stop"]
        assert a["orchestrator.graph.name"] == "traced"
        assert a["orchestrator.graph.hash"] == manifest.graph.hash
        assert a["orchestrator.run_key"] == record.run_key
        assert a["orchestrator.cache_hit"] is False
        assert call.start == round(record.started * 1e9)  # the trace's own times
        (event,) = call.events
        assert event[0] == "gen_ai.input.messages"
        assert record.messages[0]["content"] in event[1]["gen_ai.input.messages"]  # type: ignore[index]
    attempts = kinds["attempt"]
    assert sorted(s.attributes["orchestrator.attempt"] for s in attempts) == [1, 1, 1, 1, 1, 2]
    reask = next(s for s in attempts if s.attributes["orchestrator.attempt"] == 2)
    first = next(s for s in attempts if s.parent_id == reask.parent_id and s is not reask)
    assert first.attributes["error.type"] == "invalid"
    assert first.status == 2  # STATUS_CODE_ERROR
    assert "invalid JSON" in reask.attributes["orchestrator.reask_error"]
    assert (
        reask.attributes["orchestrator.reask_error"]
        == first.attributes["orchestrator.validation_error"]
    )
    assert first.end <= reask.start
    assert [e[0] for e in reask.events] == ["gen_ai.output.messages"]
    assert sum("orchestrator.reask_error" in s.attributes for s in attempts) == 1


def test_two_exports_send_the_same_ids_and_times(run: Path) -> None:
    with otlp_receiver() as receiver:
        export(run, receiver.url)
        first = receiver.take()
        export(run, receiver.url)
        second = receiver.take()

    def shape(spans: list[Span]) -> Counter[tuple[Any, ...]]:
        return Counter((s.trace_id, s.span_id, s.parent_id, s.name, s.start, s.end) for s in spans)

    assert shape(first) == shape(second)
    assert len(shape(first)) == 22


def test_no_content_sends_no_prompt_or_reply(run: Path) -> None:
    with otlp_receiver() as receiver:
        export(run, receiver.url, "--no-content")
        spans = receiver.take()
        with_content = list(receiver.bodies)
        export(run, receiver.url)
    sent = b"".join(with_content)
    for text in (b"item 0: apple", b"judge ['apple', 'pear']", b'{\\"ok\\": true}', b"apple"):
        assert text not in sent
    assert text in b"".join(receiver.bodies[len(with_content) :])  # the check can fail
    assert all(not s.events for s in spans)
    assert len(spans) == 22


def test_an_endpoint_that_does_not_answer_is_an_export_error(run: Path) -> None:
    with otlp_receiver() as receiver:
        receiver.status = 400  # refuses: not retried
        with pytest.raises(ExportError, match="did not take the spans"):
            orc_export(run, receiver.url)
        result = CliRunner().invoke(app, ["export", str(run), "--otlp", receiver.url])
    assert result.exit_code == 1
    assert "error: the OTLP endpoint" in result.output
    assert "Traceback" not in result.output


def test_a_busy_or_failing_backend_is_asked_again_within_the_timeout(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("orchestrator.otel.export.RETRY_PAUSE", 0.01)
    with otlp_receiver() as receiver:
        receiver.first = [429, 503]
        orc_export(run, receiver.url)
        assert len(receiver.bodies) == 3  # the one request, twice refused, then taken
        assert len(receiver.take()) == 22
        receiver.first = [400]  # not retried: the request itself is wrong
        with pytest.raises(ExportError, match="HTTP 400"):
            orc_export(run, receiver.url)
    assert len(receiver.bodies) == 4


def test_a_kept_alive_connection_the_backend_closed_is_replaced_at_once(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("orchestrator.otel.export.RETRY_PAUSE", 60.0)  # no time for a pause
    monkeypatch.setattr("orchestrator.otel.export.BATCH", 5)
    with otlp_receiver() as receiver:
        receiver.drop_silently = True
        orc_export(run, receiver.url)
    assert len(receiver.bodies) == 5  # 22 spans, 5 a request, each on a new connection
    assert len(receiver.spans) == 22


def test_gzip_compression_is_taken_from_the_environment(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_COMPRESSION=gzip, as the SDK's exporter honoured it."""
    with otlp_receiver() as receiver:
        orc_export(run, receiver.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
        orc_export(run, receiver.url)
    plain, zipped = receiver.headers
    assert "content-encoding" not in plain and zipped["content-encoding"] == "gzip"
    assert receiver.bodies[1][:2] == b"\x1f\x8b" and len(receiver.bodies[1]) < len(
        receiver.bodies[0]
    )
    assert len(receiver.spans) == 44  # both exports decoded, the same 22 spans each


def test_a_private_ca_file_is_taken_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_CERTIFICATE names the CA an https endpoint is checked against: a
    file that is not a certificate is refused when the sender is made, so it was read."""
    from orchestrator.otel.export import Sender

    Sender("https://collector.example:4318/v1/traces", {})  # the default store
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", __file__)
    with pytest.raises(ssl.SSLError):
        Sender("https://collector.example:4318/v1/traces", {})


def orc_export(folder: Path, url: str, *headers: str) -> None:
    from orchestrator.otel import export_run

    export_run(folder, url, headers, timeout=2)


def test_bad_options_are_one_line_errors(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["export", str(run), "--otlp", "127.0.0.1:4318"])
    assert result.exit_code == 1 and "--otlp takes the full OTLP/HTTP traces URL" in result.output
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    result = runner.invoke(app, ["export", str(run), "--otlp", "env", "--format", "csv"])
    assert result.exit_code == 1 and "--otlp sends the trace and writes no file" in result.output
    result = runner.invoke(app, ["export", str(run), "--otlp", "env"])
    assert result.exit_code == 1 and "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in result.output
    result = runner.invoke(
        app, ["export", str(run), "--otlp", "http://127.0.0.1:9/v1/traces", "--otlp-header", SECRET]
    )
    assert result.exit_code == 1 and "--otlp-header takes key=value" in result.output
    assert SECRET not in result.output


def test_the_environment_names_the_endpoint_and_headers(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc,x-team=judges")
        export(run, "env", "--otlp-header", "x-team=evals")
    assert receiver.headers[0]["authorization"] == "Bearer abc"
    assert receiver.headers[0]["x-team"] == "evals"  # the option wins over the variable


def test_without_the_extra_the_hint_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.otel import require_otel

    # What the exporter imports: the protobuf classes of OTLP (opentelemetry-proto).
    monkeypatch.setitem(
        sys.modules, "opentelemetry.proto.collector.trace.v1.trace_service_pb2", None
    )
    with pytest.raises(ConfigurationError, match=r"orchestrator-judge\[otel\]"):
        require_otel()


def test_building_spans_imports_no_opentelemetry() -> None:
    code = (
        "import sys, orchestrator.cli, orchestrator.otel\n"
        "from orchestrator.otel import SpanBuilder, RunFacts\n"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert found.stdout.split() == ["False"], found.stderr
