"""Verbs that check or run graphs: validate, run, demo."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Unpack

import typer
from rich.markup import escape
from rich.table import Table

from ..engine import SETTINGS, RunArgs, sharded
from ..errors import (
    GraphError,
    OrchestratorError,
    RunFolderError,
    RunKeyMismatch,
    ServerExited,
    StorageError,
)
from ..servers import ServerGone
from ..store import plural

if TYPE_CHECKING:
    from ..analysis import Grouping
    from ..api import RunResult
    from ..graph import CompiledGraph
    from ..local import EmbeddedServer
    from ..providers import Provider
    from ..store import Manifest


from .app import EMBEDDED_TIMEOUT, app, console, err, fail
from .settings import given_settings, takes_settings

logger = logging.getLogger(__name__)


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            fail(f"--param takes key=value, got '{item}'")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def _graph_path(graph: Path) -> Path:
    """A graph file as given, or a shipped protocol by name (`expert`, `aupel`, …)."""
    if graph.exists():
        return graph
    from ..shipped import shipped_graph

    found = shipped_graph(str(graph)) if graph.suffix == "" and len(graph.parts) == 1 else None
    return found or graph


def _data_path(data: Path) -> Path:
    """A dataset file as given, or a shipped example by name (`expert.jsonl`, `expert`).

    A file that exists always wins; a bare name that is neither a file here nor a shipped
    example is refused with the list of shipped ones, so a newcomer learns where they are.
    """
    from ..shipped import shipped_data, shipped_example_files

    bare = len(data.parts) == 1
    shipped = shipped_data(str(data)) if bare else None
    if data.exists():
        if shipped is not None:
            logger.info("--data %s: using the file here, not the shipped example %s", data, shipped)
        return data
    if shipped is not None:
        logger.info("--data %s: no such file here; using the shipped example %s", data, shipped)
        return shipped
    if not bare:
        return data  # a path: the loader names what is missing
    names = ", ".join(p.name for p in shipped_example_files()) or "(none installed)"
    fail(
        f"--data {data}: no such file, and no shipped example of that name. Shipped examples"
        f" (`orchestrator examples` prints their paths): {names}"
    )


GRAPH_HELP = "Graph file (YAML), or the name of a shipped protocol (e.g. expert)."
PROMPTS_HELP = "Templates folder to use instead of the graph's `prompts:` (yours, so anywhere)."
Trust = Annotated[bool, typer.Option(SETTINGS["trust"].flag, help=SETTINGS["trust"].help)]
Prompts = Annotated[Path | None, typer.Option("--prompts", metavar="DIR", help=PROMPTS_HELP)]


@app.command()
def validate(
    graphs: Annotated[list[Path], typer.Argument(help=f"{GRAPH_HELP} Several may be given.")],
    trust: Trust = False,
    prompts: Prompts = None,
) -> None:
    """Check graph files without sending a request; exit 1 listing every problem of each."""
    from ..kinds import compile_graph

    broken = 0
    for graph in graphs:
        try:
            compiled = compile_graph(_graph_path(graph), prompts_dir=prompts, trust=trust)
        except GraphError as exc:
            broken += 1
            for problem in exc.problems:
                err.print(f"[red]✗[/] {escape(str(problem))}", soft_wrap=True)
            said = plural(len(exc.problems), "problem")
            err.print(f"{said} in {escape(str(graph))}", soft_wrap=True)
            continue
        llm = sum(n.is_llm for n in compiled.nodes.values())
        console.print(
            f"[green]✓[/] {graph}: graph '{compiled.name}' is valid — "
            f"{plural(len(compiled.nodes), 'node')} ({llm} LLM), order: "
            f"{' → '.join(compiled.order)}; hash {compiled.content_hash}"
        )
    if broken:
        if len(graphs) > 1:
            verb = "has" if broken == 1 else "have"
            err.print(f"{broken} of {len(graphs)} graphs {verb} problems", soft_wrap=True)
        raise typer.Exit(1)


@app.command()
@takes_settings(after="out")
def run(
    graph: Annotated[Path, typer.Argument(help=GRAPH_HELP)],
    data: Annotated[
        Path,
        typer.Option(
            "--data",
            "-d",
            help="Dataset (.jsonl or .csv), or the name of a shipped example (e.g. "
            "expert.jsonl; `orchestrator examples` lists them).",
        ),
    ],
    out: Annotated[Path | None, typer.Option(help="Run folder (default runs/<graph>).")] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the cache.")
    ] = False,
    param: Annotated[
        list[str] | None, typer.Option(SETTINGS["params"].flag, help=SETTINGS["params"].help)
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port of the embedded server.")] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Run on Ray actors: `local` (the instance Ray finds or starts here), `auto` "
            "(this node's cluster) or a cluster address. Needs orchestrator[scale].",
        ),
    ] = None,
    prompts: Prompts = None,
    **settings: Any,
) -> None:
    """Run a graph over a dataset into a run folder; re-running the same command resumes."""
    from ..scale import run_options
    from ..session import UNUSED_BASE_URL

    # Every option is checked before any server is started.
    given = given_settings(settings)
    given.update(run_options(None, ray))
    graph = _graph_path(graph)
    data = _data_path(data)
    compiled = _compile_or_exit(graph, trust=given.get("trust", False), prompts=prompts)
    server = None
    embedded_default = "base_url" not in given
    urls = given.get("base_url")
    if urls is None and any(n.uses_server for n in compiled.nodes.values()):
        # Workers reach the server from their own processes: it must be up before them.
        spread = sharded(given.get("workers"), given.get("executor", "local"))
        urls, server = own_server(port, on_first_use=not spread)
    transport = start_on_first_use(given.get("provider"), server)
    if transport is not None:
        given["transport"] = transport
        given.pop("provider", None)
    given["base_url"] = urls or UNUSED_BASE_URL
    timeout = given.pop("timeout", None) or (EMBEDDED_TIMEOUT if embedded_default else None)
    if timeout:
        given["timeout"] = timeout
    given["cache"] = False if no_cache else given.get("cache", True)
    given["params"] = _parse_params(param or [])
    try:
        outcome = _execute(graph=compiled, data=data, out=out or Path("runs") / graph.stem, **given)
    finally:
        stop_server(server)
    raise typer.Exit(_exit_code(outcome))


EXIT_EXAMPLES_FAILED = 2
EXIT_AGGREGATES_FAILED = 4


def _exit_code(result: RunResult) -> int:
    """0 all done; 2 some examples failed; 4 every example ok but an aggregate failed."""
    aggregates_failed = _print_aggregate_errors(result.summary.aggregates)
    if result.manifest.counts.examples_failed:
        return EXIT_EXAMPLES_FAILED
    return EXIT_AGGREGATES_FAILED if aggregates_failed else 0


def _print_aggregate_errors(summary: dict[str, Any]) -> bool:
    from ..session import aggregate_errors

    errors = aggregate_errors(summary)
    for name, message in errors.items():
        err.print(
            f"[bold red]aggregate {escape(name)} failed:[/] {escape(message)}", soft_wrap=True
        )
    if errors:
        err.print(
            "The examples' results are kept. Fix the graph's aggregates, then recompute them "
            "without a request: orchestrator summarize RUN_DIR --graph GRAPH",
            soft_wrap=True,
        )
    return bool(errors)


def _compile_or_exit(
    graph: Path, *, trust: bool = False, prompts: Path | None = None
) -> CompiledGraph:
    from ..kinds import compile_graph

    try:
        return compile_graph(graph, prompts_dir=prompts, trust=trust)
    except GraphError as exc:
        for problem in exc.problems:
            err.print(f"[red]✗[/] {escape(str(problem))}", soft_wrap=True)
        raise typer.Exit(1) from None


class OwnServer:
    """The embedded server this command starts for its own use and stops when done: at
    once, or (`deferred`) on the first request not answered from the cache. Its messages go
    to stderr, so a command's `--format json` keeps stdout for the JSON."""

    def __init__(self, port: int, *, on_first_use: bool) -> None:
        from .. import local as embedded
        from ..servers import DeferredServer

        self.port = port
        self.base_url = embedded.server_url(port)
        self.server: EmbeddedServer | None = None
        self.deferred = (
            DeferredServer(self.base_url, embedded.served_models(), self.start, exited=self.exited)
            if on_first_use
            else None
        )

    def start(self) -> None:
        """Start the server (minutes on a CPU: its phases are printed as they pass)."""
        from .. import local as embedded

        # Said here, not when the command begins: a run answered from the cache, or one
        # that only resumes finished work, starts nothing and should not say it will.
        err.print(
            "No --base-url given and no embedded server running: starting the embedded vLLM "
            f"CPU server on port {self.port} (stopped when this command ends)."
        )
        cancel = self.deferred.abandoned if self.deferred is not None else None
        self.server = embedded.start_server(port=self.port, log=err.print, cancel=cancel)

    def exited(self) -> str | None:
        """Why the server is gone, once its process has exited (a run stops on it at once)."""
        return self.server.exit_report() if self.server is not None else None

    def stop(self) -> None:
        if self.server is not None:
            err.print("Stopping the embedded server.")
            self.server.stop()
            self.server = None


