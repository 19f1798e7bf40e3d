"""`orchestrator calibrate`: the JSON a threshold gives, a plain "no threshold" that still
exits 0, and a refusal that says which node setting to ask for."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import judge_graph
from test_calibrate import _labels, _run, _with_logprob
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.providers.fake import FakeAnswer, FakeRequest


def _folder(tmp_path: Path, wrong_when_sure: bool) -> tuple[Path, Path]:
    ids = [f"e{i}" for i in range(120)]
    values = {k: _with_logprob(4, 0.95 if i < 100 else 0.4) for i, k in enumerate(ids)}
    truth = {k: 4 if (i < 100) != wrong_when_sure else 1 for i, k in enumerate(ids)}
    run = _run(tmp_path / "run", values, {k: 4 for k in ids})
    return run, _labels(tmp_path / "labels.jsonl", truth)


def _args(run: Path, labels: Path, *more: str) -> list[str]:
    base = ["calibrate", str(run), "--labels", str(labels), "--node", "judge"]
    return [*base, "--field", "score", "--risk", "0.1", *more]


def test_json_has_threshold_coverage_and_risk(tmp_path: Path) -> None:
    run, labels = _folder(tmp_path, wrong_when_sure=False)
    result = CliRunner().invoke(app, _args(run, labels, "--format", "json"))
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["threshold"] == 0.95
    assert found["coverage"] == 100 / 120
    assert (found["risk"], found["n"], found["source"]) == (0.0, 120, "logprobs")
    assert found == orc.calibrate(run, labels, node="judge", field="score", risk=0.1).model_dump()


def test_an_unmet_risk_gives_a_null_threshold_and_exits_0(tmp_path: Path) -> None:
    run, labels = _folder(tmp_path, wrong_when_sure=True)
    result = CliRunner().invoke(app, _args(run, labels, "--format", "json"))
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert (found["threshold"], found["coverage"]) == (None, 0.0)
    plain = CliRunner().invoke(app, _args(run, labels))
    assert plain.exit_code == 0 and "no threshold" in plain.output


def test_a_run_without_confidence_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", {"e1": {"score": 4}}, {"e1": 4})
    labels = _labels(tmp_path / "labels.jsonl", {"e1": 4})
    result = CliRunner().invoke(app, _args(run, labels))
    assert result.exit_code == 1
    assert "logprobs:" in result.output and "n:" in result.output


def test_a_run_with_n_samples_calibrates_end_to_end(tmp_path: Path) -> None:
    """A real run (fake transport) with `n: 5`: the trace's samples give the confidence."""
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(150)]

    def respond(request: FakeRequest) -> FakeAnswer:
        number = int(request.messages[-1]["content"].rsplit("t", 1)[-1].rstrip(">"))
        # The first 120 texts get five samples that agree; the rest a split vote.
        scores = [7] * 5 if number < 120 else [7, 2, 9, 7, 3]
        return FakeAnswer([json.dumps({"score": s}) for s in scores])

    graph = judge_graph(temperature=0.7, n=5)
    graph["outputs"] = {"score": "judge[0].score"}
    run = tmp_path / "run"
    orc.run(
        orc.Graph.from_dict(graph, {"judge.jinja": "Rate <<{{ text }}>>"}),
        rows,
        out=run,
        transport=orc.FakeTransport(respond),
        structured="server",
        cache=False,
    )
    # The judge is right where its samples agree, wrong where they split.
    labels = _labels(
        tmp_path / "labels.jsonl", {r["id"]: 7 if i < 120 else 4 for i, r in enumerate(rows)}
    )
    result = CliRunner().invoke(app, _args(run, labels, "--format", "json"))
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert (found["source"], found["threshold"], found["risk"]) == ("samples", 1.0, 0.0)
    assert found["coverage"] == 120 / 150


def test_a_tolerance_that_is_not_a_finite_number_is_refused_in_one_line(tmp_path: Path) -> None:
    """Issue 35 item 10: `--tolerance nan` used to "find" a threshold with risk 0.000 (no
    distance exceeds NaN) and print `tolerance: nan` to paste."""
    run, labels = _folder(tmp_path, wrong_when_sure=True)
    for bad in ("nan", "inf"):
        result = CliRunner().invoke(app, _args(run, labels, "--tolerance", bad))
        assert result.exit_code == 1, result.output
        said = result.output.strip()
        assert len(said.splitlines()) == 1 and "tolerance" in said and bad in said, said
        assert "abstain:" not in said
