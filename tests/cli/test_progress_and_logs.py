"""Log lines and the progress bar share a terminal (issue 34 item 5): what the CLI prints
while a run's bar is live goes through the live display, so it lands on a line of its own
above the bar instead of after the bar's last character (`0:00:00A request is not …`)."""

from __future__ import annotations

import importlib
import io
import logging
import re

import pytest
from rich.console import Console

from orchestrator.engine.flush import RunProgress
from orchestrator.store.records import Counts
from orchestrator.ui.progress import ProgressDisplay

# The module, not the Typer app the package exports under the same name.
cli_app = importlib.import_module("orchestrator.cli.app")

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _shown(raw: str) -> list[str]:
    """The lines a terminal would end with, roughly: escapes gone, each line's last
    carriage-return segment kept."""
    return [line.split("\r")[-1] for line in ANSI.sub("", raw).split("\n")]


def test_a_log_line_during_a_live_progress_bar_gets_a_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = io.StringIO()
    monkeypatch.setattr("sys.stderr", terminal)
    err = cli_app.WideConsole(stderr=True)
    monkeypatch.setattr(cli_app, "err", err)
    logger = logging.getLogger("orchestrator.test_progress_and_logs")
    handler = cli_app._ConsoleHandler()
    logger.addHandler(handler)
    # The run's own bar (orchestrator.ui, as `orc.run(progress=True)` draws it): a console
    # of its own on stderr, here one that takes the test's stream for a terminal.
    bar = ProgressDisplay(Console(stderr=True, force_terminal=True, width=60))
    try:
        bar.start(RunProgress(Counts(), 10))
        try:
            bar.tick()
            logger.warning("A request needs the server: starting it")
            err.print("Using port 8123 instead.")
        finally:
            bar.stop()
    finally:
        logger.removeHandler(handler)
    lines = _shown(terminal.getvalue())
    said = [line for line in lines if "A request needs the server" in line]
    assert said and all(line.startswith("warning: A request needs") for line in said), lines
    assert any(line.startswith("Using port 8123 instead.") for line in lines), lines
