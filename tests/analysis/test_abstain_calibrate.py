"""`calibrate` then `abstain:` (issue 29): the threshold calibrate prints, pasted through
`--param` into a second run, answers exactly the examples calibrate counted as answered;
and both read confidence through the one function in compute/confidence.py."""

from __future__ import annotations

import importlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeserver import FakeServer, Reply
from helpers import judge_graph, results, user_text, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.compute import confidence as shared
from orchestrator.store.reader import RunReader, TraceReader

# The module, not the package's `calibrate` export of the same name.
calibrate_module = importlib.import_module("orchestrator.analysis.calibrate")

ROWS = 150


def _agreeing(number: int) -> int:
    """How many of five samples say 7 (the rest differ from it and from each other)."""
    return 5 if number < 60 else 4 if number < 100 else 3 if number < 130 else 2


def _label(number: int) -> int:
    # Right wherever four or five samples agree; half right at three, wrong at two.
    if number < 100:
        return 7
    return 7 if number < 130 and number % 2 == 0 else 3


def _respond(body: dict[str, Any]) -> Reply:
    found = re.search(r"<<t(\d+)>>", user_text(body))
    if found is None:  # the run's first request, a probe of the server
        return Reply(content=json.dumps({"score": 7}))
    number = int(found.group(1))
    scores = [7] * _agreeing(number) + [2, 9, 3][: 5 - _agreeing(number)]
    return Reply(samples=[json.dumps({"score": s}) for s in scores])


def _graph(tmp_path: Path) -> Path:
    graph = judge_graph(temperature=0.7, n=5)
    graph["params"] = {"abstain_at": 0.0}
    graph["nodes"]["judge"]["abstain"] = {"threshold": "params.abstain_at", "field": "score"}
    graph["outputs"] = {"score": "judge[0].score"}  # the first sample is the majority here
    return write_graph(tmp_path / "g", graph, {"judge.jinja": "Rate <<{{ text }}>>"})


def _run(graph: Path, data: Path, out: Path, url: str, threshold: str) -> None:
    args = ["run", str(graph), "--data", str(data), "--out", str(out), "--base-url", url]
    done = CliRunner().invoke(app, [*args, "--no-cache", "--param", f"abstain_at={threshold}"])
    assert done.exit_code == 0, done.output


def test_the_pasted_threshold_answers_what_calibrate_counted(tmp_path: Path) -> None:
    graph = _graph(tmp_path)
    data = write_rows(
        tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(ROWS)]
    )
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(json.dumps({"id": f"e{i}", "score": _label(i)}) + "\n" for i in range(ROWS))
    )
    with FakeServer(_respond) as server:
        _run(graph, data, tmp_path / "first", server.base_url, "0")
        said = CliRunner().invoke(
            app,
            [
                *("calibrate", str(tmp_path / "first"), "--labels", str(labels)),
                *("--node", "judge", "--field", "score", "--risk", "0.1"),
            ],
        )
        assert said.exit_code == 0, said.output
        last = said.output.strip().splitlines()[-1]
        assert last == "abstain: {threshold: 0.8, field: score}"
        pasted = yaml_threshold(last)
        _run(graph, data, tmp_path / "second", server.base_url, pasted)
    found = orc.calibrate(tmp_path / "first", labels, node="judge", field="score", risk=0.1)
    lines = results(tmp_path / "second")
    answered = {k for k, line in lines.items() if line["status"] == "ok"}
    assert len(answered) == found.answered == 100
    assert answered == {f"e{i}" for i in range(ROWS) if _agreeing(i) / 5 >= found.threshold}
    assert {line["status"] for line in lines.values()} == {"ok", "abstained"}
    # The first run answered everything at threshold 0; its trace kept each confidence.
    with TraceReader.open(RunReader(tmp_path / "first").traces_path) as trace:
        kept = {r.example_id: r for r in trace.node_runs(node="judge")}
    first = results(tmp_path / "first")
    for ident, rec in kept.items():
        assert rec.abstain is not None
        again = shared.confidence(rec.value, "score", first[ident]["score"], 0.0)
        assert again is not None and rec.abstain["confidence"] == again[0]
        assert rec.abstain["confidence"] == _agreeing(int(ident[1:])) / 5


def yaml_threshold(line: str) -> str:
    """The threshold of a pasted `abstain: {threshold: T, field: F}` line, as text."""
    return line.split("threshold:", 1)[1].split(",", 1)[0].strip()


