"""The align verb: tune a judge to a few human labels, scored on a held-out test set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ..errors import OrchestratorError
from .app import EMBEDDED_TIMEOUT, app, console, fail
from .run import GRAPH_HELP, own_server, start_on_first_use, stop_server
from .settings import given_settings, takes_settings

if TYPE_CHECKING:
    from ..analysis import Alignment


def _counts(text: str) -> list[int]:
    """`--shots 0,2,4,8` as counts."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        fail(f"--shots takes counts like 0,2,4,8, got {text!r}")
    if not counts:
        fail("--shots needs at least one count")
    return counts


# The run settings align's runs take from the command line (the others keep their defaults;
# `--overwrite` is align's own).
ALIGN_SETTINGS = (
    "base_url",
    "model",
    "server_id",
    "api_key",
    "concurrency",
    "cache",
    "structured",
    "timeout",
    "trust",
)


@app.command()
@takes_settings(
    ALIGN_SETTINGS,
    after="seed",
    helps={
        "base_url": "OpenAI-compatible server (repeat for replicas). Default: OPENAI_BASE_URL, "
        "else the embedded vLLM CPU server (started on the first request not in the cache "
        "when none is running, as `run` does)."
    },
)
def align(
    graph: Annotated[Path, typer.Argument(help=GRAPH_HELP)],
    data: Annotated[Path, typer.Option("--data", "-d", help="Dataset with the labelled rows.")],
    labels: Annotated[
        Path, typer.Option(help="Human labels (JSONL keyed by example id), as meta-eval.")
    ],
    node: Annotated[str, typer.Option(help="The judging LLM node to align.")],
    out: Annotated[Path, typer.Option(help="Folder for the aligned graph and its record.")],
    field: Annotated[
        str | None,
        typer.Option(help="The node's output field compared with the labels (if several)."),
    ] = None,
    shots: Annotated[str, typer.Option(help="Few-shot counts tried, e.g. 0,2,4,8.")] = "0,2,4,8",
    variant: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            "--variants",
            help="A variant tried (repeat for more; after the graph's own `variants:`): "
            "prompt=NAME, system=NAME or params.NAME=VALUE.",
        ),
    ] = None,
    metric: Annotated[str, typer.Option(help="alpha | kappa | spearman | accuracy")] = "alpha",
    folds: Annotated[int, typer.Option(help="Folds of the search set.")] = 5,
    test_share: Annotated[float, typer.Option(help="Share of labelled examples held out.")] = 0.3,
    isotonic: Annotated[
        bool, typer.Option("--isotonic", help="Also try a monotone map onto the labels' scale.")
    ] = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            help=(
                "Row field examples are nested in (e.g. user): each cluster stays on one side "
                "of the split, and the test bootstrap resamples clusters."
            )
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, shots and bootstrap.")] = 0,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the cache.")
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Delete what align wrote in --out before (only in a folder it wrote).",
        ),
    ] = False,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    **settings: Any,
) -> None:
    """Search few-shot sets and variants on folds of the labelled examples, then score the
    graph as given and the best configuration once on a held-out test set."""
    from ..api import align as run_align

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    options: dict[str, Any] = dict(given_settings(settings))
    options["cache"] = False if no_cache else options.get("cache", True)
    server = None
    base_url = options.get("base_url")
    if base_url:
        options["base_url"] = base_url[0] if len(base_url) == 1 else base_url
    elif not os.environ.get("OPENAI_BASE_URL"):
        # As `run` does: the embedded server, this command's own if none is running.
        options["base_url"], server = own_server(None, on_first_use=True)
        options["transport"] = start_on_first_use(None, server)
        options.setdefault("timeout", EMBEDDED_TIMEOUT)
    try:
        found = run_align(
            graph,
            data,
            labels,
            node=node,
            field=field,
            out=out,
            shots=_counts(shots),
            variants=list(variant or []),
            metric=metric,  # type: ignore[arg-type]  # checked by align
            folds=folds,
            test_share=test_share,
            isotonic=isotonic,
            cluster=cluster,
            seed=seed,
            overwrite=overwrite,
            **options,
        )
    except (OrchestratorError, ValueError) as exc:
        fail(str(exc))
    finally:
        stop_server(server)
    if format == "json":
        typer.echo(found.model_dump_json(indent=2))
        return
    _print(found)


def _interval(ci: list[float] | None) -> str:
    return "no interval" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _value(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def _print(found: Alignment) -> None:
    """The verdict, both judges on the test set, the chosen configuration and the folder."""
    console.print(
        f"aligned judge against the graph as given on {len(found.test_ids)} held-out "
        f"examples: [bold]{found.verdict}[/] ({found.metric} of "
        f"{escape(found.node)}.{escape(found.field)})",
        soft_wrap=True,
    )
    for name, side in (("baseline", found.baseline), ("aligned", found.aligned)):
        console.print(
            f"  {name:<9} {_value(side.test.value)} {_interval(side.test.ci)}  "
            f"{escape(side.configuration.label)}",
            soft_wrap=True,
        )
    gap = found.difference
    console.print(f"  difference {_value(gap.value)} {_interval(gap.ci)}", soft_wrap=True)
    console.print(f"graph: {escape(found.graph)} (protocol {escape(found.name)})", soft_wrap=True)
    for note in found.notes:
        console.print(f"note: {escape(note)}", soft_wrap=True)
