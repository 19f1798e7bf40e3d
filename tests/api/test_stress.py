"""`orc.stress` / `orchestrator stress` (issue 39): a judge node asked again on
counterfactual versions of the judged text. Fake judges with a planted bias are flagged by
the perturbation that exposes it; a plain judge is flagged no more often than the level."""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator
from html import escape
from pathlib import Path

import numpy as np
import pytest
from fakeserver import FakeServer, Reply, judge_responder, schema_responder
from helpers import is_canary, judge_graph, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.analysis import (
    infer_pair,
    stress_effect,
    stress_flags,
    stress_perturbations,
    stress_variants,
)
from orchestrator.analysis.stress import BUILTIN, markdown, pad, truncate, typos
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError

WORDS = ["river", "stone", "cloud", "paper", "lamp", "window", "garden", "music", "letter"]


def texts(n: int) -> list[dict[str, str]]:
    """Rows of three to five short sentences each, of varied words."""
    rng = random.Random(1)
    rows = []
    for i in range(n):
        said = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 8))).capitalize() + "."
            for _ in range(rng.randint(3, 5))
        ]
        rows.append({"id": f"e{i}", "text": " ".join(said)})
    return rows


@pytest.fixture
def run(tmp_path: Path) -> Iterator[tuple[Path, FakeServer]]:
    """A finished one-judge run (graph's `judged: text`), and a server to stress it on."""
    spec = {**judge_graph(), "judged": "text"}
    graph = write_graph(tmp_path / "g", spec, {"judge.jinja": "Rate 1-10: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", texts(14))
    with FakeServer(judge_responder()) as server:
        orc.run(graph, data, out=tmp_path / "run", base_url=server.base_url, cache=False)
        yield tmp_path / "run", server


def node_requests(server: FakeServer, since: int) -> int:
    return sum(not is_canary(body) for body in server.requests[since:])


def test_the_perturbations_hold_what_they_say() -> None:
    rng = random.Random(0)
    text = "The river runs. A stone sits still. Clouds pass over. The lamp is lit."
    for factor in (1.5, 2.0):
        padded = pad(text, factor, rng)
        assert padded.startswith(text) and len(padded) >= factor * len(text)
    assert truncate(text) == "The river runs. A stone sits still."
    typed = typos(text, random.Random(3), share=1.0)
    assert typed != text and sorted(typed) == sorted(text)  # the same letters
    shown = markdown(text).replace("## Answer", "").replace("- ", "").split()
    assert shown == text.split()
    rows = [{"id": "a", "left": "x", "right": "y"}]
    assert stress_variants(BUILTIN["order"], rows, "text", 0, ("left", "right")) == {
        "swapped": [{"id": "a", "left": "y", "right": "x"}]
    }


def test_a_length_biased_judge_is_flagged_by_length(
    run: tuple[Path, FakeServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, server = run
    server.responder = judge_responder("length")
    before = len(server.requests)
    with caplog.at_level(logging.INFO, logger="orchestrator"):
        report = orc.stress(
            folder, node="judge", perturb=["length"], rows=12, base_url=server.base_url, cache=False
        )
    told = next(r.getMessage() for r in caplog.records if "Stress of judge" in r.getMessage())
    # Announced before sending: 3 variants and a baseline on 12 rows.
    assert "at most 48 requests" in told and server.base_url in told
    assert node_requests(server, before) == report.requests == 48
    assert any(f.startswith("length: judge.score rises") and "padded 2x" in f for f in report.flags)
    assert any(f.startswith("length: judge.score falls") and "truncated" in f for f in report.flags)
    assert all(f.startswith("length:") for f in report.flags)


def test_an_injection_following_judge_is_flagged_by_injection_and_a_plain_one_is_not(
    run: tuple[Path, FakeServer], tmp_path: Path
) -> None:
    folder, server = run
    server.responder = judge_responder("injection")
    found = orc.stress(
        folder,
        node="judge",
        perturb=["injection"],
        rows=12,
        base_url=server.base_url,
        out=tmp_path / "following",
    )
    injected = [e for e in found.perturbations if e.perturbation == "injection"]
    assert {e.variant for e in injected if e.flagged} == {"instruction", "grade line"}
    assert all(e.estimate > 3 for e in injected)
    assert sum(f.startswith("injection: judge.score rises") for f in found.flags) == 2
    server.responder = judge_responder()
    # Another judge behind the same URL and model: another folder (the same one would
    # resume the first judge's answers, as any run with the same key does).
    plain = orc.stress(
        folder,
        node="judge",
        perturb=["injection"],
        rows=12,
        base_url=server.base_url,
        out=tmp_path / "plain",
    )
    # (That the plain judge is flagged no more often than the level is the simulation's.)
    assert not any(e.flagged for e in plain.perturbations if e.perturbation == "injection")


def test_a_plain_judge_is_flagged_no_more_often_than_the_level() -> None:
    """Simulation: a judge whose answers a perturbation moves at random, never one way
    (scores redrawn 1–10; verdicts redrawn true/false), 6 effects a report, Holm across
    them. Reports with any flag: at most α = 0.05, with a Monte-Carlo allowance of three
    standard errors over 200 reports (0.046)."""
    rng = np.random.default_rng(7)
    reports, n = 200, 50
    flagged = 0
    for _ in range(reports):
        effects = []
        for k in range(3):
            base, after = rng.integers(1, 11, n), rng.integers(1, 11, n)
            pairs = list(zip(base.tolist(), after.tolist(), strict=True))
            effects.append(
                stress_effect("p", f"v{k}", "judge", "score", pairs, permutations=500, resamples=0)
            )
            yes, again = rng.random(n) < 0.5, rng.random(n) < 0.5
            pairs = list(zip(yes.tolist(), again.tolist(), strict=True))
            effects.append(stress_effect("p", f"v{k}", "judge", "ok", pairs, permutations=500))
        flagged += bool(stress_flags([e for e in effects if e is not None]))
    assert flagged / reports <= 0.05 + 0.046


def test_the_command_reports_perturbations_and_flags_as_json(
    run: tuple[Path, FakeServer], tmp_path: Path
) -> None:
    folder, server = run
    server.responder = judge_responder("length")
    done = CliRunner().invoke(
        app,
        [
            *["stress", str(folder), "--node", "judge", "--perturb", "length,typos"],
            *["--rows", "6", "--base-url", server.base_url, "--format", "json"],
            *["--out", str(tmp_path / "s")],
        ],
    )
    assert done.exit_code == 0, done.output
    found = json.loads(done.output)
    assert {e["perturbation"] for e in found["perturbations"]} == {"length", "typos"}
    assert all(flag.split(":")[0] in ("length", "typos") for flag in found["flags"])
    refused = CliRunner().invoke(app, ["stress", str(folder), "--node", "judge"])
    assert refused.exit_code == 1 and "--base-url" in refused.output
    unknown = CliRunner().invoke(
        app, ["stress", str(folder), "--node", "judge", "--perturb", "nope"]
    )
    assert unknown.exit_code == 1 and "--perturb nope" in unknown.output


DOC = Path(__file__).parents[2] / "docs" / "stress.md"


def test_the_worked_example_of_the_stress_page_runs_as_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/stress.md's files, rows and command as written, against the fake server's
    length-biased judge: the flags it prints are the page's."""
    example = DOC.read_text(encoding="utf-8").split("## A worked example", 1)[1]
    example = example.split("\n## ", 1)[0]  # the section only: later ones have commands too
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", example, re.S | re.M)
    monkeypatch.chdir(tmp_path)
    for language, body in blocks:
        named = re.match(r"(?:\{#|#) ([\w/.]+)", body)
        if named and language in ("yaml", "jinja"):
            Path(named.group(1)).parent.mkdir(parents=True, exist_ok=True)
            Path(named.group(1)).write_text(body, encoding="utf-8")
    rows = next(body for language, body in blocks if language == "json")
    Path("rows.jsonl").write_text(rows, encoding="utf-8")
    (command,) = [body.strip() for language, body in blocks if language == "bash"]
    shown = next(body for language, body in blocks if language == "text").strip().splitlines()
    with FakeServer(judge_responder()) as server:
        orc.run("qa/graph.yaml", "rows.jsonl", out="runs/qa", base_url=server.base_url)
        server.responder = judge_responder("length")
        args = command.replace("http://localhost:8000/v1", server.base_url).split()
        before = len(server.requests)
        done = CliRunner().invoke(app, args[1:])
        assert node_requests(server, before) == 40
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["flags"] == shown


def test_user_perturbations_by_function_and_by_template(tmp_path: Path) -> None:
    @orc.register_perturbation("shout", holds="the words, in capitals")
    def shout(text: str, row: dict, rng: random.Random) -> str:
        return text.upper()

    template = tmp_path / "polite.jinja"
    template.write_text("{{ text }} Thanks, {{ who }}!", encoding="utf-8")
    found = stress_perturbations(["shout", str(template)])
    assert [p.name for p in found] == ["shout", "polite"]
    rows = [{"id": "a", "text": "hi there", "who": "Ann"}]
    assert stress_variants(found[0], rows, "text", 0)["shout"][0]["text"] == "HI THERE"
    assert (
        stress_variants(found[1], rows, "text", 0)["polite"][0]["text"] == "hi there Thanks, Ann!"
    )
    with pytest.raises(ConfigurationError, match="--perturb nope"):
        stress_perturbations(["nope"])


def test_order_reads_the_baseline_swapped() -> None:
    """A judge that always picks the first place flips every verdict when the answers trade
    places; one that keeps its answer flips none."""
    positional = stress_effect("order", "swapped", "pick", "winner", [("A", "A")] * 12, swap=True)
    faithful = stress_effect("order", "swapped", "pick", "winner", [("A", "B")] * 12, swap=True)
    assert positional is not None and faithful is not None
    assert positional.estimate == 1.0 and positional.p < 0.001
    assert faithful.estimate == 0.0 and faithful.p == 1.0


def test_the_report_shows_the_stress_tests_and_a_replay_its_lineage(
    run: tuple[Path, FakeServer], tmp_path: Path
) -> None:
    from orchestrator.report import build_report

    folder, server = run
    server.responder = judge_responder("length")
    found = orc.stress(folder, node="judge", perturb=["length"], rows=10, base_url=server.base_url)
    kept = folder / "stress-judge-n10-s0" / "stress.json"
    assert json.loads(kept.read_text(encoding="utf-8"))["flags"] == found.flags
    html = build_report(folder).read_text(encoding="utf-8")
    assert 'data-view="stress"' in html and "<h3>Stress</h3>" in html
    assert found.flags
    for flag in found.flags:
        assert escape(flag) in html
    assert 'data-view="replay"' not in html  # the run replays nothing
    # A stress replay is a replay: its own report names the run it replays and the change.
    html = build_report(folder / "stress-judge-n10-s0" / "length-padded-2x").read_text("utf-8")
    assert 'data-view="replay"' in html and escape(str(folder)) in html
    assert "length: padded 2x" in html


def test_stress_writes_only_into_a_folder_of_its_own(
    run: tuple[Path, FakeServer], tmp_path: Path
) -> None:
    folder, server = run
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep", encoding="utf-8")
    before = len(server.requests)
    with pytest.raises(orc.RunFolderError, match=r"notes\.txt"):
        orc.stress(
            folder, node="judge", perturb=["typos"], rows=4, out=mine, base_url=server.base_url
        )
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert node_requests(server, before) == 0


def test_the_judge_card_shows_the_stress_tests_of_the_run(
    run: tuple[Path, FakeServer],
) -> None:
    from orchestrator.analysis import flag_lines, sections

    folder, server = run
    assert orc.judge_card(folder).stress == []
    server.responder = judge_responder("length")
    found = orc.stress(folder, node="judge", perturb=["length"], rows=10, base_url=server.base_url)
    card = orc.judge_card(folder)
    assert [report.flags for report in card.stress] == [found.flags] and found.flags
    lines = flag_lines(card)
    assert all(flag in lines for flag in found.flags)
    (table,) = [s for s in sections(card) if s.title.startswith("Stress of judge")]
    assert [row[1] for row in table.rows] == ["padded 1.5x", "padded 2x", "truncated"]


def test_order_finds_the_two_answers_in_a_pairwise_graph(tmp_path: Path) -> None:
    """`order` without `pair` swaps the graph's one pair of answer inputs; a graph with none
    (or several) is refused with the inputs named, and `pair` still overrides."""
    spec = {**judge_graph(), "inputs": ["question", "answer_a", "answer_b"]}
    graph = write_graph(
        tmp_path / "g", spec, {"judge.jinja": "{{ question }} A: {{ answer_a }} B: {{ answer_b }}"}
    )
    rows = [
        {"id": r["id"], "question": "Q?", "answer_a": r["text"], "answer_b": "No."}
        for r in texts(6)
    ]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    with FakeServer(judge_responder()) as server:
        orc.run(graph, data, out=tmp_path / "run", base_url=server.base_url, cache=False)
        found = orc.stress(
            tmp_path / "run", node="judge", perturb=["order"], rows=6, base_url=server.base_url
        )
    assert [(e.perturbation, e.variant) for e in found.perturbations] == [("order", "swapped")]
    assert found.perturbations[0].flipped > 0  # the hashed judge saw the answers swapped
    assert infer_pair(["question", "answer_a", "answer_b"], "judge") == ("answer_a", "answer_b")
    assert infer_pair(["x", "output_1", "output_2"], "judge") == ("output_1", "output_2")
    with pytest.raises(ConfigurationError, match=r"judge.*no pair of answers.*--pair"):
        infer_pair(["question", "answer"], "judge")
    with pytest.raises(
        ConfigurationError, match=r"several pairs.*answer_a/answer_b, draft_a/draft_b"
    ):
        infer_pair(["answer_a", "answer_b", "draft_a", "draft_b"], "judge")


def test_order_on_a_graph_without_two_answers_asks_for_pair(
    run: tuple[Path, FakeServer],
) -> None:
    folder, server = run
    with pytest.raises(ConfigurationError, match=r"inputs \(text\) hold no pair.*--pair a,b"):
        orc.stress(folder, node="judge", perturb=["order"], rows=4, base_url=server.base_url)
    result = CliRunner().invoke(
        app, ["stress", str(folder), "--node", "judge", "--perturb", "order", "--rows", "4",
              "--pair", "text,text", "--base-url", server.base_url, "--format", "json"]
    )  # fmt: skip
    # --pair is taken as given, so nothing is inferred and nothing refused.
    assert result.exit_code == 0, result.output


def test_stress_asks_as_the_run_asked(tmp_path: Path) -> None:
    """A run that put the schema in the prompt is stressed the same way: variants asked with
    the server enforcing it would move the judge for that reason too."""
    spec = {**judge_graph(), "judged": "text"}
    graph = write_graph(tmp_path / "g", spec, {"judge.jinja": "Rate 1-10: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", texts(6))

    def five(body: dict) -> Reply:  # a judge that reads its schema from the prompt
        return schema_responder(body) if is_canary(body) else Reply(content='{"score": 5}')

    with FakeServer(five) as server:
        run = tmp_path / "run"
        orc.run(graph, data, out=run, base_url=server.base_url, cache=False, structured="prompt")
        before = len(server.requests)
        orc.stress(run, node="judge", perturb=["typos"], rows=4, base_url=server.base_url)
        bodies = [body for body in server.requests[before:] if not is_canary(body)]
    assert bodies
    assert not any("response_format" in body for body in bodies)
