"""Logging is the library's one voice: each module logs through its own logger, named by
`__name__`, so an embedding program can tune `orchestrator.calls` apart from
`orchestrator.report`, and the CLI's handler on `orchestrator` still hears them all."""

from __future__ import annotations

import ast
import importlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

import orchestrator

# `orchestrator.cli.app` the attribute is the Typer app; the module is reached by name.
cli_app = importlib.import_module("orchestrator.cli.app")

PACKAGE = Path(orchestrator.__file__).parent


def modules() -> Iterator[tuple[str, ast.Module]]:
    """Every module of the package, parsed, with its path relative to the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def is_get_logger(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name == "getLogger"


def test_every_logger_is_named_by_its_module() -> None:
    # The CLI alone names the package's root logger, where it hangs its console handler.
    wrong = [
        f"{name}:{node.lineno}"
        for name, tree in modules()
        if not name.startswith("cli/")
        for node in ast.walk(tree)
        if is_get_logger(node)
        and not (
            len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "__name__"
        )
    ]
    assert wrong == [], "getLogger(__name__), not a hard-coded name"


@pytest.mark.parametrize("module", ["orchestrator.servers.outage", "orchestrator.analysis.compare"])
def test_a_module_logger_reaches_the_cli_handler(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record from deep in the package comes out of the CLI's handler as it did when
    every module shared the `orchestrator` logger: marked as a warning, text as logged."""
    shown = io.StringIO()
    # A console of the test's own: setting `file` on the CLI's would pin it to this
    # test's stderr for the tests after it.
    monkeypatch.setattr(cli_app, "err", Console(file=shown))
    root = logging.getLogger("orchestrator")
    handler = cli_app._ConsoleHandler()
    monkeypatch.setattr(root, "handlers", [handler])
    monkeypatch.setattr(root, "level", logging.INFO)
    monkeypatch.setattr(root, "propagate", False)
    logging.getLogger(module).warning("the server at %s does not answer", "x")
    logging.getLogger(module).debug("not shown below INFO")
    assert shown.getvalue().splitlines() == ["warning: the server at x does not answer"]


def test_the_library_never_prints_nor_takes_a_say_callback() -> None:
    """Outside cli/ (the adapter that owns the terminal), a message is a log record: no
    `print(` call, no `say` parameter through which a caller would pass one; and a `log`
    callback (start-up progress) defaults to a logger, never to print."""
    found = []
    for name, tree in modules():
        if name.startswith("cli/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                found.append(f"{name}:{node.lineno}: print(")
            if isinstance(node, ast.arguments):
                params = [*node.posonlyargs, *node.args, *node.kwonlyargs]
                found += [f"{name}:{p.lineno}: say parameter" for p in params if p.arg == "say"]
                defaults = [*node.defaults, *(d for d in node.kw_defaults if d is not None)]
                found += [
                    f"{name}:{d.lineno}: print as a default"
                    for d in defaults
                    if isinstance(d, ast.Name) and d.id == "print"
                ]
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "say":
                found.append(f"{name}:{node.lineno}: say field")
    assert found == []
