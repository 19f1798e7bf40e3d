"""`orchestrator compare` / `orc.compare` (issue 18): runs of one graph matched by example
id, its statistics as stats/ computes them (checked against scipy/statsmodels, and the
test's error rate measured, in tests/stats/)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats
from helpers import orchestrator_command
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator import stats
from orchestrator.analysis.comparison import format_number
from orchestrator.analysis.examples import paired_examples
from orchestrator.cli import app
from orchestrator.cli.app import console
from orchestrator.compute.statistics import cohen_kappa
from orchestrator.providers.fake import FakeRequest

N = 40
SPEC: dict[str, Any] = {
    "name": "clarity",
    "inputs": ["text"],
    "nodes": {
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {
                "score": {"type": "integer", "min": 1, "max": 10},
                "winner": {"type": "string", "enum": ["A", "B", "tie"]},
                "note": {"type": "string"},
            },
        }
    },
    "outputs": {"score": "judge.score", "winner": "judge.winner", "note": "judge.note"},
}
PROMPTS = {"judge.jinja": "Rate 1-10:\n{{ text }}"}
BASE = np.random.default_rng(7).integers(2, 9, N)  # each example's true quality, 2..8
NOISE = np.random.default_rng(8).integers(-1, 2, N)  # a second judge's or system's jitter


def graph(name: str = "clarity") -> orc.Graph:
    return orc.Graph.from_dict({**SPEC, "name": name}, prompts=PROMPTS)


def rows(system: str, ids: range | list[int] = range(N)) -> list[dict[str, str]]:
    # The text is what a system generated: another system's text differs, the id does not.
    return [{"id": f"e{i:02d}", "text": f"{system} answer #{i}#"} for i in ids]


def scorer(score: Callable[[int], int], winner: Callable[[int], str] = lambda i: "A"):
    def respond(request: FakeRequest) -> str:
        i = int(request.messages[0]["content"].split("#")[1])
        note = f"example {i}"  # free text: never taken for a label
        return json.dumps({"score": score(i), "winner": winner(i), "note": note})

    return respond


def run(out: Path | None, data: list[dict[str, str]], respond: Any, model: str = "judge-a"):
    fake = orc.FakeTransport(respond, models=[model])
    return orc.run(graph(), data, out=out, transport=fake, model=model, overwrite=True)


@pytest.fixture(scope="module")
def shifted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """System b's answers are one point better than system a's, with ±1 noise."""
    root = tmp_path_factory.mktemp("shifted")
    run(root / "sys-a", rows("a"), scorer(lambda i: int(BASE[i])))
    run(root / "sys-b", rows("b"), scorer(lambda i: int(BASE[i] + 1 + NOISE[i])))
    return root / "sys-a", root / "sys-b"


# -- the deliverable: a known shift is found, no shift is not ---------------------------


def test_a_known_shift_lies_in_the_ci_with_a_small_p(shifted: tuple[Path, Path]) -> None:
    a, b = shifted
    result = orc.compare(a, b)
    assert result.kind == "system" and "inputs differ" in result.kind_reason
    assert [o.output for o in result.outputs] == ["score"]  # winner/note are not numbers
    assert result.labels == []  # agreement is for judge comparisons only
    pair = result.pair("score")
    differences = (BASE + 1 + NOISE) - BASE
    assert pair.n == N and pair.difference == pytest.approx(differences.mean())
    assert pair.mean_a == pytest.approx(BASE.mean()) and result.output("score").means["sys-a"]
    assert pair.ci is not None and pair.ci.low < 1.0 < pair.ci.high
    # The interval inverts the sign-flip test, with the test's 10,000 seeded draws.
    assert pair.ci.method == "sign-flip" and pair.ci.draws == "monte-carlo"
    assert pair.ci.resamples == 10_000
    assert pair.p is not None and pair.p < 0.01 and pair.p_method == "monte-carlo"
    assert pair.p_holm == pair.p  # one pair: nothing to adjust
    assert pair.effect_size == pytest.approx(differences.mean() / differences.std(ddof=1))
    assert (pair.wins, pair.ties, pair.losses) == (
        int((differences > 0).sum()),
        int((differences == 0).sum()),
        int((differences < 0).sum()),
    )
    assert pair.agreement is None
    assert orc.compare(a, b) == result  # seeded: the same numbers every time


def test_no_difference_gives_a_p_that_is_not_small(tmp_path: Path) -> None:
    # Judge b adds noise with mean zero, so the two runs differ but not systematically.
    run(tmp_path / "a", rows("x"), scorer(lambda i: int(BASE[i])))
    run(tmp_path / "b", rows("x"), scorer(lambda i: int(BASE[i] + NOISE[i])), "judge-b")
    pair = orc.compare(tmp_path / "a", tmp_path / "b").pair("score")
    assert pair.ci is not None and pair.ci.low < 0.0 < pair.ci.high
    assert pair.p is not None and pair.p > 0.2


# -- each statistic against scipy / statsmodels: tests/stats/ ---------------------------


def test_compare_ci_is_the_sign_flip_interval(shifted: tuple[Path, Path]) -> None:
    pair = orc.compare(*shifted, seed=5).pair("score")
    differences = (BASE + 1 + NOISE) - BASE
    expected = stats.sign_flip_interval(differences, 0.95, 10_000, seed=5)
    assert pair.ci is not None and pair.ci.seed == 5
    assert (pair.ci.low, pair.ci.high) == (expected.low, expected.high)
    assert pair.p is not None and (pair.p < 0.05) == (not pair.ci.low <= 0.0 <= pair.ci.high)


# -- matching, judge comparisons, refusals ------------------------------------------------


def verdict_a(i: int) -> str:
    return ("A", "B", "tie")[i % 3]


def verdict_b(i: int) -> str:
    # Examples 0 and 1 flip sides; example 5 goes from a tie to a side, which is no flip.
    return {0: "B", 1: "A", 5: "A"}.get(i, verdict_a(i))


@pytest.fixture(scope="module")
def judges(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two judges over the same inputs: b's scores are a's plus noise, two verdicts flip."""
    root = tmp_path_factory.mktemp("judges")
    run(root / "a", rows("x"), scorer(lambda i: int(BASE[i]), verdict_a))
    run(root / "b", rows("x"), scorer(lambda i: int(BASE[i] + NOISE[i]), verdict_b), "judge-b")
    return root / "a", root / "b"


