"""Verbs that run a graph through batch files instead of a live server: batch export, batch
import (see docs/batch.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import GraphError, OrchestratorError
from .app import app, console, fail
from .run import GRAPH_HELP, Trust, _graph_path, _parse_params

if TYPE_CHECKING:
    from ..batch import RoundOutcome

batch_app = typer.Typer(
    no_args_is_help=True,
    help="Run a graph through OpenAI batch files (vllm run-batch) instead of a live server.",
)
app.add_typer(batch_app, name="batch")

DIR_HELP = "Batch folder: the job, the batch files and the imported replies."
AllowServer = Annotated[
    list[str] | None,
    typer.Option(
        metavar="URL",
        help="A node's own server a round may ask (repeatable); the folder's job names none "
        "by itself.",
    ),
]


@batch_app.command("export")
def export_cmd(
    graph: Annotated[
        Path | None, typer.Argument(help=GRAPH_HELP + " Omit to export the folder's job again.")
    ] = None,
    data: Annotated[Path | None, typer.Option("--data", "-d", help="Dataset file.")] = None,
    folder: Annotated[Path, typer.Option("--dir", help=DIR_HELP)] = Path("batch"),
    model: Annotated[
        str | None, typer.Option(help="Model name the requests carry (the batch's model).")
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option(help="Override a graph param: key=value.")
    ] = None,
    structured: Annotated[
        str,
        typer.Option(help="server (the schema in response_format) | prompt (in the prompt)."),
    ] = "server",
    server_root: Annotated[
        str | None,
        typer.Option(
            help="The weights that answer the batch: the --model path or name given to "
            "vllm run-batch (what a vLLM server started so reports as its root).",
            show_default=False,
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(help="The --max-model-len given to vllm run-batch, if any.", min=1),
    ] = None,
    server_id: Annotated[
        str | None,
        typer.Option(
            help="Name the weights instead of --server-root (a live run then passes the "
            "same --server-id to find the replies).",
            show_default=False,
        ),
    ] = None,
    cache: Annotated[Path | None, typer.Option(help="Response cache file.")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N rows.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run folder written once nothing is left to ask.")
    ] = None,
    trust: Trust = False,
    allow_server: AllowServer = None,
) -> None:
    """Write the requests the examples wait for now as a batch input file."""
    from ..batch import BatchFolder, BatchJob, export_round

    job = None
    if graph is not None:
        if data is None or model is None:
            fail("a new batch job needs --data and --model (or omit GRAPH to reuse --dir's)")
        if server_root is None and server_id is None:
            fail(
                "a new batch job needs --server-root PATH (the --model given to vllm "
                "run-batch) or --server-id ID: the weights that answer it, so that its "
                "replies are never taken for another model's"
            )
        if structured not in ("server", "prompt"):
            fail("--structured must be server or prompt (a batch has no server to probe)")
        job = BatchJob(
            graph=_graph_path(graph),
            data=data,
            model=model,
            params=_parse_params(param or []),
            structured=structured,  # type: ignore[arg-type]
            cache=cache,
            limit=limit,
            server_root=server_root,
            max_model_len=max_model_len,
            server_id=server_id,
        )
    try:
        done = asyncio.run(
            export_round(
                BatchFolder(folder), job, out, trust=trust, allow_servers=allow_server or ()
            )
        )
    except GraphError as exc:
        fail(
            f"{exc.problems[0]}"
            + (f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else "")
        )
    except OrchestratorError as exc:
        fail(str(exc))
    _say_state(done.state)
    if done.round is None:
        console.print("Nothing to export: no example waits for a reply.")
        if done.run_folder is not None:
            console.print(f"Run folder written: {done.run_folder}", markup=False, soft_wrap=True)
        else:
            console.print("Write the results to a run folder with --out RUN_DIR.")
        return
    saved = BatchFolder(folder).job()
    weights = saved.server_root or "MODEL_PATH"
    context = f" --max-model-len {saved.max_model_len}" if saved.max_model_len else ""
    for requests, output in zip(done.files, done.outputs, strict=True):
        console.print(f"Round {done.round}: wrote {requests}", markup=False, soft_wrap=True)
        console.print(
            f"  run it, e.g.: vllm run-batch -i {requests} -o {output} "
            f"--model {weights} --served-model-name {saved.model}{context}",
            markup=False,
            soft_wrap=True,
        )
        console.print(f"  then: orchestrator batch import {output}", markup=False, soft_wrap=True)


@batch_app.command("import")
def import_cmd(
    output: Annotated[Path, typer.Argument(help="A batch output file (JSONL).")],
    folder: Annotated[
        Path | None, typer.Option("--dir", help=DIR_HELP + " Default: the file's folder.")
    ] = None,
    partial: Annotated[
        bool,
        typer.Option(help="Keep the usable lines even if some are error lines or missing."),
    ] = False,
    server_root: Annotated[
        str | None,
        typer.Option(
            help="For a folder whose job names no weights: the --model given to vllm "
            "run-batch (a job that names them must name the same).",
            show_default=False,
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            help="With --server-root: the --max-model-len given to vllm run-batch.", min=1
        ),
    ] = None,
    server_id: Annotated[
        str | None,
        typer.Option(
            help="For a folder whose job names no weights: their name.", show_default=False
        ),
    ] = None,
    trust: Trust = False,
    allow_server: AllowServer = None,
) -> None:
    """Load a batch runner's replies; the graph then runs on to the next frontier."""
    from ..batch import BatchFolder, import_output

    where = BatchFolder(folder or output.parent)
    try:
        if server_root is not None or server_id is not None:
            where.name_weights(server_root, max_model_len, server_id)
        done = asyncio.run(
            import_output(where, output, partial, trust=trust, allow_servers=allow_server or ())
        )
    except OrchestratorError as exc:
        fail(str(exc))
    console.print(
        f"Imported {done.imported} replies from {done.output} (answers {done.answers.name}).",
        markup=False,
        soft_wrap=True,
    )
    _say_state(done.state)
    if done.state.frontier:
        console.print(
            f"Next: orchestrator batch export --dir {where.path}", markup=False, soft_wrap=True
        )
    else:
        console.print(
            f"Every example is settled: orchestrator batch export --dir {where.path} "
            "--out RUN_DIR writes the run folder.",
            markup=False,
            soft_wrap=True,
        )


def _say_state(state: RoundOutcome) -> None:
    console.print(
        f"Examples: {state.ok} ok, {state.failed} failed, {state.waiting} waiting; "
        f"{len(state.frontier)} requests to ask next.",
        markup=False,
        soft_wrap=True,
    )
