"""An LLM node's `abstain:` key (issue 29): an example whose judge is less sure than the
threshold ends "abstained" (not failed), the nodes after it do not run, it is counted on its
own, and a resumed run does not ask again."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from helpers import judge_graph, write_graph
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.cli.app import console
from orchestrator.cli.run import _print_summary
from orchestrator.errors import GraphError, NodeAbstained, abstain_reason
from orchestrator.kinds.abstain import Abstain, AbstainRule
from orchestrator.providers.fake import FakeAnswer, FakeRequest
from orchestrator.report import build_report
from orchestrator.store.reader import RunReader, TraceReader
from orchestrator.store.trace import NodeRecord

SURE, SPLIT = 6, 4  # examples whose five samples agree; examples whose vote splits 2 of 5


def _graph(threshold: Any = "params.abstain_at", **abstain: Any) -> dict[str, Any]:
    graph = judge_graph(temperature=0.7, n=5)
    graph["params"] = {"abstain_at": 0.6}
    graph["nodes"]["judge"]["abstain"] = {"threshold": threshold, **abstain}
    graph["nodes"]["echo"] = {
        "kind": "compute",
        "function": "identity",
        "args": {"value": "judge[0].score"},
    }
    graph["outputs"] = {"score": "judge[0].score", "echo": "echo"}
    graph["aggregates"] = {
        "mean_score": {
            "function": "mean",
            "args": {"values": "results | map(attribute='score') | list"},
        }
    }
    return graph


class Judge:
    """Five samples per text: all 7 for the first SURE texts, a 2-of-5 majority after."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: FakeRequest) -> FakeAnswer:
        self.calls += 1
        number = int(request.messages[-1]["content"].rsplit("t", 1)[-1].rstrip(">"))
        scores = [7] * 5 if number < SURE else [7, 7, 2, 9, 3]
        return FakeAnswer([json.dumps({"score": s}) for s in scores])


def _rows() -> list[dict[str, str]]:
    return [{"id": f"e{i}", "text": f"t{i}"} for i in range(SURE + SPLIT)]


def _run(out: Path, judge: Judge, params: dict[str, Any] | None = None) -> orc.RunResult:
    graph = orc.Graph.from_dict(_graph(), {"judge.jinja": "Rate <<{{ text }}>>"})
    return orc.run(
        graph,
        _rows(),
        out=out,
        transport=orc.FakeTransport(judge),
        structured="server",
        cache=False,
        params=params or {},
    )


def test_unsure_examples_abstain_and_the_rest_answer(tmp_path: Path) -> None:
    judge = Judge()
    result = _run(tmp_path / "run", judge)
    statuses = {line.id: line.status for line in result.results}
    assert [statuses[f"e{i}"] for i in range(SURE + SPLIT)] == ["ok"] * SURE + ["abstained"] * SPLIT
    assert result.abstained[0].error == "abstained: confidence 0.40 below 0.60 at node judge"
    assert not result.failed and len(result.ok) == SURE
    counts = result.manifest.counts
    assert (counts.examples_ok, counts.examples_failed, counts.examples_abstained) == (
        SURE,
        0,
        SPLIT,
    )
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["counts"]["examples_abstained"] == SPLIT
    assert written["aggregates_include_abstained"] is False
    assert written["mean_score"] == 7.0
    with TraceReader.open(RunReader(tmp_path / "run").traces_path) as trace:
        runs = list(trace.node_runs())
    judged = {r.example_id: r for r in runs if r.node == "judge"}
    # Every judged example keeps its confidence, answered or not, for an audit.
    assert judged["e0"].status == "ok"
    assert judged["e0"].abstain == {
        "field": "score",
        "threshold": 0.6,
        "confidence": 1.0,
        "source": "samples",
    }
    assert judged["e9"].status == "abstained" and judged["e9"].abstain is not None
    assert judged["e9"].abstain["confidence"] == pytest.approx(0.4)
    assert judged["e9"].error == result.abstained[0].error
    # The node after the judge ran for the answered examples only.
    echoed = {r.example_id for r in runs if r.node == "echo"}
    assert echoed == {f"e{i}" for i in range(SURE)}


def test_a_resumed_run_does_not_ask_again_for_abstained_examples(tmp_path: Path) -> None:
    judge = Judge()
    _run(tmp_path / "run", judge)
    asked = judge.calls
    again = _run(tmp_path / "run", judge)
    assert judge.calls == asked
    assert again.manifest.counts.examples_resumed == SURE + SPLIT
    assert again.manifest.counts.examples_abstained == SPLIT
    assert len(again.abstained) == SPLIT


