"""The replay verb: a finished run with one step asked again, the rest read back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import OrchestratorError
from .app import app, console, fail
from .run import _exit_code, _parse_params, _print_summary


def names(value: str, option: str) -> list[str]:
    """`a,b` as a list of names; a one-line error naming `option` when it holds none."""
    found = [name.strip() for name in value.split(",") if name.strip()]
    if not found:
        fail(f"{option} names no node, got {value!r}")
    return found


def reask_options(
    base_url: list[str] | None, model: str | None, allow_server: list[str] | None, no_cache: bool
) -> dict[str, Any]:
    """What replay and stress pass on about the servers they may ask (only those named on
    the command) and the cache."""
    options: dict[str, Any] = {}
    if base_url:
        options["base_url"] = base_url[0] if len(base_url) == 1 else list(base_url)
    if model is not None:
        options["model"] = model
    if allow_server:
        options["allow_servers"] = list(allow_server)
    if no_cache:
        options["cache"] = False
    return options


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

    options = reask_options(base_url, model, allow_server, no_cache)
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


@app.command()
def stress(
    folder: Annotated[Path, typer.Argument(help="The run folder whose judge is stressed.")],
    node: Annotated[str, typer.Option(help="The judge node asked again.")],
    perturb: Annotated[
        str,
        typer.Option(
            help="Perturbations, a,b: length, order, injection, typos, format, a registered "
            "name or a .jinja file."
        ),
    ] = "length,injection,typos,format",
    base_url: Annotated[
        list[str] | None,
        typer.Option(help="Server asked (needed: never the one the run records); repeatable."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model asked (default: the run's).")] = None,
    rows: Annotated[int, typer.Option(help="Rows of the run stressed (a seeded choice).")] = 50,
    seed: Annotated[int, typer.Option(help="Seed of the rows, perturbations and tests.")] = 0,
    judged: Annotated[
        str | None, typer.Option(help="Input the node judges (default: graph's judged:).")
    ] = None,
    pair: Annotated[str | None, typer.Option(help="The two inputs `order` swaps, a,b.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder of the replays (default: inside the run).")
    ] = None,
    allow_server: Annotated[
        list[str] | None,
        typer.Option(metavar="URL", help="A node's own server stress may ask (repeatable)."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the cache.")
    ] = False,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """Ask a judge node again on counterfactual versions of the text it judges (longer,
    swapped, with an injected instruction, …) and report what each change did, with flags."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ..api import astress

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    two = names(pair, "--pair") if pair is not None else None
    if two is not None and len(two) != 2:
        fail(f"--pair names two inputs, a,b; got {pair!r}")
    options = reask_options(base_url, model, allow_server, no_cache)
    try:
        report = asyncio.run(
            astress(
                folder,
                node=node,
                perturb=names(perturb, "--perturb"),
                rows=rows,
                seed=seed,
                judged=judged,
                pair=(two[0], two[1]) if two is not None else None,
                out=out,
                **options,
            )
        )
    except (ValueError, OrchestratorError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(report.model_dump_json(indent=2))
        return
    table = Table(title=f"stress of {report.node}", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("perturbation", "variant", "output", "n", "effect", "95% CI", "p", "Holm p"):
        table.add_column(column)
    for item in report.perturbations:
        shown = f"{item.estimate:+.2f}" if item.kind == "shift" else f"{item.estimate:.0%} flip"
        ci = "" if item.low is None or item.high is None else f"{item.low:.2f} … {item.high:.2f}"
        table.add_row(
            *(
                escape(cell)
                for cell in (
                    item.perturbation,
                    item.variant,
                    f"{item.node}.{item.field}",
                    str(item.n),
                    shown,
                    ci,
                    f"{item.p:.3g}",
                    f"{item.p_holm:.3g}",
                )
            )
        )
    console.print(table)
    console.rule("flags")
    for line in report.flags or ["none: no perturbation moved the judge beyond chance"]:
        console.print(escape(line), soft_wrap=True)
