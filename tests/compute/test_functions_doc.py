"""The built-in functions' reference: CLI, docs/functions.md and the code say the same."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.compute.catalog import catalog, catalog_markdown, describe
from orchestrator.compute.registry import names

ROOT = Path(__file__).parents[2]


def test_docs_functions_md_is_generated_from_the_code() -> None:
    written = (ROOT / "docs/functions.md").read_text(encoding="utf-8")
    assert written == catalog_markdown(), (
        "docs/functions.md is stale: run `orchestrator functions --markdown > docs/functions.md`"
    )


def test_every_builtin_is_documented_with_its_arguments() -> None:
    docs = catalog()
    assert [d.name for d in docs] == names()
    for doc in docs:
        assert doc.summary, f"{doc.name} has no docstring"
        assert "runtime" not in [a.name for a in doc.arguments]
    jury = describe("jury_agreement")
    categories = next(a for a in jury.arguments if a.name == "categories")
    assert categories.default == "(0, 1, 2, 3)"
    assert [a.name for a in describe("identity").arguments if a.default is None] == ["value"]


def test_cli_lists_functions_and_shows_one() -> None:
    runner = CliRunner()
    listing = runner.invoke(app, ["functions"])
    assert listing.exit_code == 0, listing.output
    for name in ("median", "cohen_kappa", "jury_agreement", "pair_outcomes"):
        assert name in listing.output
    one = runner.invoke(app, ["functions", "jury_agreement"])
    assert one.exit_code == 0
    assert "categories" in one.output and "required arguments: results" in one.output
    typo = runner.invoke(app, ["functions", "jury_agrement"])
    assert typo.exit_code == 1
    assert "did you mean jury_agreement" in typo.output
