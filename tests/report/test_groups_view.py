"""The report's per-language panel (issue 27): drawn from `analysis.groups` for a run whose
rows carry `language` (an output or an input), and absent where there is nothing to break
down. A score raised in one language only shows in that language's row alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import orchestrator as orc
from orchestrator.analysis.groups import group_lines
from orchestrator.providers.fake import FakeRequest
from orchestrator.report import build_report
from orchestrator.report.compare_page import write_compare_page
from orchestrator.report.groups_view import per_group
from orchestrator.report.views import RunContext, ScoreField
from orchestrator.store.records import ResultLine

LANGUAGES = ("de", "en", "ru", "zh")
# Each language gets the same scores, except Russian, whose every score is 3 points higher.
SCORES = [4, 6, 5, 7, 3, 5, 6, 4]
SPEC = {
    "name": "tone",
    "inputs": ["text"],
    "optional_inputs": ["language"],
    "nodes": {
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {"score": {"type": "integer", "min": 1, "max": 10}},
        }
    },
    "outputs": {"score": "judge.score"},
}


def lines(outputs_carry_language: bool = True) -> list[ResultLine]:
    found = []
    for lang in LANGUAGES:
        for k, score in enumerate(SCORES):
            outputs: dict[str, object] = {"score": score + (3 if lang == "ru" else 0)}
            if outputs_carry_language:
                outputs["language"] = lang
            found.append(ResultLine.ok(f"{lang}{k}", outputs))
    return found


def titles(html: str) -> dict[str, str]:
    """Each row's hover text in the figure, by language: `ru (n 8): 8 [7, 9]`."""
    marks = re.findall(r'<circle class="mark[^"]*"[^>]*><title>([^<]+)</title>', html)
    return {title.split(" ")[0]: title for title in marks}


def test_a_difference_planted_in_one_language_shows_in_that_row_only() -> None:
    field = ScoreField("score", "judge", "integer", 1, 10)
    html = per_group(RunContext([], lines(), [field]))
    assert html is not None and "score by language" in html
    shown = titles(html)
    assert sorted(shown) == sorted(LANGUAGES)
    grouping = group_lines(lines(), "language")
    base = grouping.group("en").estimate("score")
    russian = grouping.group("ru").estimate("score")
    assert russian.mean == pytest.approx(base.mean + 3)  # type: ignore[operator]
    assert base.high is not None and russian.low is not None and russian.low > base.high
    for lang in LANGUAGES:
        found = grouping.group(lang).estimate("score")
        assert shown[lang].startswith(f"{lang} (n 8): {found.mean:.4g} [{found.low:.4g}, ")
        if lang != "ru":
            assert (found.mean, found.low, found.high) == (base.mean, base.low, base.high)
    # The scale is the schema's 1–10, and the reference line is the mean over every row.
    assert 'class="reference"' in html and "mean over all 32 rows" in html


def test_language_kept_as_an_input_is_grouped_too() -> None:
    inputs = {line.id: {"language": line.id[:2]} for line in lines()}
    html = per_group(RunContext([], lines(outputs_carry_language=False), [], inputs=inputs))
    assert html is not None and sorted(titles(html)) == sorted(LANGUAGES)


@pytest.mark.parametrize(
    "context",
    [
        RunContext([], lines(outputs_carry_language=False)),  # no language anywhere
        RunContext([], [line for line in lines() if line.id.startswith("en")]),  # one language
        # Two languages, but one row each: no interval to compare.
        RunContext(
            [],
            [
                ResultLine.ok("a", {"s": 1, "language": "en"}),
                ResultLine.ok("b", {"s": 2, "language": "ja"}),
            ],
        ),
    ],
)
def test_no_panel_where_there_is_nothing_to_break_down(context: RunContext) -> None:
    assert per_group(context) is None


def multilingual_run(out: Path, russian: int, model: str = "m") -> Path:
    """Three rows per language, each scored 5, Russian ones `russian`."""

    def respond(request: FakeRequest) -> str:
        text = request.messages[0]["content"]
        k = int(text.rsplit(" ", 1)[1])
        return json.dumps({"score": russian + k % 2 if "ru" in text else 5 + k % 2})

    rows = [
        {"id": f"{lang}{k}", "text": f"{lang} text {k}", "language": lang}
        for lang in LANGUAGES
        for k in range(3)
    ]
    graph = orc.Graph.from_dict(SPEC, prompts={"judge.jinja": "{{ text }}"})
    fake = orc.FakeTransport(respond, models=[model])
    orc.run(graph, rows, out=out, transport=fake, model=model)
    return out


def test_the_report_of_a_multilingual_run_has_the_panel(tmp_path: Path) -> None:
    page = build_report(multilingual_run(tmp_path / "run", 8)).read_text(encoding="utf-8")
    section = page.split('data-view="groups"', 1)[1].split("</section>", 1)[0]
    assert "<h3>Per language</h3>" in section
    assert titles(section)["ru"].startswith("ru (n 3): 8.333 [")
    assert titles(section)["de"].startswith("de (n 3): 5.333 [")


def test_the_comparison_page_shows_the_difference_per_language(tmp_path: Path) -> None:
    a = multilingual_run(tmp_path / "a", 5, "judge-a")
    b = multilingual_run(tmp_path / "b", 8, "judge-b")
    page = write_compare_page(
        orc.compare(a, b, by="language"), tmp_path / "c.html", build_reports=False
    )
    html = page.read_text(encoding="utf-8")
    table = html.split("<h3>Per language</h3>", 1)[1].split("</table>", 1)[0]
    rows = {row.split("</td>", 1)[0].removeprefix("<td>"): row for row in table.split("<tr>")[2:]}
    assert sorted(rows) == sorted(LANGUAGES)
    assert "<b>3.000</b>" in rows["ru"] and "<b>0.000</b>" in rows["en"]
    assert "paired difference per language" in html and "ru · a → b (n 3)" in html
    plain = write_compare_page(orc.compare(a, b), tmp_path / "p.html", build_reports=False)
    assert "Per language" not in plain.read_text(encoding="utf-8")
