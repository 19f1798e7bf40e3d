"""Command line: validate, run, trace, serve, cache."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import DatasetError, GraphError, RunFolderError
from .outage import DEFAULT_SERVER_WAIT, ServerGone

if TYPE_CHECKING:
    from .embedded import EmbeddedServer
    from .graph import CompiledGraph
    from .runner import RunOutcome

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


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            _fail(f"--param takes key=value, got '{item}'")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


@app.command()
def validate(graph: Annotated[Path, typer.Argument(help="Graph file (YAML).")]) -> None:
    """Check a graph file without sending a request; exit 1 listing every problem."""
    from .compile import compile_graph

    try:
        compiled = compile_graph(graph)
    except GraphError as exc:
        for problem in exc.problems:
            err.print(f"[red]✗[/] {escape(str(problem))}", soft_wrap=True)
        err.print(f"{len(exc.problems)} problem(s) in {escape(str(graph))}", soft_wrap=True)
        raise typer.Exit(1) from None
    llm = sum(n.is_llm for n in compiled.nodes.values())
    console.print(
        f"[green]✓[/] {graph}: graph '{compiled.name}' is valid — {len(compiled.nodes)} nodes "
        f"({llm} LLM), order: {' → '.join(compiled.order)}; hash {compiled.content_hash}"
    )


@app.command()
def run(
    graph: Annotated[Path, typer.Argument(help="Graph file (YAML).")],
    data: Annotated[Path, typer.Option("--data", "-d", help="Dataset (.jsonl or .csv).")],
    out: Annotated[Path | None, typer.Option(help="Run folder (default runs/<graph>).")] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            help="OpenAI-compatible server, e.g. http://gpu:8000/v1. "
            "Default: the embedded vLLM CPU server."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model name (default: the server's first).")
    ] = None,
    api_key: Annotated[
        str,
        typer.Option(
            envvar="OPENAI_API_KEY", show_default=False, help="API key (env OPENAI_API_KEY)."
        ),
    ] = "EMPTY",
    concurrency: Annotated[int, typer.Option(help="In-flight requests per server.")] = 64,
    limit: Annotated[int | None, typer.Option(help="Run only the first N rows.")] = None,
    cache: Annotated[Path | None, typer.Option(help="Response cache file.")] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the cache.")
    ] = False,
    refresh: Annotated[bool, typer.Option(help="Ignore cached replies (still store new).")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace a run folder of another run.")] = False,
    structured: Annotated[
        str, typer.Option(help="auto (canary decides) | server | prompt.")
    ] = "auto",
    param: Annotated[
        list[str] | None, typer.Option(help="Override a graph param: key=value.")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Seconds per request (default 120; 600 on the embedded CPU server)."),
    ] = None,
    server_wait: Annotated[
        float,
        typer.Option(
            help="Seconds to wait for a server that stops answering mid-run before stopping "
            "the run (finished work is kept; re-run to resume)."
        ),
    ] = DEFAULT_SERVER_WAIT,
    port: Annotated[int | None, typer.Option(help="Port of the embedded server.")] = None,
) -> None:
    """Run a graph over a dataset into a run folder; re-running the same command resumes."""
    if structured not in ("auto", "server", "prompt"):
        _fail("--structured must be auto, server or prompt")
    compiled = _compile_or_exit(graph)
    server = None
    embedded_default = base_url is None
    if base_url is None and any(n.is_llm for n in compiled.nodes.values()):
        base_url, server = _embedded_server(port)
    try:
        outcome = _execute(
            graph=graph,
            data=data,
            out=out or Path("runs") / graph.stem,
            base_url=base_url or "http://127.0.0.1:8000/v1",
            model=model,
            api_key=api_key,
            concurrency=concurrency,
            limit=limit,
            cache=cache,
            use_cache=not no_cache,
            refresh=refresh,
            overwrite=overwrite,
            structured=structured,
            params=_parse_params(param or []),
            timeout=timeout or (EMBEDDED_TIMEOUT if embedded_default else 120.0),
            server_wait=server_wait,
        )
    finally:
        _stop(server)
    if outcome.manifest["counts"]["examples_failed"]:
        raise typer.Exit(2)


def _compile_or_exit(graph: Path) -> CompiledGraph:
    from .compile import compile_graph

    try:
        return compile_graph(graph)
    except GraphError as exc:
        for problem in exc.problems:
            err.print(f"[red]✗[/] {escape(str(problem))}", soft_wrap=True)
        raise typer.Exit(1) from None


def _embedded_server(port: int | None) -> tuple[str, EmbeddedServer | None]:
    """The running embedded server's URL, or a server started for this command."""
    from . import embedded

    embedded_port = port or embedded.DEFAULT_PORT
    base_url = embedded.find_running(embedded_port)
    if base_url:
        console.print(f"Using the embedded vLLM server already running at {base_url}.")
        return base_url, None
    console.print(
        "No --base-url given and no embedded server running: starting the embedded "
        f"vLLM CPU server on port {embedded_port} for this command (stopped afterwards)."
    )
    # A kill (SIGTERM) must still stop the server we started, like Ctrl-C does.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        server = embedded.start_server(port=embedded_port, log=console.print)
    except embedded.EmbeddedServerError as exc:
        _fail(str(exc))
        raise
    return server.base_url, server


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop(server: EmbeddedServer | None) -> None:
    if server is not None:
        console.print("Stopping the embedded server.")
        server.stop()


