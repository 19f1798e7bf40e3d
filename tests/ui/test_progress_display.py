"""The terminal's view of a run (`orchestrator.ui.progress`): a bar where a console redraws
in place, logged progress lines anywhere else, fed by the engine's `RunProgress` (counters
and typed events) on its flush tick."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console

from orchestrator import events as ev
from orchestrator.engine.flush import RunProgress
from orchestrator.store.records import Counts
from orchestrator.ui import progress as ui_progress
from orchestrator.ui.progress import ProgressDisplay, run_progress


def shown(
    console: Console | None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Start a display, tick it twice and stop it; the progress lines it logged (every tick:
    their interval is set to nothing here)."""
    monkeypatch.setattr(ui_progress, "PROGRESS_LINE_SECONDS", 0.0)
    caplog.set_level(logging.INFO, logger="orchestrator")
    sink = ev.RunEvents()
    stats = Counts(examples_ok=2, examples_failed=1, requests=9, cache_hits=3)
    display = ProgressDisplay(console)
    display.start(RunProgress(stats, 5, lambda: "limit 8", lambda: 4, events=sink))
    sink.emit(ev.ServerDown(url="http://s/v1", patience=60))
    display.tick()
    display.tick()
    display.stop()
    assert sink._subscribers == []  # the bar's subscription ends with the run
    return [r.getMessage() for r in caplog.records if r.name == "orchestrator.ui.progress"]


def test_a_terminal_gets_the_bar_with_every_figure_and_no_lines(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = io.StringIO()
    lines = shown(Console(file=screen, force_terminal=True, width=300), caplog, monkeypatch)
    assert lines == []
    drawn = screen.getvalue()
    for figure in ("examples", "3/5", "ok 2 · failed 1", "req 9 · hits 3", "limit 8"):
        assert figure in drawn, drawn
    assert "http://s/v1" in drawn  # the latest warning among the run's events


def test_off_a_terminal_lines_are_logged_and_the_bar_drawn_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = io.StringIO()
    lines = shown(Console(file=file, force_terminal=False, width=300), caplog, monkeypatch)
    assert len(lines) == 2 and lines[0].startswith("progress: 3 of 5 examples"), lines
    assert "in flight 4" in lines[0] and "limit 8" in lines[0]
    assert file.getvalue().count("ok 2 · failed 1") == 1, file.getvalue()


def test_without_a_console_only_lines(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = shown(None, caplog, monkeypatch)
    assert len(lines) == 2 and all("failed 1" in line for line in lines), lines


def test_orc_run_progress_draws_on_stderr_only_when_asked() -> None:
    assert run_progress(False).console is None
    console = run_progress(True).console
    assert console is not None and console.stderr
