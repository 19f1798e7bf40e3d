"""The Typer app, its console, and what every verb shares: one-line errors, log messages
on the console."""

from __future__ import annotations

import inspect
import logging
import re
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.align import AlignMethod
from rich.console import Console, ConsoleDimensions
from rich.file_proxy import FileProxy
from rich.markup import escape
from rich.rule import Rule
from rich.style import Style
from rich.text import Text

if TYPE_CHECKING:
    pass

# A line break inside a paragraph of a docstring (not before an indented or listed line).
_SOFT_BREAK = re.compile(r"(?<=\S)\n(?=[^\s\-*|])")


# Typer 0.29 carries a click of its own (typer._click) and 0.13 uses click itself: the
# commands and contexts below are either, so they are typed loosely and read by attribute.
def _tidy(command: Any, ctx: Any) -> Any:
    """`--help` as a reader wants it: no `<bool>` after a flag (it takes no value), and a
    docstring's paragraphs as flowing text, so the commands list and a command's help wrap
    at the terminal's width rather than at the docstring's line breaks."""
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for attribute in ("help", "short_help"):
        text = getattr(command, attribute, None)
        if text:
            setattr(command, attribute, _SOFT_BREAK.sub(" ", inspect.cleandoc(text)))
    return command


class _Group(typer.core.TyperGroup):
    """The app's group: every command's help tidied (`_tidy`) when it is looked up."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        return _tidy(command, ctx) if command is not None else None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _tidy(self, ctx)
        for name in self.list_commands(ctx):
            self.get_command(ctx, name)
        super().format_help(ctx, formatter)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals of a crash could hold an API key
    no_args_is_help=True,
    help="Run LLM-judge evaluation protocols (graph files) against a vLLM server.",
)


def _version(value: bool) -> None:
    if value:
        from ..shipped import DISTRIBUTION, __version__

        typer.echo(f"orchestrator {__version__} (the {DISTRIBUTION} package)")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Run LLM-judge evaluation protocols (graph files) against a vLLM server."""


OFF_TERMINAL_WIDTH = 10_000  # "no wrapping": wider than any table or command we print
RULE_WIDTH = 80  # a rule is decoration: off a terminal it keeps a reading width


class WideConsole(Console):
    """A console that never hard-wraps off a terminal: rich wraps at 80 columns when its
    output is a file, a pipe or CI's log, which splits tables and the suggested
    `orchestrator trace …` command so it cannot be pasted. On a terminal (or with COLUMNS
    set) it keeps the width it is given.

    While a progress bar is live on another console (the run's), a plain console writes
    past it and the two collide on one line (`0:00:00A request is not in the cache…`):
    what this console prints then goes through the live display, which puts it above."""

    _through_live = False  # set while printing through the live display: no second detour

    def print(self, *objects: Any, **kwargs: Any) -> None:
        stream = sys.stderr if self.stderr else sys.stdout
        if self._file is not None or not isinstance(stream, FileProxy) or self._through_live:
            super().print(*objects, **kwargs)
            return
        self._through_live = True
        try:
            with self.capture() as captured:
                super().print(*objects, **kwargs)
        finally:
            self._through_live = False
        stream.write(captured.get())

    def _off_terminal(self) -> bool:
        return (
            self._width is None
            and not self.is_terminal
            and not self.is_jupyter
            and not (self._environ.get("COLUMNS") or "").isdigit()
        )

    @property
    def size(self) -> ConsoleDimensions:
        given = super().size
        return (
            ConsoleDimensions(OFF_TERMINAL_WIDTH, given.height) if self._off_terminal() else given
        )

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    def rule(
        self,
        title: str | Text = "",
        *,
        characters: str = "─",
        style: str | Style = "rule.line",
        align: AlignMethod = "center",
    ) -> None:
        """A rule as wide as the terminal, or RULE_WIDTH off one (not OFF_TERMINAL_WIDTH)."""
        if not self._off_terminal():
            super().rule(title, characters=characters, style=style, align=align)
            return
        self.print(Rule(title, characters=characters, style=style, align=align), width=RULE_WIDTH)


console = WideConsole()
# A 135M model on two CPU cores, shared by many requests at once, can take minutes a reply.
EMBEDDED_TIMEOUT = 600.0
err = WideConsole(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


class _ConsoleHandler(logging.Handler):
    """The library's messages (logger `orchestrator`) on stderr, as plain text: warnings
    marked, information as it is. Not on stdout, which a command's `--format json` keeps
    for its JSON alone."""

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if record.levelno >= logging.WARNING:
            err.print(f"[bold yellow]warning:[/] {escape(text)}", soft_wrap=True)
        else:
            err.print(text, markup=False, highlight=False, soft_wrap=True)


def _log_to_console() -> None:
    logger = logging.getLogger("orchestrator")
    if not any(isinstance(h, _ConsoleHandler) for h in logger.handlers):
        logger.addHandler(_ConsoleHandler())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main() -> None:
    _log_to_console()
    app()
