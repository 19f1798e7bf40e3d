"""`kind: cascade` (issue 38): one decision escalated from a small judge to a large one. With
thresholds a later stage runs only past the stages before it, the trace says which stage
decided and why, examples no stage is sure of end "abstained" (the review queue), and the
requests each stage sent are what the trace counts; without thresholds every stage runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeserver import FakeServer, Reply
from helpers import user_text

import orchestrator as orc
from orchestrator import GraphError
from orchestrator.store.reader import RunReader

TEXTS = 12
SMALL, LARGE = "judge_small", "judge_large"


def cascade_graph(thresholds: list[float | None] | None = None, **decision: Any) -> dict[str, Any]:
    """Two five-sample judges of `text` (models small and large) and their cascade."""
    judge = {"kind": "llm", "prompt": "judge.jinja", "output": {"score": {"type": "integer"}}}
    spec: dict[str, Any] = {"kind": "cascade", "escalate": [SMALL, LARGE], "field": "score"}
    if thresholds is not None:
        spec["thresholds"] = thresholds
    return {
        "name": "cascade",
        "inputs": ["text"],
        "defaults": {"temperature": 0.7, "n": 5, "max_tokens": 60},
        "nodes": {
            SMALL: {**judge, "model": "small"},
            LARGE: {**judge, "model": "large"},
            "decision": {**spec, **decision},
        },
        "outputs": {"score": "decision.score", "stage": "decision.stage"},
    }


PROMPTS = {"judge.jinja": "Rate <<{{ text }}>>"}


def samples(model: str, number: int) -> list[int]:
    """Text i: the small judge is sure (5 of 5) when i % 3 == 0 and split (3 of 5)
    otherwise; the large one is sure unless i % 3 == 2."""
    sure = number % 3 == 0 if model == "small" else number % 3 != 2
    answer = 4 if model == "small" else 5
    return [answer] * 5 if sure else [answer, answer, answer, 1, 2]


def responder(body: dict[str, Any]) -> Reply:
    number = int(user_text(body).split("<<t", 1)[1].split(">>", 1)[0])
    return Reply(samples=[json.dumps({"score": s}) for s in samples(body["model"], number)])


def rows() -> list[dict[str, str]]:
    return [{"id": f"e{i}", "text": f"t{i}"} for i in range(TEXTS)]


def problems(graph: dict[str, Any]) -> list[str]:
    with pytest.raises(GraphError) as caught:
        orc.Graph.from_dict(graph, PROMPTS)
    return [p.message for p in caught.value.problems]


def test_a_cascade_is_checked_before_any_request() -> None:
    graph = cascade_graph([0.8])
    graph["nodes"]["decision"]["escalate"] = [SMALL, "nobody", LARGE]
    graph["nodes"][LARGE]["n"] = 1
    graph["nodes"][SMALL]["when"] = "text"
    found = problems(graph)
    assert "stage 'nobody' is not a node of this graph" in found
    assert "1 thresholds for 3 stages: one per stage" in found
    assert any(m.startswith("stage 'judge_small' has `when:`") for m in found)
    assert any(m.startswith("stage 'judge_large' asks for neither token logprobs") for m in found)
    missing = cascade_graph(field="verdict")
    assert "stage 'judge_small' has no output field 'verdict'" in problems(missing)
    with pytest.raises(GraphError, match="between 0 and 1"):
        orc.Graph.from_dict(cascade_graph([1.5, 0.2]), PROMPTS)


def test_a_later_stage_waits_for_the_earlier_only_with_thresholds() -> None:
    plain = orc.Graph.from_dict(cascade_graph(), PROMPTS)
    assert plain.nodes[LARGE].deps == set() and plain.nodes[LARGE].when is None
    gated = orc.Graph.from_dict(cascade_graph([0.8, 0.8]), PROMPTS)
    assert gated.nodes[LARGE].deps == {SMALL}
    assert gated.order.index(SMALL) < gated.order.index(LARGE) < gated.order.index("decision")


def run(tmp_path: Path, server: FakeServer, thresholds: list[float | None] | None) -> Path:
    out = tmp_path / "run"
    graph = orc.Graph.from_dict(cascade_graph(thresholds), PROMPTS)
    orc.run(graph, rows(), out=out, base_url=server.base_url, structured="server", cache=False)
    return out


def requests_per_stage(out: Path) -> dict[str, int]:
    """Each stage's requests as the trace counts them (first tries and re-asks)."""
    counts = {}
    for stage in (SMALL, LARGE):
        runs = RunReader(out).node_runs(node=stage)
        counts[stage] = sum(t.requests for r in runs if (t := r.tally()) is not None)
    return counts


def test_without_thresholds_every_stage_runs_and_the_last_answers(tmp_path: Path) -> None:
    with FakeServer(responder, model="small", also_serves=("large",)) as server:
        out = run(tmp_path, server, None)
        models = [body["model"] for body in server.requests]
    assert models.count("small") == models.count("large") == TEXTS
    results = {r.id: r for r in RunReader(out).latest_results()}
    assert {r.outputs["stage"] for r in results.values()} == {LARGE}
    assert {r.outputs["score"] for r in results.values()} == {5}