def test_a_judge_comparison_reports_agreement(judges: tuple[Path, Path]) -> None:
    result = orc.compare(*judges)
    assert result.kind == "judge" and "judge-a vs judge-b" in result.kind_reason
    assert [run.model for run in result.runs] == ["judge-a", "judge-b"]
    a, b = BASE.astype(float), (BASE + NOISE).astype(float)
    agreement = result.pair("score").agreement
    assert agreement is not None
    assert agreement.pearson == pytest.approx(scipy.stats.pearsonr(a, b).statistic)
    assert agreement.spearman == pytest.approx(scipy.stats.spearmanr(a, b).statistic)
    assert agreement.kendall_tau_b == pytest.approx(scipy.stats.kendalltau(a, b).statistic)
    # The integer score and the winner are labels; the free-text note is not.
    labels = {found.output: found for found in result.labels}
    assert set(labels) == {"score", "winner"}
    score = labels["score"].pairs[0]
    assert score.kappa == pytest.approx(cohen_kappa(list(a), list(b)))
    assert score.kappa_quadratic == pytest.approx(cohen_kappa(list(a), list(b), "quadratic"))
    assert score.agreement == pytest.approx(float(np.mean(a == b)))
    winner = labels["winner"]
    assert winner.verdict and winner.values == ["A", "B", "tie"]
    first, second = [verdict_a(i) for i in range(N)], [verdict_b(i) for i in range(N)]
    sided = sum(x != "tie" and y != "tie" for x, y in zip(first, second, strict=True))
    assert winner.pairs[0].flips == 2 and winner.pairs[0].flip_rate == pytest.approx(2 / sided)
    assert winner.pairs[0].kappa == pytest.approx(cohen_kappa(first, second))
    assert winner.pairs[0].agreement == pytest.approx(37 / 40)