def test_the_threshold_comes_from_a_param(tmp_path: Path) -> None:
    result = _run(tmp_path / "run", Judge(), {"abstain_at": 0.3})
    assert not result.abstained and len(result.ok) == SURE + SPLIT


def _problems(tmp_path: Path, graph: dict[str, Any]) -> str:
    path = write_graph(tmp_path / "g", graph, {"judge.jinja": "Rate {{ text }}"})
    with pytest.raises(GraphError) as caught:
        orc.load_graph(path)
    return str(caught.value)


def test_compile_checks_name_file_node_and_field(tmp_path: Path) -> None:
    graph = _graph(threshold=1.5, field="grade")
    graph["defaults"]["n"] = 1
    text = _problems(tmp_path, graph)
    assert "graph.yaml" in text
    assert "judge" in text and "abstain.field" in text and "'grade' is not a field" in text
    assert "abstain.threshold" in text and "between 0 and 1, got 1.5" in text
    # The same words calibrate uses to say which setting gives a confidence.
    assert "`logprobs: 5`" in text and "`n: 5`" in text


def test_a_field_must_be_named_when_the_output_has_several(tmp_path: Path) -> None:
    graph = _graph()
    graph["nodes"]["judge"]["output"]["reason"] = "string"
    assert "several fields (score, reason)" in _problems(tmp_path, graph)
    graph["nodes"]["judge"]["abstain"]["field"] = "score"
    write_graph(tmp_path / "ok", graph, {"judge.jinja": "Rate {{ text }}"})
    orc.load_graph(tmp_path / "ok" / "graph.yaml")  # no problem once it is named


def test_logprobs_give_the_confidence_of_the_token_where_the_field_starts() -> None:
    rule = AbstainRule("score", threshold=0.5)
    tokens = [{"token": '{"score": ', "logprob": 0.0}, {"token": "4", "logprob": math.log(0.3)}]
    value = {"score": 4, "_logprobs": [*tokens, {"token": "}", "logprob": 0.0}]}
    rec = NodeRecord(example_id="e", node="judge")
    ends = rule.check("judge", {}, value, rec)
    assert isinstance(ends, NodeAbstained) and rec.status == "abstained"
    assert rec.abstain is not None and rec.abstain["confidence"] == pytest.approx(0.3)
    assert rec.abstain["source"] == "logprobs"
    Abstain(threshold=0.5)  # the field may be left out (filled in from a one-field output)


def test_summarize_the_report_and_the_run_table_count_abstained_apart(tmp_path: Path) -> None:
    result = _run(tmp_path / "run", Judge())
    done = CliRunner().invoke(app, ["summarize", str(tmp_path / "run")])
    assert done.exit_code == 0, done.output
    assert f"abstained: {SPLIT} examples, left out of the means and aggregates" in done.output
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["aggregates_include_abstained"] is False and written["mean_score"] == 7.0
    assert "aggregates_include_abstained" not in result.summary.aggregates
    page = build_report(tmp_path / "run").read_text(encoding="utf-8")
    assert "abstained (not in means or aggregates)" in page
    assert '<option value="abstained">abstained</option>' in page
    with console.capture() as captured:
        _print_summary(result.manifest, tmp_path / "run")
    assert "abstained (not in means or aggregates)" in captured.get()


def test_a_graph_that_cannot_abstain_writes_no_note(tmp_path: Path) -> None:
    graph = judge_graph(temperature=0.7, n=5)
    graph["outputs"] = {"score": "judge[0].score"}
    result = orc.run(
        orc.Graph.from_dict(graph, {"judge.jinja": "Rate <<{{ text }}>>"}),
        _rows(),
        out=tmp_path / "run",
        transport=orc.FakeTransport(Judge()),
        structured="server",
        cache=False,
    )
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "aggregates_include_abstained" not in written
    assert written["counts"]["examples_abstained"] == 0 and not result.abstained


def test_a_once_node_may_not_abstain(tmp_path: Path) -> None:
    graph = _graph(field="score")
    graph["nodes"]["judge"]["once"] = True
    graph["inputs"] = []
    graph["nodes"]["judge"]["prompt"] = "judge.jinja"
    text = _problems(tmp_path, graph)
    assert "abstain on a once node" in text


