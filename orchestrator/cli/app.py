"""The Typer app, its console, and what every verb shares: one-line errors, log messages
on the console."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    pass

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals of a crash could hold an API key
    no_args_is_help=True,
    help="Run LLM-judge evaluation protocols (graph files) against a vLLM server.",
)
console = Console()
# A 135M model on two CPU cores, shared by many requests at once, can take minutes a reply.
EMBEDDED_TIMEOUT = 600.0
err = Console(stderr=True)


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