def own_server(port: int | None, *, on_first_use: bool) -> tuple[str, OwnServer | None]:
    """The running embedded server's URL, or one this command starts for itself: on the
    first request that is not in the cache (`on_first_use`), else now."""
    from .. import local as embedded

    embedded_port = port or embedded.DEFAULT_PORT
    base_url = embedded.find_running(embedded_port)
    if base_url:
        err.print(f"Using the embedded vLLM server already running at {base_url}.")
        return base_url, None
    # A kill (SIGTERM) must still stop the server we start, like Ctrl-C does.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        try:
            embedded.check_port_free(embedded_port)
        except embedded.PortTaken as exc:
            if port is not None:
                raise
            # The default port is someone else's; this command's own server can be anywhere.
            embedded_port = embedded.free_port()
            err.print(f"{exc}\nUsing port {embedded_port} instead.")
        own = OwnServer(embedded_port, on_first_use=on_first_use)
        if not on_first_use:
            own.start()
    except embedded.EmbeddedServerError as exc:
        fail(str(exc))
        raise
    return own.base_url, own


def start_on_first_use(provider: str | None, server: OwnServer | None) -> Provider | None:
    """The run's provider (`--provider`, default openai) that starts this command's own
    server on the first request it has to send there; None when there is no such server."""
    if server is None or server.deferred is None:
        return None
    from ..providers import DEFAULT_PROVIDER, make_provider
    from ..servers import StartOnFirstUse

    return StartOnFirstUse(make_provider(provider or DEFAULT_PROVIDER), [server.deferred])


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_server(server: OwnServer | None) -> None:
    if server is not None:
        server.stop()