def _execute(**fields: Any) -> RunOutcome:
    """One run with errors turned into messages; prints the summary table."""
    from .client import ServerError
    from .runner import RunConfig, execute

    config = RunConfig(**fields)
    # A kill (SIGTERM) unwinds like Ctrl-C: queued results and traces are written out and
    # the manifest says "interrupted".
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        outcome = asyncio.run(execute(config, console))
    except (GraphError, DatasetError, RunFolderError, ServerError) as exc:
        _fail(str(exc))
        raise
    except KeyboardInterrupt:
        err.print(
            "Interrupted. Finished examples are saved; re-run the same command to resume "
            f"({config.out})."
        )
        raise typer.Exit(130) from None
    except (sqlite3.Error, OSError) as exc:
        what = "a database of the run" if isinstance(exc, sqlite3.Error) else "a file"
        _fail(
            f"{what} could not be written ({exc}); finished work up to the last write is in "
            f"{config.out}. Fix the cause (e.g. free disk space), then re-run the same command "
            "to resume."
        )
        raise
    except ServerGone as exc:
        _fail(
            f"stopped: {exc}. Finished examples are saved in {config.out}; re-run the same "
            "command to resume once the server is back.",
            code=3,
        )
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    _print_summary(outcome.manifest, outcome.folder)
    return outcome


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Parent folder of the demo's run folders.")] = Path(
        "runs/demo"
    ),
    port: Annotated[int | None, typer.Option(help="Port of the embedded server.")] = None,
    limit: Annotated[int | None, typer.Option(help="Rows per graph.")] = None,
) -> None:
    """The shipped pointwise and ExPerT judges on their examples, on the embedded server."""
    root = Path(__file__).resolve().parent.parent
    graphs = [g for g in ("pointwise", "expert") if (root / "graphs" / f"{g}.yaml").is_file()]
    for name in graphs:
        _compile_or_exit(root / "graphs" / f"{name}.yaml")
    base_url, server = _embedded_server(port)
    failed = 0
    try:
        for name in graphs:
            console.rule(f"{name}")
            outcome = _execute(
                graph=root / "graphs" / f"{name}.yaml",
                data=root / "examples" / f"{name}.jsonl",
                out=out / name,
                base_url=base_url,
                limit=limit,
                timeout=EMBEDDED_TIMEOUT,
            )
            failed += outcome.manifest["counts"]["examples_failed"]
            from .report import build_report

            console.print(f"report:  {build_report(outcome.folder)}")
    finally:
        _stop(server)
    if failed:
        raise typer.Exit(2)


def _print_summary(manifest: dict[str, Any], folder: Path) -> None:
    counts = manifest["counts"]
    table = Table(title=f"{manifest['graph']['name']} — {folder}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("examples ok / failed", f"{counts['examples_ok']} / {counts['examples_failed']}"),
        ("resumed (already done)", str(counts["examples_resumed"])),
        ("LLM requests", str(counts["requests"])),
        ("cache hits", str(counts["cache_hits"])),
        ("retries", str(counts["retries"])),
        (
            "tokens (prompt + completion)",
            f"{counts['prompt_tokens']} + {counts['completion_tokens']}",
        ),
        ("wall time", f"{manifest['wall_seconds']:.1f} s"),
        ("model", str(manifest.get("model"))),
    ]
    for name, value in manifest.get("means", {}).items():
        rows.append((f"mean {name}", f"{value:.4g}"))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        f"results: {folder / 'results.jsonl'}\ntraces:  {folder / 'traces.sqlite'} "
        f"(orchestrator trace {folder})"
    )