def test_a_reply_without_confidence_fails_the_example_and_says_what_to_ask_for(
    tmp_path: Path,
) -> None:
    graph = _graph()
    graph["params"]["samples"] = 5
    graph["defaults"]["n"] = "params.samples"  # known per call only: checked at run time
    result = orc.run(
        orc.Graph.from_dict(graph, {"judge.jinja": "Rate <<{{ text }}>>"}),
        _rows()[:1],
        transport=orc.FakeTransport(lambda request: json.dumps({"score": 7})),
        structured="server",
        cache=False,
        params={"samples": 1},
    )
    (failed,) = result.failed
    assert "neither token logprobs nor several samples" in (failed.error or "")
    assert "`logprobs: 5`" in (failed.error or "")


def test_the_reason_never_shows_a_confidence_equal_to_its_threshold() -> None:
    assert (
        abstain_reason("judge", 0.42, 0.6) == "abstained: confidence 0.42 below 0.60 at node judge"
    )
    assert "confidence 0.599 below 0.600" in abstain_reason("judge", 0.599, 0.6)


def test_a_tolerance_counts_near_samples_as_agreeing_as_calibrate_does(tmp_path: Path) -> None:
    from orchestrator.cli.calibrate import abstain_line
    from orchestrator.compute import confidence as shared

    samples = [{"score": s} for s in (7, 8, 2, 7, 9)]
    near = shared.judged(samples, "score", 1.0)
    assert near is not None and (near.answer, near.confidence) == (7, 0.6)  # 7, 8, 7
    assert shared.confidence(samples, "score", 7, 1.0) == (0.6, "samples")
    exact = shared.judged(samples, "score")
    assert exact is not None and exact.confidence == 0.4
    # The split examples' samples are 7, 7, 2, 9, 3: within 2 of 7, three of five agree.
    graph = orc.Graph.from_dict(_graph(0.6, tolerance=2), {"judge.jinja": "Rate <<{{ text }}>>"})
    result = orc.run(
        graph, _rows(), out=tmp_path / "run", transport=orc.FakeTransport(Judge()),
        structured="server", cache=False,
    )  # fmt: skip
    assert len(result.abstained) == 0 and len(result.ok) == SURE + SPLIT
    assert (
        abstain_line(0.6, "score", 2.0) == "abstain: {threshold: 0.6, field: score, tolerance: 2.0}"
    )
    assert abstain_line(0.6, "score") == "abstain: {threshold: 0.6, field: score}"
    with pytest.raises(GraphError, match=r"abstain\.tolerance"):
        orc.Graph.from_dict(_graph(0.6, tolerance=-1), {"judge.jinja": "Rate <<{{ text }}>>"})


@pytest.mark.parametrize("tolerance", [math.inf, math.nan])
def test_a_tolerance_that_is_not_finite_is_refused(tolerance: float) -> None:
    # Every sample is within infinity of the majority: confidence 1 on every example.
    with pytest.raises(GraphError, match=r"abstain\.tolerance"):
        orc.Graph.from_dict(
            _graph(0.6, tolerance=tolerance), {"judge.jinja": "Rate <<{{ text }}>>"}
        )


def test_compare_counts_abstained_examples_in_its_runs_table(tmp_path: Path) -> None:
    from orchestrator.report.compare_tables import runs_table

    _run(tmp_path / "strict", Judge())
    _run(tmp_path / "lenient", Judge(), params={"abstain_at": 0.0})
    found = orc.compare(tmp_path / "strict", tmp_path / "lenient")
    assert [len(run.abstained) for run in found.runs] == [SPLIT, 0]
    assert "<th>abstained</th>" in runs_table(found, {})
    shown = CliRunner().invoke(
        app, ["compare", str(tmp_path / "strict"), str(tmp_path / "lenient")]
    )
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.output.splitlines() if "failed" in line)
    assert "abstained" in header and "missing" in header


def test_the_judge_card_counts_abstentions_per_node(tmp_path: Path) -> None:
    from orchestrator.analysis.card.cells import sections

    _run(tmp_path / "run", Judge())
    card = orc.judge_card(tmp_path / "run")
    (judge,) = [r for r in card.reliability if r.node == "judge"]
    assert (judge.calls, judge.abstentions, judge.failures) == (SURE + SPLIT, SPLIT, 0)
    table = sections(card)[0]
    assert table.columns[-1] == "abstained" and table.rows[0][-1] == str(SPLIT)
