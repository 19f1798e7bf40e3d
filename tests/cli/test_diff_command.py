"""`orchestrator diff RUN_A RUN_B [--format json]`: the tables name the first differing node
of each changed example; the JSON is the `RunDiff` record; runs that cannot be diffed are an
error in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_diff import PLANTED, responder, run
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.analysis.diff import RunDiff
from orchestrator.cli import app
from orchestrator.cli.app import console

DOC = Path(__file__).resolve().parents[2] / "docs" / "analysis.md"


def _planted(t: str) -> str:
    return f"k-{t}" if f"e0{t[1:]}" not in PLANTED else f"other-{t}!"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("diffcli")
    return run(root / "a", responder()), run(root / "b", responder(key=_planted))


def test_table_names_the_first_differing_node(pair: tuple[Path, Path]) -> None:
    shown = CliRunner().invoke(app, ["diff", *map(str, pair)])
    assert shown.exit_code == 0, shown.output
    assert "3 with a changed final output" in shown.output
    lines = [line.split() for line in shown.output.splitlines()]
    assert [w[:2] for w in lines if w and w[0] in PLANTED] == [
        [e, "extract"] for e in sorted(PLANTED)
    ]
    assert ["judge", "3", "10"] in lines and ["check", "0", "10"] in lines


def test_top_limits_the_listed_examples(pair: tuple[Path, Path]) -> None:
    shown = CliRunner().invoke(app, ["diff", *map(str, pair), "--top", "1"])
    assert shown.exit_code == 0, shown.output
    assert "… and 2 more" in shown.output


def test_json_is_the_record(pair: tuple[Path, Path]) -> None:
    dumped = CliRunner().invoke(app, ["diff", *map(str, pair), "--format", "json"])
    assert dumped.exit_code == 0, dumped.output
    parsed = RunDiff.model_validate_json(dumped.stdout)
    assert {d.example for d in parsed.differences} == PLANTED
    assert {d.node for d in parsed.differences} == {"extract"}


def test_identical_runs_say_so(pair: tuple[Path, Path]) -> None:
    shown = CliRunner().invoke(app, ["diff", str(pair[0]), str(pair[0])])
    assert shown.exit_code == 0, shown.output
    assert "no node value and no output differs" in shown.output


def test_refusals_are_one_line(pair: tuple[Path, Path], tmp_path: Path) -> None:
    cli = CliRunner()
    missing = cli.invoke(app, ["diff", str(pair[0]), str(tmp_path / "nowhere")])
    assert missing.exit_code == 1 and "no results.jsonl" in missing.output
    bad = cli.invoke(app, ["diff", *map(str, pair), "--format", "yaml"])
    assert bad.exit_code == 1 and "--format must be table or json" in bad.output


def test_the_docs_example_is_what_the_command_prints(pair: tuple[Path, Path]) -> None:
    text = DOC.read_text(encoding="utf-8").split("## Where two runs part: diff", 1)[1]
    block = text.split("$ orchestrator diff runs/a runs/b --top 2\n", 1)[1].split("```", 1)[0]
    shown = CliRunner().invoke(app, ["diff", *map(str, pair), "--top", "2"])
    assert shown.exit_code == 0, shown.output
    printed = [line.rstrip() for line in shown.output.splitlines()]
    assert printed == block.rstrip("\n").splitlines()


def test_a_late_change_in_a_long_value_stays_in_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 14 of issue 35: each value was cut to its first 60 characters, so two long
    texts that part after that showed the same beginning twice and never the change."""
    shared = "the-judge-explains-at-length-why-this-answer-holds-up-" * 3  # one word: scored

    def ending(word: str) -> Callable[[str], str]:
        return lambda t: f"{shared}{word}-{t}-and-then-some-closing-words"

    a = run(tmp_path / "a", responder(key=ending("alpha")))
    b = run(tmp_path / "b", responder(key=ending("omega")))
    monkeypatch.setattr(console, "_width", 200)  # no folding: each cell on one line
    shown = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert shown.exit_code == 0, shown.output
    rows = [line for line in shown.output.splitlines() if line.strip().startswith("e03")]
    assert len(rows) == 1, shown.output
    assert "alpha-t3" in rows[0] and "omega-t3" in rows[0], rows[0]
    found = orc.diff(a, b).differences[0]
    for side in ("a", "b"):
        assert len(found.shown(side)) == 60 and found.shown(side).startswith("…")
