"""What `--help` and `--version` show (issue 34 item 7): flags carry no `<bool>` (they take
no value), a docstring's paragraph flows at the terminal's width instead of breaking where
its source lines did, and `--version` names the version and the package."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

import orchestrator
from orchestrator.cli import app

RUNNER = CliRunner()
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _help(*args: str) -> str:
    done = RUNNER.invoke(app, [*args, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_no_flag_is_shown_taking_a_bool(command: str) -> None:
    shown = _help(*([command] if command else []))
    assert "<bool>" not in shown
    assert re.search(r"--help\s+Show this message", shown)


def test_the_commands_list_flows_a_summary_of_several_lines() -> None:
    """`status`'s summary is three source lines; shown, it is one text wrapped at 80."""
    shown = _help()
    start = shown.index("│ status")
    block = shown[start : shown.index("│ serve", start)]
    words = " ".join(line.strip("│ ").removeprefix("status").strip() for line in block.splitlines())
    assert "node runs in flight (example, node, attempt, server, for how long)" in words
    # Every line of the block but the last is filled to the panel's width, give or take
    # one word: a break where the docstring broke leaves a line half empty.
    lines = [line.rstrip("│").rstrip() for line in block.splitlines() if line.strip()]
    assert all(len(line) > 60 for line in lines[:-1]), lines


def test_version_names_the_version_and_the_package() -> None:
    done = RUNNER.invoke(app, ["--version"])
    assert done.exit_code == 0
    assert (
        done.output.strip()
        == f"orchestrator {orchestrator.__version__} (the orchestrator-judge package)"
    )
