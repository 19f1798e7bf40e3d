"""The replay verb: a finished run with one step asked again, the rest read back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import OrchestratorError
from .app import app, fail
from .run import _exit_code, _parse_params, _print_summary


def names(value: str, option: str) -> list[str]:
    """`a,b` as a list of names; a one-line error naming `option` when it holds none."""
    found = [name.strip() for name in value.split(",") if name.strip()]
    if not found:
        fail(f"{option} names no node, got {value!r}")
    return found


@app.command()
def replay(
    folder: Annotated[Path, typer.Argument(help="The run folder replayed.")],
    node: Annotated[
        str,
        typer.Option(help="Node(s) asked again, a,b (every node reading them is asked too)."),
    ],
    out: Annotated[Path, typer.Option(help="The replay's own run folder.")],
    base_url: Annotated[
        list[str] | None,
        typer.Option(help="Server asked (needed: never the one the run records); repeatable."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model asked (default: the run's).")] = None,
    prompt: Annotated[
        Path | None, typer.Option(help="Template file replacing the named node's prompt.")
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option(help="A graph param set over the run's, key=value.")
    ] = None,
    allow_server: Annotated[
        list[str] | None,
        typer.Option(metavar="URL", help="A node's own server the replay may ask (repeatable)."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the cache.")
    ] = False,
) -> None:
    """Ask one node of a finished run again (another model, prompt or param), reading every
    other node's output back from the run's trace, into a run folder of its own."""
    from ..api import areplay

    options: dict[str, Any] = {}
    if base_url:
        options["base_url"] = base_url[0] if len(base_url) == 1 else list(base_url)
    if model is not None:
        options["model"] = model
    if allow_server:
        options["allow_servers"] = list(allow_server)
    if no_cache:
        options["cache"] = False
    try:
        result = asyncio.run(
            areplay(
                folder,
                node=names(node, "--node"),
                out=out,
                prompt=prompt,
                params=_parse_params(param or []),
                **options,
            )
        )
    except OrchestratorError as exc:
        fail(str(exc))
    _print_summary(result.manifest, out)
    raise typer.Exit(_exit_code(result))