def test_each_example_goes_up_only_as_far_as_needed(tmp_path: Path) -> None:
    with FakeServer(responder, model="small", also_serves=("large",)) as server:
        out = run(tmp_path, server, [0.8, 0.8])
        models = [body["model"] for body in server.requests]
    # The small judge is asked about every text, the large one about the 8 it was unsure of.
    sent = {"judge_small": models.count("small"), "judge_large": models.count("large")}
    assert sent == {SMALL: TEXTS, LARGE: TEXTS - TEXTS // 3}
    assert requests_per_stage(out) == sent
    reader = RunReader(out)
    lines = {r.id: r for r in reader.latest_results()}
    decided = {r.example_id: r for r in reader.node_runs(node="decision")}
    for i in range(TEXTS):
        line, record = lines[f"e{i}"], decided[f"e{i}"]
        if i % 3 == 0:
            assert (line.outputs["stage"], line.outputs["score"]) == (SMALL, 4)
            assert [a["node"] for a in record.value["asked"]] == [SMALL]
        elif i % 3 == 1:
            assert (line.outputs["stage"], line.outputs["score"]) == (LARGE, 5)
            assert record.value["asked"][0]["confidence"] == pytest.approx(0.6)
            assert "judge_small 0.600 sure: passed on (below 0.8)" in record.value["why"]
        else:  # no stage sure: for review
            assert line.status == "abstained" and record.status == "abstained"
            assert "no stage was sure enough" in str(line.error)
            assert record.value["stage"] is None and len(record.value["asked"]) == 2
    skipped = [r for r in reader.node_runs(node=LARGE) if r.status == "skipped"]
    assert sorted(r.example_id for r in skipped) == [f"e{i}" for i in range(0, TEXTS, 3)]


def test_a_stage_that_never_answers_passes_every_example_on(tmp_path: Path) -> None:
    with FakeServer(responder, model="small", also_serves=("large",)) as server:
        out = run(tmp_path, server, [None, 0.8])
    stages = {r.outputs.get("stage") for r in RunReader(out).latest_results() if r.status == "ok"}
    assert stages == {LARGE}


def test_from_labels_to_a_calibrated_cascade_that_escalates(tmp_path: Path) -> None:
    """The whole loop: a run where both stages judge every text, labels, `calibrate
    --cascade --out`, and a run of the written graph that sends each text up only as far
    as its thresholds say, with the requests per stage the trace counts."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    texts = 90  # 30 sure texts per stage: the fewest that can pass at δ/2 with no error
    root = tmp_path / "graph"
    root.mkdir()
    (root / "prompts").mkdir()
    (root / "prompts" / "judge.jinja").write_text(PROMPTS["judge.jinja"])
    graph = root / "cascade.yaml"
    graph.write_text(json.dumps({**cascade_graph(), "prompts": "prompts"}))
    data = [{"id": f"e{i}", "text": f"t{i}"} for i in range(texts)]
    # The small judge is right where it is sure; the large one where it is sure; the texts
    # neither is sure of are labelled 1, which both get wrong.
    truth = {0: 4, 1: 5, 2: 1}
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(json.dumps({"id": f"e{i}", "score": truth[i % 3]}) + "\n" for i in range(texts))
    )
    out = tmp_path / "calibrated"
    with FakeServer(responder, model="small", also_serves=("large",)) as server:
        first = tmp_path / "every-stage"
        orc.run(graph, data, out=first, base_url=server.base_url, structured="server", cache=False)
        args = ["calibrate", str(first), "--labels", str(labels), "--field", "score"]
        args += ["--cascade", f"{SMALL},{LARGE}", "--risk", "0.1", "--delta", "0.1"]
        done = CliRunner().invoke(app, [*args, "--out", str(out)])
        assert done.exit_code == 0, done.output
        assert "judge_small: threshold 1.0; reached by 90, answers 30 (0 wrong)" in done.output
        assert "judge_large: threshold 1.0; reached by 60, answers 30 (0 wrong)" in done.output
        assert "to review 30" in done.output
        # What each stage would send: one request per example that reaches it.
        assert "answers 30 (0 wrong); 90 requests" in done.output
        assert "answers 30 (0 wrong); 60 requests" in done.output
        held = CliRunner().invoke(app, [*args, "--holdout", "0.5", "--format", "json"])
        record = json.loads(held.output)
        # Half the labels kept out: too few sure examples left to certify either stage.
        assert (record["n"], record["held_out"], record["held_out_answered"]) == (45, 45, 0)
        assert record["stages"][0]["threshold"] is None and "review" in record["message"]
        refused = CliRunner().invoke(app, [*args, "--out", str(first)])
        assert refused.exit_code == 1 and "--out" in refused.output
        written = yaml.safe_load((out / "graph.yaml").read_text())
        assert written["nodes"]["decision"]["thresholds"] == [1.0, 1.0]
        server.requests.clear()
        second = tmp_path / "escalating"
        orc.run(
            out / "graph.yaml",
            data,
            out=second,
            base_url=server.base_url,
            structured="server",
            cache=False,
        )
        models = [body["model"] for body in server.requests]
    sent = {SMALL: models.count("small"), LARGE: models.count("large")}
    assert sent == {SMALL: texts, LARGE: texts - texts // 3}
    assert requests_per_stage(second) == sent
    status = {r.id: r.status for r in RunReader(second).latest_results()}
    assert sorted(i for i, s in status.items() if s == "abstained") == sorted(
        f"e{i}" for i in range(2, texts, 3)
    )
    # What no stage answered is the review queue: `review --abstained` walks it.
    from orchestrator.report import make_review_server

    queue = make_review_server(second, "score", abstained=True, labels=tmp_path / "l.jsonl")
    try:
        assert queue.review.progress()["total"] == texts // 3
        first_up = queue.review.next_example()
        assert first_up["id"] == "e2" and first_up["form"]["key"] == "score"
        assert [c["node"] for c in first_up["calls"]] == [SMALL, LARGE, "decision"]
        # The decision's confidence, as the cascade measured it: 3 of 5 samples agreed.
        assert first_up["judge"] == {"answer": None, "confidence": pytest.approx(0.6)}
    finally:
        queue.server_close()