def test_calibrate_reads_confidence_through_the_shared_functions() -> None:
    # No copy: calibrate's names are the shared module's own functions, and its confidence
    # is `judged`, the one `abstain:` applies at run time.
    assert calibrate_module.judged is shared.judged
    assert calibrate_module.wrong_answer is shared.wrong_answer


def test_run_time_and_calibrate_agree_on_samples_and_logprobs() -> None:
    samples = [{"score": 7}, {"score": 2}, {"score": 7}, {"score": 9}, {"score": 2}]
    at_run = shared.judged(samples, "score")
    assert at_run is not None and (at_run.answer, at_run.confidence) == (7, 0.4)  # tie: first
    assert shared.confidence(samples, "score", 7, 0.0) == (at_run.confidence, "samples")
    tokens = [{"token": '{"score": ', "logprob": 0.0}, {"token": "4", "logprob": math.log(0.7)}]
    value = {"score": 4, "_logprobs": tokens}
    at_run = shared.judged(value, "score")
    assert at_run is not None and at_run.confidence == pytest.approx(0.7)
    assert shared.confidence(value, "score", 4, 0.0) == (at_run.confidence, "logprobs")
    assert shared.judged({"score": 4}, "score") is None  # neither: no confidence


# -- issue 35 item 11: one confidence when the result field is not the samples' majority ----

# Three kinds of example, 5 samples each, the result field the samples' median. Where the
# median is not the most common sample, "agreement with the result" (what calibrate used to
# measure) and "agreement with the majority" (what `abstain:` applies) differ.
MEDIAN_KINDS = (
    (60, [7, 7, 7, 7, 7], 7),  # unanimous, right
    (40, [7, 7, 1, 2, 9], 7),  # majority 7 (0.4) = median, right
    (30, [2, 2, 7, 8, 9], 1),  # majority 2 (0.4), median 7 (0.2), wrong
)


def _median_samples(number: int) -> tuple[list[int], int]:
    """The scripted samples of example `number` and its human label."""
    start = 0
    for count, samples, label in MEDIAN_KINDS:
        if number < start + count:
            return samples, label
        start += count
    raise AssertionError(number)


def _median_graph(abstain: dict[str, Any] | None) -> dict[str, Any]:
    graph = judge_graph(temperature=0.7, n=5)
    graph["nodes"]["median_score"] = {
        "kind": "compute",
        "function": "median",
        "args": {"values": "judge | map(attribute='score') | list"},
    }
    graph["outputs"] = {"score": "median_score"}
    if abstain is not None:
        graph["nodes"]["judge"]["abstain"] = abstain
    return graph


def _median_reply(request: Any) -> orc.FakeAnswer:
    number = int(str(request.messages[-1]["content"]).rsplit("t", 1)[-1])
    samples, _ = _median_samples(number)
    return orc.FakeAnswer([json.dumps({"score": s}) for s in samples])


def test_the_pasted_line_answers_what_calibrate_said_when_the_result_is_a_median(
    tmp_path: Path,
) -> None:
    total = sum(count for count, _, _ in MEDIAN_KINDS)
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(total)]
    templates = {"judge.jinja": "Rate {{ text }}"}
    first = tmp_path / "first"
    orc.run(
        orc.Graph.from_dict(_median_graph(None), templates),
        rows,
        out=first,
        transport=orc.FakeTransport(_median_reply),
        structured="server",
    )
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"id": f"e{i}", "score": _median_samples(i)[1]}) + "\n" for i in range(total)
        )
    )
    said = CliRunner().invoke(
        app,
        [
            *("calibrate", str(first), "--labels", str(labels)),
            *("--node", "judge", "--field", "score", "--risk", "0.1"),
        ],
    )
    assert said.exit_code == 0, said.output
    counted = re.search(r"answers (\d+) of (\d+) labelled", said.output)
    assert counted is not None, said.output
    pasted = yaml.safe_load(said.output.strip().splitlines()[-1])["abstain"]
    second = tmp_path / "second"
    orc.run(
        orc.Graph.from_dict(_median_graph(pasted), templates),
        rows,
        out=second,
        transport=orc.FakeTransport(_median_reply),
        structured="server",
    )
    statuses = [line["status"] for line in results(second).values()]
    assert int(counted.group(2)) == total
    assert statuses.count("ok") == int(counted.group(1))
    assert statuses.count("abstained") == total - int(counted.group(1))
    # The unanimous examples alone: the split ones are as sure of their majority whether
    # the median is right (second kind) or wrong (third), so no threshold keeps one kind.
    assert int(counted.group(1)) == 60
