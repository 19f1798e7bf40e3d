"""Results per group (issue 27): rows grouped by a row field, per-group estimates with
intervals, and `compare --by` finding a difference planted in one language only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.analysis import groups as g
from orchestrator.cli import app
from orchestrator.cli.app import console
from orchestrator.compute.statistics import bootstrap_mean_ci
from orchestrator.providers.fake import FakeRequest
from orchestrator.store.records import ResultLine

LANGUAGES = ("de", "en", "ja", "ru")
PER_LANGUAGE = 12
SPEC: dict[str, Any] = {
    "name": "fluency",
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
PROMPTS = {"judge.jinja": "Rate 1-10:\n{{ text }}"}
# Each example's quality, and a jitter of mean exactly zero in every language: judge b
# disagrees with judge a example by example but not on average, except where planted.
BASE = np.random.default_rng(3).integers(3, 8, PER_LANGUAGE * len(LANGUAGES))
JITTER = np.tile([1, -1, 0, 1, -1, 0, 1, -1, 0, 1, -1, 0], len(LANGUAGES))


def rows() -> list[dict[str, str]]:
    return [
        {"id": f"{lang}{k:02d}", "text": f"#{i}# text", "language": lang}
        for i, (lang, k) in enumerate((lang, k) for lang in LANGUAGES for k in range(PER_LANGUAGE))
    ]


def judge(score: Any) -> Any:
    def respond(request: FakeRequest) -> str:
        i = int(request.messages[0]["content"].split("#")[1])
        return json.dumps({"score": int(score(i))})

    return respond


def run(out: Path, respond: Any, model: str, spec: dict[str, Any] = SPEC) -> None:
    graph = orc.Graph.from_dict(spec, prompts=PROMPTS)
    fake = orc.FakeTransport(respond, models=[model])
    orc.run(graph, rows(), out=out, transport=fake, model=model, overwrite=True)


def planted(i: int) -> int:
    """Judge b: judge a's score with zero-mean jitter, plus 2 on Russian texts only."""
    return int(BASE[i] + JITTER[i] + (2 if LANGUAGES[i // PER_LANGUAGE] == "ru" else 0))


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("judged")
    run(root / "a", judge(lambda i: BASE[i]), "judge-a")
    run(root / "b", judge(planted), "judge-b")
    return root / "a", root / "b"


# -- the mechanism ------------------------------------------------------------------------


def test_keys_come_from_an_output_else_an_input_and_empty_values_are_in_no_group() -> None:
    lines = [
        ResultLine.ok("x1", {"score": 3, "meta": {"lang": "ru"}}),
        ResultLine.ok("x2", {"score": 4, "meta": {"lang": ""}}),  # empty: falls to the input
        ResultLine.ok("x3", {"score": 5}),
        ResultLine.ok("x4", {"score": 6}),  # neither: no group
        ResultLine.failed("x5", 4, "boom"),
    ]
    inputs = {"x2": {"meta.lang": "de"}, "x3": {"meta.lang": "de"}, "x4": {"other": 1}}
    keys = g.keys_by_id(lines, "meta.lang", inputs)
    assert keys == {"x1": "ru", "x2": "de", "x3": "de"}
    assert g.ids_by_group(keys) == {"de": ["x2", "x3"], "ru": ["x1"]}
    grouped = g.rows_by_group(lines, "meta.lang", inputs)
    assert {key: [line.id for line in found] for key, found in grouped.items()} == {
        "de": ["x2", "x3"],
        "ru": ["x1"],
    }
    assert [g.key_text(v) for v in (True, 2.0, 2.5, " ", None, float("nan"), [1])] == [
        "true",
        "2",
        "2.5",
        None,
        None,
        None,
        None,
    ]


def test_a_value_marked_not_available_is_missing_not_text() -> None:
    lines = [
        ResultLine.ok("a", {"m": float("nan"), "t": "x", "language": "ru"}),
        ResultLine.ok("b", {"m": 2.0, "t": 1, "language": "ru"}),
        ResultLine.ok("c", {"m": 4.0, "t": None, "language": "ru"}),
    ]
    assert g.numeric_outputs(lines) == ["m"]  # t mixes text and a number
    found = g.group_lines(lines, "language").group("ru")
    assert found.n == 3 and found.estimate("m").n == 2 and found.estimate("m").mean == 3.0


def test_a_proportion_gets_wilson_and_a_score_the_bootstrap_of_compare() -> None:
    right = [1.0] * 7 + [0.0] * 3
    found = g.estimate("correct", right)
    low, high = proportion_confint(7, 10, alpha=0.05, method="wilson")
    assert found.method == "wilson" and found.n == 10 and found.mean == pytest.approx(0.7)
    assert (found.low, found.high) == (pytest.approx(low), pytest.approx(high))
    # All right: Wilson still gives a real interval below 1, where a bootstrap gives [1, 1].
    perfect = g.estimate("correct", [1.0] * 5)
    assert perfect.high == 1.0 and perfect.low is not None and perfect.low < 0.6
    scores = [3.0, 5.0, 4.0, 8.0, 6.0, 2.0]
    found = g.estimate("score", scores, resamples=500, seed=2)
    expected = bootstrap_mean_ci(scores, 0.95, 500, 2, method="bca")
    assert found.method == "bca" and (found.low, found.high) == (
        expected["ci_low"],
        expected["ci_high"],
    )
    assert g.estimate("score", [4.0]).low is None  # one value: a mean, no interval
    # The method is chosen per output over every group: 0/1 in one group of a 0–4 label
    # is still a mean there.
    lines = [
        ResultLine.ok(f"x{i}", {"label": v, "language": lang})
        for i, (v, lang) in enumerate([(0, "de"), (1, "de"), (1, "de"), (4, "en"), (2, "en")])
    ]
    grouping = g.group_lines(lines, "language")
    assert grouping.group("de").estimate("label").method == "bca"
    shares = [ResultLine.ok(f"y{i}", {"right": i % 2, "language": "de"}) for i in range(4)]
    assert g.group_lines(shares, "language").group("de").estimate("right").method == "wilson"


def test_a_run_is_summarized_per_language_from_its_kept_inputs(
    judged: tuple[Path, Path],
) -> None:
    grouping = g.summarize_groups(judged[0], "language")
    assert grouping.source == "input" and grouping.ungrouped == 0
    assert [group.key for group in grouping.groups] == list(LANGUAGES)
    for position, lang in enumerate(LANGUAGES):
        found = grouping.group(lang).estimate("score")
        part = BASE[position * PER_LANGUAGE : (position + 1) * PER_LANGUAGE]
        assert grouping.group(lang).n == found.n == PER_LANGUAGE
        assert found.mean == pytest.approx(part.mean())
        assert found.low is not None and found.high is not None
        assert found.low <= found.mean <= found.high


def test_a_field_no_row_has_is_refused_naming_the_fields(judged: tuple[Path, Path]) -> None:
    with pytest.raises(orc.ConfigurationError, match=r"'langauge'.*outputs: score.*language"):
        g.summarize_groups(judged[0], "langauge")
    with pytest.raises(orc.ConfigurationError, match="langauge"):
        orc.compare(*judged, by="langauge")


def test_orc_summarize_by_returns_the_groups_and_leaves_summary_json_alone(
    judged: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "summary.json"
    summary = orc.summarize(judged[0], out=out, by="language")
    assert [group["key"] for group in summary["groups"]["groups"]] == list(LANGUAGES)
    assert "groups" not in json.loads(out.read_text(encoding="utf-8"))
    assert "groups" not in orc.summarize(judged[0], out=out)


# -- the deliverable: a difference in one language is found there and nowhere else ---------


def test_compare_by_language_finds_a_difference_planted_in_one_language_only(
    judged: tuple[Path, Path],
) -> None:
    result = orc.compare(*judged, by="language")
    assert result.kind == "judge" and result.by == "language" and result.ungrouped == 0
    assert [group.key for group in result.groups] == list(LANGUAGES)
    for group in result.groups:
        pair = group.output("score").pairs[0]
        assert group.n == pair.n == PER_LANGUAGE
        assert pair.ci is not None and pair.p is not None and pair.p_holm is not None
        assert pair.p_holm >= pair.p  # adjusted over the four languages
        if group.key == "ru":
            assert pair.difference == pytest.approx(2.0)
            assert pair.ci.low > 0.5 and pair.p_holm < 0.01
        else:
            assert pair.difference == pytest.approx(0.0)
            assert pair.ci.low <= 0.0 <= pair.ci.high and pair.p > 0.5
    # Over every language the planted shift is diluted to a quarter of its size.
    assert result.pair("score").difference == pytest.approx(0.5)
    assert "Per language" in result.method_note()
    assert orc.compare(*judged).groups == []  # without `by`, nothing grouped


def test_compare_by_an_output_and_a_run_without_the_field(tmp_path: Path) -> None:
    """An output named like the field groups too; examples without a value are counted."""
    spec = {**SPEC, "outputs": {**SPEC["outputs"], "lang": "language"}}
    run(tmp_path / "a", judge(lambda i: BASE[i]), "judge-a", spec)
    run(tmp_path / "b", judge(planted), "judge-b", spec)
    grouping = g.summarize_groups(tmp_path / "b", "lang")
    assert grouping.source == "output"
    assert grouping.group("ru").estimate("score").mean == pytest.approx(
        BASE[3 * PER_LANGUAGE :].mean() + 2
    )
    result = orc.compare(tmp_path / "a", tmp_path / "b", by="lang")
    assert result.group("ru").output("score").pairs[0].difference == pytest.approx(2.0)


def test_runs_that_put_an_example_in_different_groups_are_noted(tmp_path: Path) -> None:
    graph = orc.Graph.from_dict(SPEC, prompts=PROMPTS)
    moved = [{**row, "language": "en"} if row["id"] == "ru00" else row for row in rows()]
    for name, data in (("a", rows()), ("b", moved)):
        fake = orc.FakeTransport(judge(lambda i: BASE[i]), models=["m"])
        orc.run(graph, data, out=tmp_path / name, transport=fake, model="m")
    result = orc.compare(tmp_path / "a", tmp_path / "b", by="language")
    expected = "1 example different values of 'language' (ru00); each is grouped by a's"
    assert any(expected in note for note in result.notes)
    assert result.group("ru").n == PER_LANGUAGE  # the first run's value groups it


def test_the_commands_print_the_groups(
    judged: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    monkeypatch.setattr(console, "_width", 160)
    shown = runner.invoke(app, ["compare", *map(str, judged), "--by", "language"])
    assert shown.exit_code == 0, shown.output
    assert "score by language: b − a" in shown.output
    ru = next(line for line in shown.output.splitlines() if line.startswith("ru "))
    assert "a → b" in ru and " 12 " in ru and "2.000" in ru
    as_json = runner.invoke(
        app, ["compare", *map(str, judged), "--by", "language", "--format", "json"]
    )
    assert [group["key"] for group in json.loads(as_json.output)["groups"]] == list(LANGUAGES)
    out = tmp_path / "summary.json"
    summary = runner.invoke(
        app, ["summarize", str(judged[1]), "--out", str(out), "--by", "language"]
    )
    assert summary.exit_code == 0, summary.output
    assert "results by language (input)" in summary.output
    ru = next(line for line in summary.output.splitlines() if "│ ru " in line)
    assert "score" in ru and "12" in ru
    missing = runner.invoke(app, ["summarize", str(judged[1]), "--out", str(out), "--by", "x"])
    assert missing.exit_code != 0 and "no row has a value of 'x'" in missing.output
    as_json = runner.invoke(
        app,
        ["summarize", str(judged[1]), "--out", str(out), "--by", "language", "--format", "json"],
    )
    assert as_json.exit_code == 0, as_json.output
    printed = json.loads(as_json.stdout)
    assert printed["summary"] == json.loads(out.read_text())
    groups = {group["key"]: group for group in printed["by"]["groups"]}
    assert list(groups) == list(LANGUAGES) and printed["by"]["source"] == "input"
    (ru_score,) = [e for e in groups["ru"]["estimates"] if e["output"] == "score"]
    assert ru_score["n"] == 12
