"""A value JSON cannot hold (a mapping keyed by numbers, an integer past 64 bits) never
crashes a run after its requests are paid for (issue 35, item 5): `validate` refuses it
where the key's type is declared; otherwise its row, or its aggregate, fails with the
reason, and results.jsonl and summary.json are written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import orchestrator_command, write_graph, write_rows

import orchestrator as orc
from orchestrator.store.records import unstorable

PROMPTS = {"judge.jinja": "Judge {{ text }}"}


def spec(outputs: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "name": "keys",
        "inputs": ["text", "rank"],
        "nodes": {
            "judge_a": {
                "kind": "llm",
                "prompt": "judge.jinja",
                "output": {
                    "verdict": {"type": "string", "enum": ["yes", "no"]},
                    "confidence": {"type": "integer", "min": 1, "max": 5},
                    "flag": "boolean",
                },
            }
        },
        "outputs": outputs,
        **extra,
    }


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("{judge_a.confidence: judge_a.verdict}", "'judge_a.confidence', an integer field"),
        ("{'n': {judge_a.flag: 1}}", "'judge_a.flag', a boolean field"),
        ("[{3: judge_a.verdict}]", "the number 3"),
        ("{1: 'a'} if judge_a.flag else none", "the number 1"),
    ],
)
def test_validate_refuses_a_mapping_keyed_by_a_declared_number(source: str, says: str) -> None:
    with pytest.raises(orc.GraphError) as refused:
        orc.graph_from_dict(spec({"m": source}), PROMPTS)
    (problem,) = refused.value.problems
    assert problem.field == "outputs.m"
    assert says in problem.message and "| string" in problem.message


@pytest.mark.parametrize(
    "source",
    [
        "{judge_a.verdict: judge_a.confidence}",  # an enum of strings: text keys
        "{judge_a.confidence | string: judge_a.verdict}",
        "{1: 'low', 5: 'high'}[judge_a.confidence] if judge_a.confidence in [1, 5] else 'mid'",
    ],
)
def test_text_keys_and_lookups_in_a_numbered_mapping_compile(source: str) -> None:
    orc.graph_from_dict(spec({"m": source}), PROMPTS)


def reply(request: Any) -> str:
    return json.dumps({"verdict": "yes", "confidence": 4, "flag": True})


def test_a_key_known_only_at_run_time_fails_its_row_and_the_run_goes_on(tmp_path: Path) -> None:
    """`rank` is a dataset input: its type is the rows'. A number there fails the row with
    the reason; text is fine; a re-run resumes instead of crashing again."""
    graph = orc.graph_from_dict(spec({"m": "{rank: judge_a.verdict}"}), PROMPTS)
    rows = [{"id": "a", "text": "x", "rank": 3}, {"id": "b", "text": "y", "rank": "top"}]
    out = tmp_path / "run"
    for _ in range(2):
        result = orc.run(graph, rows, out=out, transport=orc.FakeTransport(reply))
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    by_id = {line["id"]: line for line in lines}
    assert by_id["b"] == {"id": "b", "status": "ok", "m": {"top": "yes"}}
    failed = by_id["a"]
    assert failed["status"] == "failed" and failed["row"] == 1
    assert "outputs.m" in failed["error"] and "key 3 (int)" in failed["error"]
    assert result.manifest.status == "complete"


@orc.register("count_by_value_r35")
def count_by_value(values: list[Any]) -> dict[Any, int]:
    """A user's aggregate that counts answers by value: keyed by numbers for a score."""
    counts: dict[Any, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def test_an_aggregate_json_cannot_hold_is_recorded_failed(tmp_path: Path) -> None:
    aggregates = {
        "by_confidence": {
            "function": "count_by_value_r35",
            "args": {"values": "results | map(attribute='confidence') | list"},
        },
        "by_verdict": {
            "function": "count_by_value_r35",
            "args": {"values": "results | map(attribute='verdict') | list"},
        },
    }
    outputs = {"confidence": "judge_a.confidence", "verdict": "judge_a.verdict"}
    graph = orc.graph_from_dict(spec(outputs, aggregates=aggregates), PROMPTS)
    out = tmp_path / "run"
    rows = [{"id": "a", "text": "x", "rank": 1}, {"id": "b", "text": "y", "rank": 2}]
    result = orc.run(graph, rows, out=out, transport=orc.FakeTransport(reply))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["by_verdict"] == {"yes": 2}
    failed = summary["by_confidence"]
    assert failed["failed"] is True
    assert "aggregates.by_confidence" in failed["error"] and "key 4 (int)" in failed["error"]
    assert result.summary.aggregates["by_confidence"]["failed"] is True


def test_the_command_line_exits_4_with_the_reason_and_no_traceback(tmp_path: Path) -> None:
    """The CLI over a run whose aggregate returns a mapping JSON cannot hold."""
    graph = spec(
        {"confidence": "judge_a.confidence"},
        aggregates={
            "big": {"function": "identity", "args": {"value": "2 ** 70"}},
            "n": {"function": "identity", "args": {"value": "results | length"}},
        },
    )
    path = write_graph(tmp_path / "g", graph, PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "x", "rank": 1}])
    from fakeserver import FakeServer, schema_responder

    out = tmp_path / "run"
    with FakeServer(schema_responder) as server:
        done = orchestrator_command(
            "run", str(path), "--data", str(data), "--out", str(out),
            "--base-url", server.base_url, "--no-cache",
        )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "aggregate big failed" in done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 1 and summary["big"]["failed"] is True
    assert "64-bit" in summary["big"]["error"]


def test_unstorable_names_the_place() -> None:
    assert unstorable({"a": [1, {"b": 2}]}) is None
    assert unstorable({"a": [1, {2: "x"}]}) == (
        "key 2 (int) at a[1] is not text, and a JSON object's keys must be: make it text "
        "(`| string`)"
    )
    assert unstorable({"a": 2**64}) == "Integer exceeds 64-bit range at a"