def _execute(
    graph: CompiledGraph,
    data: Path,
    out: Path,
    *,
    use_cache: bool = True,
    restart_if_changed: bool = False,
    **settings: Unpack[RunArgs],
) -> RunResult:
    """`orchestrator.arun` with its errors turned into messages and exit codes, a progress
    bar on a terminal, and the summary table at the end; the shared response cache unless
    `settings` name another or `use_cache` is False."""
    import sys

    from ..api import arun

    # A kill (SIGTERM) unwinds like Ctrl-C: queued results and traces are written out and
    # the manifest says "interrupted".
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)

    settings["cache"] = settings.get("cache", True) if use_cache else False

    def attempt(**overrides: Any) -> RunResult:
        return asyncio.run(
            arun(
                graph,
                data,
                out=out,
                progress=sys.stderr.isatty(),
                **{**settings, **overrides},
            )
        )

    try:
        try:
            result = attempt()
        except RunKeyMismatch as exc:
            if not restart_if_changed:
                raise
            # The demo's own folder, left by an older release or graph: not a user's run.
            console.print(
                f"{out} holds an earlier demo run ({'; '.join(exc.changes)}); starting it afresh."
            )
            result = attempt(overwrite=True)
    except ServerExited as exc:
        fail(
            f"stopped: {exc}\nFinished examples are saved in {out}; re-run the same command "
            "to resume (it starts a new server).",
            code=3,
        )
        raise
    except ServerGone as exc:
        fail(
            f"stopped: {exc}. Finished examples are saved in {out}; re-run the same "
            "command to resume once the server is back.",
            code=3,
        )
        raise
    except StorageError as exc:  # the disk failed a file of the run folder (store/disk.py)
        fail(
            f"{exc.problem}; finished work up to the last write is in {out}. Fix the cause "
            "(e.g. free disk space), then re-run the same command to resume."
        )
        raise
    except OrchestratorError as exc:  # graph, data, run folder, server, settings
        fail(str(exc))
        raise
    except KeyboardInterrupt:
        err.print(
            f"Interrupted. Finished examples are saved; re-run the same command to resume ({out})."
        )
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    _print_summary(result.manifest, out)
    if result.manifest.counts.examples_failed:
        _print_failures(out)
    return result


