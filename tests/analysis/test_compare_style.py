"""`compare` of pairwise runs shows style-controlled ratings and length-controlled win
rates beside the plain ones (issue 39), and they move the way a planted style effect says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.report import write_compare_page

REPO = Path(__file__).resolve().parents[2]
SHORT, LONG = "Fine answer.", "Fine answer. " + "More words that add length and nothing else. " * 6


def rows(n: int = 24) -> list[dict[str, Any]]:
    """`long` writes the longer answer in three rows of four, `short` in the fourth."""
    out = []
    for i in range(n):
        tail = f" ({i})"
        short_long = i % 4 == 3
        out.append({
            "id": f"q{i:02d}", "question": f"Question {i}?",
            "model_a": "long", "answer_a": (SHORT if short_long else LONG) + tail,
            "model_b": "short", "answer_b": (LONG if short_long else SHORT) + tail,
        })  # fmt: skip
    return out


def longer_wins(request: Any) -> str:
    """A judge that only likes length: the longer answer wins, whatever it says."""
    text = "".join(str(m["content"]) for m in request.messages)
    first = re.search(r"## Answer A\n(.*?)\n\n## Answer B\n", text, re.S)
    second = text.split("## Answer B\n", 1)[1]
    assert first is not None
    verdict = "A" if len(first.group(1)) > len(second.strip()) else "B"
    return json.dumps({"reason": "r", "verdict": verdict})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("style")
    found = []
    for model in ("judge-a", "judge-b"):
        fake = orc.FakeTransport(longer_wins, models=[model])
        graph = REPO / "graphs" / "mtbench_pairwise.yaml"
        orc.run(graph, rows(), out=root / model, transport=fake, model=model)
        found.append(root / model)
    return found


def test_compare_of_pairwise_runs_shows_plain_and_controlled_figures(
    runs: list[Path], tmp_path: Path
) -> None:
    result = orc.compare(*runs)
    assert [style.run for style in result.style] == [run.label for run in result.runs]
    for style in result.style:
        fit = style.bradley_terry["all"]
        plain, controlled = fit["players"], fit["style_controlled"]["players"]
        gap = plain["long"]["rating"] - plain["short"]["rating"]
        # The judge likes length alone and `long` wrote the longer answer 3 times in 4: plain
        # Bradley–Terry credits `long` with it, style control takes most of it back.
        assert gap > 150
        assert controlled["long"]["rating"] - controlled["short"]["rating"] < 0.6 * gap
        pair = style.length_controlled["all"]["pairs"]["long|short"]
        assert pair["a"] == "long" and pair["win_rate_a"] == pytest.approx(0.75)
        assert pair["length_controlled_win_rate_a"] < 0.7
        assert pair["length_coefficient"] > 0  # the judge favours the longer answer
    text = CliRunner().invoke(app, ["compare", *map(str, runs)])
    assert text.exit_code == 0, text.output
    assert "plain and style-controlled" in text.output
    assert re.search(r"win rate long vs short\s+0\.750\s+0\.6\d\d", text.output), text.output
    shown = CliRunner().invoke(app, ["compare", *map(str, runs), "--format", "json"])
    found = json.loads(shown.output)["style"][0]
    assert found["length_controlled"]["all"]["pairs"]["long|short"]["win_rate_a"] == 0.75
    assert "style_controlled" in found["bradley_terry"]["all"]
    page = write_compare_page(result, tmp_path / "compare.html", build_reports=False)
    html = page.read_text()
    assert "Pairwise ratings, plain and style-controlled" in html
    assert "Bradley–Terry long" in html and "win rate long vs short" in html


def test_compare_of_pointwise_runs_has_no_style_section(tmp_path: Path) -> None:
    graph = REPO / "graphs" / "pointwise.yaml"
    rows = [json.loads(line) for line in (REPO / "examples" / "pointwise.jsonl").open()]
    answer = json.dumps({"content_reason": "r", "content": 5, "style_reason": "r", "style": 6})
    for model in ("a", "b"):
        fake = orc.FakeTransport(lambda request: answer, models=[model])
        orc.run(graph, rows, out=tmp_path / model, transport=fake, model=model)
    assert orc.compare(tmp_path / "a", tmp_path / "b").style == []