def _describe_request(rec: dict[str, Any]) -> str:
    """One line on how a call was asked: sampling values, and the schema it had to follow."""
    params = {k: v for k, v in rec["request"].get("params", {}).items() if v is not None}
    sent = " ".join(f"{k}={v}" for k, v in params.items())
    schema = rec.get("schema") or {}
    fields = list(schema.get("properties", {}))
    mode = rec["request"].get("structured")
    enforced = "enforced by the server" if mode == "server" else "given in the prompt"
    return f"{sent}; schema {enforced}, fields in order: {', '.join(fields) or '—'}"


def _abridge(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n  … [{len(text) - limit} chars abridged] …\n{text[-half:]}"


@app.command()
def trace(
    folder: Annotated[Path, typer.Argument(help="Run folder.")],
    example: Annotated[
        str | None, typer.Option(help="Example id (default: first failed, else first).")
    ] = None,
    node: Annotated[str | None, typer.Option(help="Only this node.")] = None,
    format: Annotated[str, typer.Option(help="text | jsonl")] = "text",
    prompt_chars: Annotated[int, typer.Option(help="Prompt length shown in text mode.")] = 600,
) -> None:
    """Print the decision path of one example: nodes, prompts, outputs, attempts, errors."""
    from .runfolder import TRACES, read_results
    from .trace import TraceStore

    path = folder / TRACES
    if not path.is_file():
        _fail(f"{folder} has no {TRACES}; is it a run folder?")
    results = read_results(folder)
    try:
        store = TraceStore.reader(path)
    except RunFolderError as exc:
        _fail(str(exc))
        raise
    try:
        # jsonl is an export: without --example it covers every example.
        if example is None and format != "jsonl":
            if results:
                failed = [r for r in results if r.get("status") == "failed"]
                example = str((failed or results)[0]["id"])
            else:
                example = store.first_example()
                if example is None:
                    _fail(
                        f"no node of {folder} has finished yet (no results, an empty trace); "
                        "try again once the run has made progress."
                    )
        records = list(store.node_runs(example, node))
    finally:
        store.close()
    if format == "jsonl":
        for rec in records:
            sys.stdout.write(orjson.dumps(rec, default=str).decode() + "\n")
        return
    if format != "text":
        _fail("--format must be text or jsonl")
    result = next((r for r in results if str(r.get("id")) == example), None)
    # Ids, errors and node labels come from data and servers: shown as text, never markup.
    console.rule(f"example {escape(example)}")
    if result:
        console.print(
            f"status: [bold]{escape(str(result.get('status')))}[/]"
            + (f" — {escape(str(result.get('error')))}" if result.get("error") else "")
        )
    if not records:
        console.print("no node executions recorded for this example")
    for rec in records:
        label = rec["node"] + (f"[{rec['item']}]" if rec["item"] >= 0 else "")
        flags = ", ".join(
            f
            for f in (
                rec["status"],
                "cached" if rec["cached"] else "",
                f"{rec['latency']:.2f}s" if rec["latency"] else "",
                f"{rec['prompt_tokens']}+{rec['completion_tokens']} tok"
                if rec["prompt_tokens"]
                else "",
            )
            if f
        )
        console.print(f"\n[bold cyan]{escape(label)}[/] ({flags})")
        if rec.get("request"):
            console.print(
                f"  [dim]sent:[/] {_describe_request(rec)}", highlight=False, soft_wrap=True
            )
        for message in rec["messages"] or []:
            console.print(f"  [dim]{message['role']}:[/]")
            body = _abridge(message["content"], prompt_chars).replace("\n", "\n    ")
            console.print("    " + body, markup=False, highlight=False)
        if rec["value"] is not None:
            value = (
                {k: v for k, v in rec["value"].items() if k != "_logprobs"}
                if isinstance(rec["value"], dict)
                else rec["value"]
            )
            console.print(
                "  → " + json.dumps(value, ensure_ascii=False)[:2000], markup=False, highlight=False
            )
        for att in rec["attempts"]:
            if att["kind"] != "ok" or len(rec["attempts"]) > 1:
                console.print(
                    f"  attempt {att['number']}: {att['kind']}"
                    + (f" — {att['error']}" if att["error"] else ""),
                    markup=False,
                    highlight=False,
                )
        if rec["error"]:
            console.print(f"  [red]error:[/] {escape(rec['error'])}")


@app.command()
def serve(
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    model_dir: Annotated[
        Path | None,
        typer.Option(help="HF model folder (default: the converted SmolLM2 in the cache)."),
    ] = None,
) -> None:
    """Prepare and start the embedded vLLM CPU server; Ctrl-C stops it."""
    from . import embedded

    try:
        server = embedded.start_server(
            port=port or embedded.DEFAULT_PORT, model_dir=model_dir, log=console.print
        )
    except embedded.EmbeddedServerError as exc:
        _fail(str(exc))
        return
    console.print(
        f"[green]Serving[/] {server.model} at {server.base_url} — Ctrl-C to stop.\n"
        f"Log: {server.log_path}"
    )
    try:
        server.wait()
    except KeyboardInterrupt:
        console.print("Stopping…")
    finally:
        server.stop()


@app.command()
def report(
    folder: Annotated[Path, typer.Argument(help="Run folder.")],
    full_prompts: Annotated[bool, typer.Option(help="Embed prompts unabridged.")] = False,
    serve: Annotated[bool, typer.Option(help="Serve on localhost instead of one file.")] = False,
    port: Annotated[int, typer.Option(help="Port for --serve.")] = 8770,
) -> None:
    """Write RUN_DIR/report.html, a self-contained page to audit every decision of a run."""
    from .report import build_report, serve_report

    if not (folder / "results.jsonl").is_file():
        _fail(f"{folder} has no results.jsonl; is it a run folder?")
    if serve:
        serve_report(folder, port=port, full_prompts=full_prompts)
        return
    path = build_report(folder, full_prompts=full_prompts)
    console.print(f"Report written to {path} — open it in a browser.")


@app.command()
def distill(
    folder: Annotated[Path, typer.Argument(help="Run folder of a jury graph (perq_jury).")],
    out: Annotated[Path, typer.Option(help="Folder to save the scorer in.")],
    text_field: Annotated[str, typer.Option(help="Result field with the text.")] = "text",
    label_field: Annotated[str, typer.Option(help="Result field with the label.")] = "label",
    embedding_model: Annotated[
        Path | None, typer.Option(help="Local sentence-embedding model folder.")
    ] = None,
    test_size: Annotated[float, typer.Option(help="Held-out share.")] = 0.25,
    seed: Annotated[int, typer.Option(help="Split and classifier seed.")] = 0,
) -> None:
    """Train a small scorer on a jury's labels; print held-out accuracy, macro-F1, Spearman."""
    from .distill import distill as train
    from .distill import format_card

    try:
        card = train(
            folder,
            out,
            text_field=text_field,
            label_field=label_field,
            embedding_model=embedding_model,
            test_size=test_size,
            seed=seed,
        )
    except (ValueError, FileNotFoundError, ImportError) as exc:
        _fail(str(exc))
        return
    console.print(format_card(card))


@app.command("meta-eval")
def meta_eval(
    folder: Annotated[Path, typer.Argument(help="Run folder.")],
    labels: Annotated[Path, typer.Option(help="Human labels (JSONL keyed by example id).")],
    field: Annotated[
        str | None,
        typer.Option(help="Result field to compare (default: score, or the run's choices)."),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(help="Another result field scored the same way, e.g. profile_mean."),
    ] = None,
) -> None:
    """Agreement of a run with human labels (correlations or accuracy) → meta_eval.json."""
    from .metaeval import LabelError, format_table
    from .metaeval import meta_eval as evaluate

    try:
        result = evaluate(folder, labels, field=field, baseline=baseline)
    except (LabelError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    console.print(format_table(result))
    console.print(f"written to {folder / 'meta_eval.json'}")


@app.command("cache")
def cache_cmd(
    clear: Annotated[bool, typer.Option(help="Delete every cached reply.")] = False,
    path: Annotated[Path | None, typer.Option(help="Cache file.")] = None,
) -> None:
    """Show (or clear) the response cache."""
    from .cache import ResponseCache, default_cache_path

    store = ResponseCache(path or default_cache_path())
    if clear:
        console.print(f"Deleted {store.clear()} cached replies from {store.path}")
    else:
        console.print(f"{store.path}: {len(store)} cached replies")
    store.close()


class _ConsoleHandler(logging.Handler):
    """The library's messages (logger `orchestrator`) on the CLI's console, as plain text:
    warnings marked, information as it is."""

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if record.levelno >= logging.WARNING:
            console.print(f"[bold yellow]warning:[/] {escape(text)}", soft_wrap=True)
        else:
            console.print(text, markup=False, highlight=False, soft_wrap=True)


def _log_to_console() -> None:
    logger = logging.getLogger("orchestrator")
    if not any(isinstance(h, _ConsoleHandler) for h in logger.handlers):
        logger.addHandler(_ConsoleHandler())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main() -> None:
    _log_to_console()
    app()