def test_outputs_and_labels_can_be_chosen(judges: tuple[Path, Path]) -> None:
    only = orc.compare(*judges, outputs=["score"], labels=["winner"])
    assert [o.output for o in only.outputs] == ["score"] and [x.output for x in only.labels] == [
        "winner"
    ]
    as_system = orc.compare(*judges, kind="system")
    assert as_system.kind_reason == "given" and as_system.labels == []
    assert as_system.pair("score").agreement is None
    with pytest.raises(orc.ConfigurationError, match=r"no numeric output 'winner'.*score"):
        orc.compare(*judges, outputs=["winner"])


def test_ids_missing_or_failed_in_a_run_are_reported(tmp_path: Path) -> None:
    run(tmp_path / "a", rows("x", range(0, 30)), scorer(lambda i: int(BASE[i])))

    def flaky(request: FakeRequest) -> str:
        if "#12#" in request.messages[0]["content"]:
            return "this is not JSON"  # example e12 fails in run b
        return scorer(lambda i: int(BASE[i % N]))(request)

    run(tmp_path / "b", rows("x", range(3, 33)), flaky)
    result = orc.compare(tmp_path / "a", tmp_path / "b")
    first, second = result.runs
    assert first.missing == ["e30", "e31", "e32"] and second.missing == ["e00", "e01", "e02"]
    assert second.failed == ["e12"] and first.failed == []
    assert (first.examples, second.examples, second.ok) == (30, 30, 29)
    assert result.common == 26  # e03..e29 but e12
    assert result.pair("score").n == 26
    assert result.output("score").counts == {"a": 30, "b": 29}


def test_three_runs_give_three_pairs_with_holm(shifted: tuple[Path, Path]) -> None:
    third = shifted[0].parent / "sys-c"
    if not third.exists():
        run(third, rows("c"), scorer(lambda i: int(BASE[i] + NOISE[i])))
    result = orc.compare(*shifted, third)
    pairs = result.output("score").pairs
    assert [(p.run_a, p.run_b) for p in pairs] == [
        ("sys-a", "sys-b"),
        ("sys-a", "sys-c"),
        ("sys-b", "sys-c"),
    ]
    raw = [p.p for p in pairs]
    assert None not in raw
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    expected = multitest.multipletests(raw, method="holm")[1]
    assert [p.p_holm for p in pairs] == pytest.approx(list(expected))
    assert result.pair("score", "sys-b", "sys-c").difference == pytest.approx(-1.0)


def test_in_memory_results_are_compared_too() -> None:
    first = run(None, rows("x"), scorer(lambda i: int(BASE[i])))
    second = run(None, rows("x"), scorer(lambda i: int(BASE[i]) + 1), "judge-b")
    result = orc.compare(first, second)
    assert [r.label for r in result.runs] == ["run1", "run2"]
    assert result.kind == "judge" and result.kind_reason.startswith("same dataset (hash)")
    pair = result.pair("score")
    assert pair.difference == 1.0 and (pair.wins, pair.ties, pair.losses) == (N, 0, 0)
    assert pair.ci is not None and (pair.ci.low, pair.ci.high) == (1.0, 1.0)
    assert pair.effect_size is None  # every difference the same: d_z is undefined


