"""`orchestrator judge-card`: the card as tables with its flags, as JSON, with labels and a
jury given on the command line, and a clear refusal of an unknown juror."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, write_graph
from test_card_planted import POINTWISE, UNMEASURED, _pointwise_respond, _text, unjudged_run
from test_stability import Flipper
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.providers.fake import FAKE_MODEL


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("card_cli")
    (root / "prompts").mkdir()
    for kind in ("long", "self", "fair", "fair_too"):
        (root / "prompts" / f"{kind}.jinja").write_text(
            f"{kind.removesuffix('_too')}|{{{{ generator }}}}|{{{{ output }}}}"
        )
    graph = root / "graph.yaml"
    graph.write_text(json.dumps({**POINTWISE, "prompts": "prompts"}), encoding="utf-8")
    rng = random.Random(3)
    names = [FAKE_MODEL, "other"]
    rows = [
        {"id": f"r{i}", "output": _text(rng, rng.randint(3, 70)), "generator": names[i % 2]}
        for i in range(45)
    ]
    out = root / "run"
    orc.run(graph, rows, out=out, transport=orc.FakeTransport(_pointwise_respond), cache=False)
    return out


def test_json_dumps_the_record(run: Path) -> None:
    result = CliRunner().invoke(app, ["judge-card", str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    card = orc.JudgeCard.model_validate_json(result.output)
    assert card == orc.judge_card(run)
    assert any(flag.startswith("length bias: long.score") for flag in card.flags)


def test_tables_show_each_part_and_the_flags(run: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    card = orc.judge_card(run)
    fair = {r.id: r.outputs["fair"] for r in orc.RunReader(run).results()}
    labels.write_text("".join(json.dumps({"id": i, "score": s}) + "\n" for i, s in fair.items()))
    result = CliRunner().invoke(
        app,
        ["judge-card", str(run), "--labels", str(labels), "--field", "fair", "--jury", "fair,long"],
    )
    assert result.exit_code == 0, result.output
    for title in ("Reliability of the calls", "Score distribution", "Length bias", "Juries"):
        assert title in result.output
    assert "Self-preference" in result.output
    assert card.flags and all(flag in result.output for flag in card.flags)
    with_labels = orc.judge_card(run, labels=labels, field="fair", jury="fair,long")
    assert with_labels.agreement is not None
    assert with_labels.agreement.statistics["scores"]["pearson"]["r"] == pytest.approx(1.0)
    assert with_labels.juries[0].jurors == ["fair", "long"]


def test_unknown_juror_fails_with_a_message(run: Path) -> None:
    result = CliRunner().invoke(app, ["judge-card", str(run), "--jury", "fair,nope"])
    assert result.exit_code != 0
    assert "nope" in result.output


def test_a_folder_without_trace_fails_with_a_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["judge-card", str(tmp_path / "none")])
    assert result.exit_code != 0
    assert "no trace" in result.output


def test_retest_re_asks_the_server_named_and_shows_the_stability_table(
    tmp_path: Path,
) -> None:
    """`--retest K --rows N --base-url URL`: K×N new requests to the server named (never
    the one the folder records unless named, issue 35: tests/api/test_reask_servers.py),
    and a Stability table in the card."""
    graph = write_graph(tmp_path, judge_graph(temperature=0.7), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": f"text number {i}"} for i in range(12)]
    flipper = Flipper(7)

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        return Reply(content=flipper(SimpleNamespace(body=body)))  # type: ignore[arg-type]

    with FakeServer(respond) as server:
        orc.run(graph, rows, out=tmp_path / "run", base_url=server.base_url, cache=False)
        before = sum(not is_canary(body) for body in server.requests)
        result = CliRunner().invoke(
            app,
            ["judge-card", str(tmp_path / "run"), "--retest", "2", "--rows", "10",
             "--base-url", server.base_url],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        asked = sum(not is_canary(body) for body in server.requests) - before
        assert asked == 2 * 10  # each repeat's start also checks the schema once
    assert "Stability (2 repeats of 10 rows)" in result.output
    assert "judge.score" in result.output


def test_what_the_card_cannot_use_fails_or_is_noted_in_one_line(run: Path, tmp_path: Path) -> None:
    """Item 12 of issue 35: the command exited 0 with empty tables; now one line each."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"x{i}", "score": i}) + "\n" for i in range(3)))
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"id": f"r{i}", "score": i}) + "\n" for i in range(3)))
    for args, message in [
        (["--labels", str(good), "--field", "nope"], "error: field 'nope': no ok result of"),
        (["--labels", str(labels), "--field", "fair"], "none of its 3 label id(s)"),
        (["--judged", "nope"], "error: judged 'nope': not an input of the run"),
    ]:
        result = CliRunner().invoke(app, ["judge-card", str(run), *args])
        assert result.exit_code == 1, (args, result.output)
        assert message in result.output and result.output.count("\n") == 1, result.output
    shown = CliRunner().invoke(app, ["judge-card", str(unjudged_run(tmp_path))])
    assert shown.exit_code == 0, shown.output
    assert f"note: {UNMEASURED}\n" in shown.output
