"""Verbs that turn run folders into tables: export (files for pandas or DuckDB) and ratings
(Elo and Bradley–Terry over several runs' battles)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..errors import OrchestratorError
from .app import app, console, fail


@app.command("export")
def export_cmd(
    folder: Annotated[Path, typer.Argument(help="Run folder.")],
    format: Annotated[
        str | None,
        typer.Option(help="parquet | csv | jsonl (default: --out's suffix, else parquet)."),
    ] = None,
    what: Annotated[str, typer.Option(help="results | node_runs | both")] = "results",
    out: Annotated[
        Path | None,
        typer.Option(help="A file for one table, or a folder (default: RUN_DIR/export/)."),
    ] = None,
    otlp: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Send the decision trace to this OTLP/HTTP traces endpoint instead of writing "
            "files (e.g. http://127.0.0.1:4318/v1/traces; `env`: the one "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names); docs/observability.md.",
        ),
    ] = None,
    otlp_header: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=VALUE",
            help="A header for the OTLP endpoint (repeatable; also OTEL_EXPORTER_OTLP_HEADERS); "
            "sent, never written to disk.",
        ),
    ] = None,
    content: Annotated[
        bool,
        typer.Option(help="With --otlp: send prompts, replies and outputs (--no-content: none)."),
    ] = True,
) -> None:
    """Write result lines (one row per example, dotted columns) and/or node runs to a file,
    or send the decision trace to an OpenTelemetry backend (--otlp)."""
    if otlp is not None:
        if format is not None or out is not None or what != "results":
            fail(
                "--otlp sends the trace and writes no file: give it without --format, --out, --what"
            )
        _export_otlp(folder, otlp, otlp_header or [], content)
        return
    from ..analysis import FORMATS, TABLES, export

    if format is not None and format not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    if what not in (*TABLES, "both"):
        fail(f"--what must be results, node_runs or both, not {what!r}")
    try:
        written = export(folder, out, format=format, what=what)  # type: ignore[arg-type]
    except OrchestratorError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"could not write the export: {exc}")
    for name, path in written.items():
        console.print(f"{name} written to {path}", soft_wrap=True, markup=False)


def _export_otlp(folder: Path, endpoint: str, headers: list[str], content: bool) -> None:
    from ..otel import export_run

    try:
        sent = export_run(folder, endpoint, headers, content=content)
    except OrchestratorError as exc:
        fail(str(exc))
    console.print(
        f"{sent.spans} spans of {sent.traces} examples sent to {sent.endpoint}",
        soft_wrap=True,
        markup=False,
    )


@app.command("ratings")
def ratings_cmd(
    folders: Annotated[list[Path], typer.Argument(help="Run folders of one pairwise graph.")],
    method: Annotated[str, typer.Option(help="elo | bt | both")] = "both",
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    field: Annotated[
        str | None, typer.Option(help="Result field holding the battles (default: the graph's).")
    ] = None,
    replicates: Annotated[
        int | None, typer.Option(help="Bootstrap replicates (default: the graph's).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Bootstrap seed (default: the graph's).")] = None,
    k: Annotated[float | None, typer.Option(help="Elo K (default: the graph's).")] = None,
    mixed_graphs: Annotated[
        bool, typer.Option(help="Pool runs of different graphs or graph versions.")
    ] = False,
    mixed_judges: Annotated[bool, typer.Option(help="Pool battles of different judges.")] = False,
) -> None:
    """Elo and Bradley–Terry with bootstrap intervals over the union of several runs' battles."""
    from ..analysis import ratings_across_runs, ratings_tables
    from ..ui import rich_table

    if method not in ("elo", "bt", "both"):
        fail(f"--method must be elo, bt or both, not {method!r}")
    if format not in ("table", "json"):
        fail(f"--format must be table or json, not {format!r}")
    try:
        result = ratings_across_runs(
            folders,
            method=method,  # type: ignore[arg-type]
            field_name=field,
            replicates=replicates,
            seed=seed,
            k=k,
            mixed_graphs=mixed_graphs,
            mixed_judges=mixed_judges,
        )
    except OrchestratorError as exc:
        fail(str(exc))
    if format == "json":
        print(json.dumps(result, indent=2))
        return
    for table in ratings_tables(result):
        console.print(rich_table(table))
    console.print(
        f"{result['matches']} battles over {result['cases']} cases from "
        f"{len(result['runs'])} runs of {result['graph']}, judged by {', '.join(result['judges'])}",
        markup=False,
        soft_wrap=True,
    )
    for warning in result["warnings"]:
        console.print(f"[bold yellow]warning:[/] {escape(warning)}", soft_wrap=True)