def test_runs_that_cannot_be_compared_are_refused(
    shifted: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = orc.run(
        graph("another"),
        rows("a"),
        out=tmp_path / "other",
        transport=orc.FakeTransport(scorer(lambda i: 5)),
    )
    with pytest.raises(orc.ConfigurationError, match=r"different graphs.*'clarity'.*'another'"):
        orc.compare(shifted[0], other)
    with pytest.raises(orc.ConfigurationError, match="share no example id"):
        disjoint = run(None, rows("a", range(100, 103)), scorer(lambda i: 5))
        orc.compare(shifted[0], disjoint)
    with pytest.raises(orc.ConfigurationError, match="at least two runs"):
        orc.compare(shifted[0])
    with pytest.raises(orc.ConfigurationError, match="is it a run folder"):
        orc.compare(shifted[0], tmp_path / "nothing")
    # Same name, another graph: compared, with a warning.
    edited = {**SPEC, "defaults": {"temperature": 0.5}}
    changed = orc.run(
        orc.Graph.from_dict(edited, prompts=PROMPTS),
        rows("a"),
        transport=orc.FakeTransport(scorer(lambda i: int(BASE[i]))),
    )
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        result = orc.compare(shifted[0], changed)
    assert "share a name but not a hash" in caplog.text
    assert any("share a name but not a hash" in note for note in result.notes)


# -- the command ---------------------------------------------------------------------------


def test_cli_table_and_json(shifted: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    monkeypatch.setattr(console, "_width", 120)  # long run names would wrap at 80 columns
    a, b = shifted
    table = runner.invoke(app, ["compare", str(a), str(b)])
    assert table.exit_code == 0, table.output
    pair = orc.compare(a, b).pair("score")
    assert pair.ci is not None and pair.mean_a is not None and pair.mean_b is not None
    assert "system comparison" in table.output
    assert f"{pair.mean_a:.3f}" in table.output and f"{pair.mean_b:.3f}" in table.output
    assert f"{pair.ci.low:.3f}, {pair.ci.high:.3f}" in table.output
    assert "<0.001" in table.output and f"{pair.wins}/{pair.ties}/{pair.losses}" in table.output
    assert (
        "Monte Carlo (10000 draws)" in table.output
        and "the differences the test does not reject" in table.output
    )

    as_json = runner.invoke(app, ["compare", str(a), str(b), "--format", "json", "--seed", "3"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output) == orc.compare(a, b, seed=3).model_dump(mode="json")


def test_json_output_stays_json_when_the_library_warns(
    shifted: tuple[Path, Path], tmp_path: Path
) -> None:
    """As a user pipes it (`orchestrator compare A B --format json | jq`): the warning that
    the graphs differ goes to stderr, and stdout holds the JSON alone."""
    edited = orc.Graph.from_dict({**SPEC, "defaults": {"temperature": 0.5}}, prompts=PROMPTS)
    fake = orc.FakeTransport(scorer(lambda i: int(BASE[i])), models=["judge-a"])
    orc.run(edited, rows("a"), out=tmp_path / "edited", transport=fake, model="judge-a")
    shown = orchestrator_command(
        "compare", str(shifted[0]), str(tmp_path / "edited"), "--format", "json"
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["notes"]
    assert "warning:" in shown.stderr and "share a name but not a hash" in shown.stderr


def test_cli_refuses_bad_input_in_one_line(shifted: tuple[Path, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    for args, message in [
        ([str(shifted[0]), str(tmp_path)], "has no results.jsonl"),
        ([*map(str, shifted), "--format", "xml"], "--format must be table or json"),
        ([*map(str, shifted), "--output", "nope"], "no numeric output 'nope'"),
        ([*map(str, shifted), "--kind", "both"], "--kind must be judge or system"),
    ]:
        result = runner.invoke(app, ["compare", *args])
        assert result.exit_code == 1, (args, result.output)
        assert message in result.output and result.output.count("\n") == 1


def test_the_worked_example_in_the_docs_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "analysis.md").read_text(encoding="utf-8")
    section = doc.split("### A worked example", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/analysis.md", "exec"), {})
    pair = orc.compare("runs/sys-a", "runs/sys-b").pair("score")
    assert pair.ci is not None and pair.ci.low < 1.0 < pair.ci.high
    assert pair.p is not None and pair.p < 0.001
    # The table pasted in the doc is this run's.
    assert f"{pair.ci.low:.3f}, {pair.ci.high:.3f}" in section
    assert f"{pair.wins}/{pair.ties}/{pair.losses}" in section


# -- numbers as printed ----------------------------------------------------------------------


def _fractional_run(out: Path, scores: list[float]) -> Path:
    """A run whose `score` is a fraction (an F-score, say), one per example."""
    spec = {**SPEC, "nodes": {"judge": {**SPEC["nodes"]["judge"], "output": {"score": "number"}}}}
    spec["outputs"] = {"score": "judge.score"}

    def respond(request: FakeRequest) -> str:
        return json.dumps({"score": scores[int(request.messages[0]["content"].split("#")[1])]})

    fake = orc.FakeTransport(respond, models=["judge-a"])
    data = rows("x", range(len(scores)))
    orc.run(orc.Graph.from_dict(spec, prompts=PROMPTS), data, out=out, transport=fake)
    return out


def test_a_zero_difference_prints_as_zero_not_as_rounding_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 10 of issue 26: the same fractional scores in another order have a mean
    difference of zero, which floats compute as ~1e-17; the table printed `4.63e-18` and a
    d_z of `-1.7e-17`. Identical runs print zero too."""
    scores = [0.1 * (i % 7) + 1 / 3 for i in range(12)]
    a = _fractional_run(tmp_path / "a", scores)
    mirrored = _fractional_run(tmp_path / "b", scores[::-1])
    same = _fractional_run(tmp_path / "c", scores)
    pair = orc.compare(a, mirrored).pair("score")
    assert pair.difference is not None and 0 < abs(pair.difference) < 1e-15  # the noise
    runner = CliRunner()
    monkeypatch.setattr(console, "_width", 160)
    for other in (mirrored, same):
        shown = runner.invoke(app, ["compare", str(a), str(other)])
        assert shown.exit_code == 0, shown.output
        assert "e-1" not in shown.output, shown.output
        lines = shown.output.splitlines()
        head = next(i for i, line in enumerate(lines) if "b − a" in line and "d_z" in line)
        cells = dict(
            zip(
                re.split(r"\s{2,}", lines[head].strip()),
                re.split(r"\s{2,}", lines[head + 2].strip()),
                strict=True,
            )
        )
        assert cells["b − a"] == "0.000", cells
        assert cells["d_z"] in ("0.00", "—"), cells
    # Small differences that are real keep their significant digits.
    assert format_number(4e-5, scale=1.0) == "4e-05"
    assert format_number(-2.5e-4) == "-0.00025"
    assert format_number(3e-9, scale=1e6) == "0.000"  # noise for numbers a million large
    assert format_number(-1e-17) == "0.000"


def test_scores_too_large_to_compute_with_are_refused_naming_run_and_field(
    tmp_path: Path,
) -> None:
    """Item 6 of issue 35: scores of ±1e308 in a 20-win/20-loss split printed `inf -inf
    nan … <0.001` (the differences overflow); an infinite score, which a run keeps in
    memory, was compared too. Both are refused in one line naming the run and the field."""
    split = [1e308 if i < 20 else -1e308 for i in range(40)]
    a = _fractional_run(tmp_path / "a", split)
    b = _fractional_run(tmp_path / "b", [-x for x in split])
    where = rf"^{re.escape(str(a))}: output 'score' of example 'e00' is 1e\+308"
    with pytest.raises(orc.ConfigurationError, match=where):
        orc.compare(a, b)
    shown = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert shown.exit_code == 1, shown.output
    assert shown.output.count("\n") == 1 and "output 'score'" in shown.output, shown.output
    # The page's per-example values are read the same way.
    fine = _fractional_run(tmp_path / "c", [float(i % 5) for i in range(40)])
    with pytest.raises(orc.ConfigurationError, match=where):
        paired_examples(orc.compare(fine, fine), runs=[a, b])

    def scored(request: FakeRequest) -> str:
        return json.dumps({"score": int(request.messages[0]["content"].split("#")[1])})

    # A reply of Infinity is re-asked now (item 9), so the infinite score comes from an
    # output expression that overflows, which a run keeps in memory.
    spec = {**SPEC, "nodes": {"judge": {**SPEC["nodes"]["judge"], "output": {"score": "number"}}}}
    spec["outputs"] = {"score": "judge.score if judge.score != 3 else 1e308 * 10"}
    kept = orc.run(
        orc.Graph.from_dict(spec, prompts=PROMPTS),
        rows("x", range(10)),
        transport=orc.FakeTransport(scored, models=["judge-a"]),
    )
    with pytest.raises(orc.ConfigurationError, match=r"^run2: output 'score' of example 'e03'"):
        orc.compare(fine, kept)