SHOWN_REASONS = 10  # a run failing in many different ways shows the commonest


def _print_failures(folder: Path) -> None:
    """The reasons examples failed, grouped by message, each with a count and one id."""
    from ..session import failure_groups
    from ..store import ResultLine, iter_results

    groups = failure_groups(ResultLine.model_validate(line) for line in iter_results(folder))
    if not groups:
        return
    err.print(f"[bold red]failed examples[/] ({sum(g.count for g in groups)}), by reason:")
    for group in groups[:SHOWN_REASONS]:
        err.print(
            f"  {group.count} × {escape(group.message)}  (e.g. {escape(group.example)})",
            soft_wrap=True,
        )
    if len(groups) > SHOWN_REASONS:
        rest = sum(g.count for g in groups[SHOWN_REASONS:])
        err.print(f"  … and {len(groups) - SHOWN_REASONS} other reasons ({rest} examples)")
    err.print(
        f"see every decision of one: orchestrator trace {escape(str(folder))} "
        f"--example {escape(groups[0].example)}",
        soft_wrap=True,
    )


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Parent folder of the demo's run folders.")] = Path(
        "runs/demo"
    ),
    port: Annotated[int | None, typer.Option(help="Port of the embedded server.")] = None,
    limit: Annotated[int | None, typer.Option(help="Rows per graph.")] = None,
) -> None:
    """The shipped pointwise and ExPerT judges on their examples, on the embedded server."""
    from ..shipped import shipped_examples, shipped_graph

    found = {
        name: (shipped_graph(name), shipped_examples(name)) for name in ("pointwise", "expert")
    }
    shipped = {name: (g, d) for name, (g, d) in found.items() if g is not None and d is not None}
    if len(shipped) < len(found):
        missing = ", ".join(sorted(set(found) - set(shipped)))
        fail(
            f"the shipped {missing} graph(s) or their examples are not installed; reinstall "
            "orchestrator, or run from a source checkout"
        )
    compiled = {name: _compile_or_exit(graph_path) for name, (graph_path, _) in shipped.items()}
    base_url, server = own_server(port, on_first_use=True)
    transport = start_on_first_use(None, server)  # one server for both graphs, if any asks
    failed = 0
    try:
        for name, (_, data_path) in shipped.items():
            console.rule(f"{name}")
            outcome = _execute(
                graph=compiled[name],
                data=data_path,
                out=out / name,
                base_url=base_url,
                transport=transport,
                limit=limit,
                timeout=EMBEDDED_TIMEOUT,
                restart_if_changed=True,
            )
            failed += outcome.manifest.counts.examples_failed
            from ..report import build_report

            console.print(f"report:  {build_report(out / name)}")
    finally:
        stop_server(server)
    if failed:
        raise typer.Exit(2)


def _print_summary(manifest: Manifest, folder: Path) -> None:
    from ..store import duration_text

    counts = manifest.counts
    table = Table(title=f"{manifest.graph.name} — {folder}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("examples ok / failed", f"{counts.examples_ok} / {counts.examples_failed}"),
        *(
            [("abstained (not in means or aggregates)", str(counts.examples_abstained))]
            if counts.examples_abstained
            else []
        ),
        ("resumed (already done)", str(counts.examples_resumed)),
        *(
            [("parts (first run + resumes)", str(len(manifest.parts)))]
            if len(manifest.parts) > 1
            else []
        ),
        ("LLM requests", manifest.count_text("requests")),
        ("cache hits", manifest.count_text("cache_hits")),
        ("shared in flight", manifest.count_text("shared")),
        ("retries", manifest.count_text("retries")),
        ("prompt tokens", manifest.count_text("prompt_tokens")),
        ("completion tokens", manifest.count_text("completion_tokens")),
        ("wall time", duration_text(manifest.wall_seconds or 0.0)),
        ("model", str(manifest.model)),
    ]
    for name, value in manifest.means.items():
        rows.append((f"mean {name}", f"{value:.4g}"))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        f"results: {folder / 'results.jsonl'}\ntraces:  {folder / 'traces.sqlite'} "
        f"(orchestrator trace {folder})"
    )


@app.command()
def summarize(
    run_dir: Annotated[Path, typer.Argument(help="A finished run folder.")],
    graph: Annotated[
        Path | None,
        typer.Option(help="The run's graph with its aggregates fixed (default: its snapshot)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the summary to this file, not RUN_DIR/summary.json."),
    ] = None,
    trust: Trust = False,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Also print the results per value of this row field (an output or a kept "
            "input, e.g. language): n, mean and CI per group.",
        ),
    ] = None,
    format: Annotated[
        str, typer.Option(help="table | json (the summary, and the groups of --by)")
    ] = "table",
) -> None:
    """Recompute a run's aggregates (summary.json) from its results, with no LLM request."""
    from ..session import SUMMARY_FIELDS, summarize
    from ..store import ABSTAIN_NOTE

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    if graph is not None:
        _compile_or_exit(graph, trust=trust)  # every problem listed, as `validate` does
    try:
        summary = summarize(run_dir, graph, out, trust=trust)
    except GraphError as exc:  # the snapshot's: one line per problem, as `validate` prints
        for problem in exc.problems:
            err.print(f"[red]✗[/] {escape(str(problem))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except RunFolderError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"could not write the summary: {exc}")
    if format == "json":
        groups = None if by is None else _groups(run_dir, by).model_dump(mode="json")
        typer.echo(json.dumps({"summary": summary, "by": groups}, indent=2, default=str))
        if _print_aggregate_errors(summary):
            raise typer.Exit(EXIT_AGGREGATES_FAILED)
        return
    names = [name for name in summary if name not in SUMMARY_FIELDS]
    where = f"written to {out}" if out else f"rewritten in {run_dir}"
    console.print(f"summary.json {where}: aggregates {', '.join(names) or 'none'}", markup=False)
    if summary.get(ABSTAIN_NOTE) is False:
        abstained = (summary.get("counts") or {}).get("examples_abstained", 0)
        console.print(
            f"abstained: {abstained} examples, left out of the means and aggregates", markup=False
        )
    if by is not None:
        _print_groups(run_dir, by)
    if _print_aggregate_errors(summary):
        raise typer.Exit(EXIT_AGGREGATES_FAILED)


def _groups(run_dir: Path, by: str) -> Grouping:
    """The run's numeric outputs per value of `by`, or a usage error naming the problem."""
    from ..analysis import summarize_groups

    try:
        return summarize_groups(run_dir, by)
    except OrchestratorError as exc:
        fail(str(exc))


def _print_groups(run_dir: Path, by: str) -> None:
    """The run's numeric outputs per value of `by`: one row per group and output."""
    from ..analysis import estimate_cells

    grouping = _groups(run_dir, by)
    level = f"{grouping.level:.0%} CI"
    table = Table(title=f"results by {escape(by)} ({grouping.source})", title_justify="left")
    for position, column in enumerate((escape(by), "output", "n", "mean", level)):
        table.add_column(column, justify="left" if position < 2 else "right")
    for group in grouping.groups:
        for found in group.estimates:
            table.add_row(escape(group.key), escape(found.output), *estimate_cells(found))
    console.print(table)
    if grouping.ungrouped:
        console.print(f"{grouping.ungrouped} ok examples have no value of {by}", markup=False)
