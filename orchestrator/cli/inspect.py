"""Verbs that read a run folder or manage local state: trace, status, report, meta-eval,
distill, serve, cache."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ..errors import OrchestratorError, RunFolderError
from .app import WideConsole, app, console, fail

if TYPE_CHECKING:
    from ..store import InFlight, Manifest, NodeRun, NodeServer

# `trace` is an audit view: data, prompts and replies are shown as the bytes that were
# sent. Rich would turn `:thumbs_up:` into an emoji and colour numbers and paths; markup
# stays on for our own labels, data is escaped where it meets markup.
literal = WideConsole(emoji=False, highlight=False)


def _describe_request(rec: NodeRun) -> str:
    """One line on how a call was asked: sampling values, and the schema it had to follow."""
    request = rec.request or {}
    params = {k: v for k, v in request.get("params", {}).items() if v is not None}
    sent = " ".join(f"{k}={v}" for k, v in params.items())
    schema = rec.schema or {}
    fields = list(schema.get("properties", {}))
    mode = request.get("structured")
    enforced = "enforced by the server" if mode == "server" else "given in the prompt"
    # min_samples is not sent: it is how many of the n samples the call needed valid.
    least = f"; min_samples={request['min_samples']}" if "min_samples" in request else ""
    return f"{sent}{least}; schema {enforced}, fields in order: {', '.join(fields) or '—'}"


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
    from ..store import TRACES, RunReader

    run = RunReader(folder)
    if not run.has_trace:
        fail(f"{folder} has no {TRACES}; is it a run folder?")
    try:
        results = list(run.results())
        manifest = run.manifest  # a missing one reads as empty
        store = run.trace()
    except RunFolderError as exc:
        fail(str(exc))
        raise
    served: list[NodeServer] = []
    chosen = ""  # why this example, when the user named none
    try:
        if format == "text":
            served = store.node_servers()
        # jsonl is an export: without --example it covers every example.
        if example is None and format != "jsonl":
            if results:
                failed = [r for r in results if r.status == "failed"]
                example = (failed or results)[0].id
                which = f"the first of {len(failed)} failed" if failed else "the first"
                chosen = (
                    f"showing {which} of {len(results)} examples; pass --example ID for another"
                )
            else:
                example = store.first_example()
                if example is None:
                    fail(
                        f"no node of {folder} has finished yet (no results, an empty trace); "
                        "try again once the run has made progress."
                    )
        records = list(store.node_runs(example, node))
        if example is not None and not records and all(r.id != example for r in results):
            known = len(results)
            fail(
                f"no example {example!r} in {folder}"
                + (f" (it has {known}, e.g. {results[0].id!r})" if known else "")
            )
    except RunFolderError as exc:
        fail(str(exc))
        raise
    finally:
        store.close()
    if format == "jsonl":
        for rec in records:
            sys.stdout.write(rec.model_dump_json() + "\n")
        return
    if format != "text":
        fail("--format must be text or jsonl")
    result = next((r for r in results if r.id == example), None)
    assert example is not None  # chosen above, or the command has already failed
    # Ids, errors and node labels come from data and servers: shown as text, never markup.
    _print_served(served, manifest)
    literal.rule(f"example {escape(example)}")
    if chosen:
        literal.print(escape(chosen))
    if result:
        literal.print(
            f"status: [bold]{escape(result.status)}[/]"
            + (f" — {escape(result.error)}" if result.error else "")
        )
    if not records:
        literal.print("no node executions recorded for this example")
    for rec in records:
        _print_record(rec, prompt_chars)


def _print_served(served: list[NodeServer], manifest: Manifest) -> None:
    """Which model and server each LLM node used in this run (a jury's judges differ)."""
    if not served:
        return
    literal.print("models and servers by node:")
    for entry in served:
        literal.print(f"  {escape(entry.node)}: {escape(entry.describe(manifest))}")


SHOWN_STATUS_ROWS = 20  # a status lists the oldest examples in progress and latest timeouts


@dataclass
class InProgress:
    """An example with finished node runs in the trace and no result line yet."""

    example: str
    nodes: int  # node runs finished so far
    since: float  # when its first node run started (epoch seconds)


@dataclass
class TimedOut:
    """An attempt that got no complete reply within the run's --timeout."""

    example: str
    node: str
    attempt: int
    error: str
    in_flight: bool = False  # its node run had not finished at the trace's last flush


@dataclass
class RunStatus:
    """What a run folder says now: the manifest's status, examples finished, examples in
    progress and attempts that timed out (all from the manifest, results and trace)."""

    status: str
    started: float | None
    finished: int
    failed: int
    in_progress: list[InProgress] = field(default_factory=list)
    timed_out: list[TimedOut] = field(default_factory=list)
    # Node runs started and not finished at the last flush; `live` says whether the run
    # that wrote them is still going (else they were cut off: a kill, a crash).
    in_flight: list[InFlight] = field(default_factory=list)
    live: bool = False


def read_status(folder: Path) -> RunStatus:
    """The run's status from its files; reads what a running run has flushed (every 0.5 s):
    its finished node runs, and those in flight with the try each is on."""
    from ..store import RunReader, holder_alive, timed_out

    run = RunReader(folder)
    results = {r.id: r for r in run.results()}
    manifest = run.manifest
    status = RunStatus(
        status=manifest.status,
        started=manifest.started,
        finished=len(results),
        failed=sum(r.status == "failed" for r in results.values()),
    )
    if not run.has_trace:
        return status
    # The lock's holder says whether the writer lives; on another host it cannot be asked,
    # and the manifest's word is taken.
    status.live = manifest.status == "running" and holder_alive(folder) is not False
    open_examples: dict[str, InProgress] = {}
    for rec in run.node_runs():
        for attempt in rec.attempts:
            if timed_out(attempt):
                status.timed_out.append(
                    TimedOut(rec.example_id, rec.node, attempt.number, attempt.error or "")
                )
        if rec.example_id in results:
            continue
        seen = open_examples.setdefault(rec.example_id, InProgress(rec.example_id, 0, rec.started))
        seen.nodes += 1
        seen.since = min(seen.since, rec.started)
    status.in_progress = sorted(open_examples.values(), key=lambda e: e.since)
    status.in_flight = run.in_flight()
    for flight in status.in_flight:
        status.timed_out.extend(
            TimedOut(flight.example_id, flight.node, a.number, a.error or "", in_flight=True)
            for a in flight.failed
            if timed_out(a)
        )
    return status


def _describe_flight(flight: InFlight, now: float) -> str:
    """One node run in flight: example, node (and item), the try it is on, where, since when."""
    label = flight.node + (f"[{flight.item}]" if flight.item >= 0 else "")
    if flight.attempt and flight.attempt_started is not None:
        where = flight.replica or flight.server or "?"
        doing = (
            f"attempt {flight.attempt} at {where}, sent {now - flight.attempt_started:.0f} s ago"
        )
    elif flight.server is not None:
        # Held by the server's in-flight limit, or sharing an identical request's reply.
        doing = f"not sent yet (waiting for a slot on {flight.server})"
    else:
        doing = "running"  # a node of no server of its own (compute)
    failed = f", {len(flight.failed)} failed tries" if flight.failed else ""
    return (
        f"{flight.example_id} · {label} · {doing}{failed}; "
        f"node run started {now - flight.started:.0f} s ago"
    )


@app.command()
def status(folder: Annotated[Path, typer.Argument(help="Run folder.")]) -> None:
    """What a run is doing now (or where it stopped): examples finished, node runs in flight
    (example, node, attempt, server, for how long), examples in progress and attempts that
    timed out."""
    from ..store import MANIFEST

    if not (folder / MANIFEST).is_file():
        fail(f"{folder} has no {MANIFEST}; is it a run folder?")
    try:
        now, found = time.time(), read_status(folder)
    except RunFolderError as exc:
        fail(str(exc))
        raise
    running = f", started {now - found.started:.0f} s ago" if found.started else ""
    literal.print(f"run {escape(str(folder))}: {escape(found.status)}{running}")
    literal.print(f"examples finished: {found.finished} ({found.failed} failed)")
    # A run that is not live has nothing in flight: what its trace last listed was cut off.
    heading = "node runs in flight now" if found.live else "node runs unfinished (run not live)"
    literal.print(f"{heading}: {len(found.in_flight)}")
    for flight in found.in_flight[:SHOWN_STATUS_ROWS]:
        literal.print(f"  {escape(_describe_flight(flight, now))}", soft_wrap=True)
    literal.print(
        f"examples in progress (a node finished, the example not): {len(found.in_progress)}"
    )
    for item in found.in_progress[:SHOWN_STATUS_ROWS]:
        literal.print(
            f"  {escape(item.example)}: {item.nodes} node runs done, for {now - item.since:.0f} s",
            soft_wrap=True,
        )
    literal.print(f"attempts timed out: {len(found.timed_out)}")
    for late in found.timed_out[-SHOWN_STATUS_ROWS:]:
        still = " (its node run in flight)" if late.in_flight and found.live else ""
        literal.print(
            f"  {escape(late.example)} · {escape(late.node)} · attempt {late.attempt}: "
            f"{escape(late.error)}{still}",
            soft_wrap=True,
        )


def _print_record(rec: NodeRun, prompt_chars: int) -> None:
    """One node execution: flags, how it was asked, the prompt, its value and attempts."""
    label = rec.node + (f"[{rec.item}]" if rec.item >= 0 else "")
    tally = rec.tally()
    flags = ", ".join(
        f
        for f in (
            rec.status,
            "cached" if rec.cached else "",
            f"{rec.latency:.2f}s" if rec.latency else "",
            f"{rec.prompt_tokens}+{rec.completion_tokens} tok" if rec.prompt_tokens else "",
            str(tally) if tally else "",
        )
        if f
    )
    literal.print(f"\n[bold cyan]{escape(label)}[/] ({flags})")
    if rec.request:
        literal.print(f"  [dim]sent:[/] {_describe_request(rec)}", highlight=False, soft_wrap=True)
    for message in rec.messages or []:
        literal.print(f"  [dim]{escape(str(message['role']))}:[/]")
        body = _abridge(message["content"], prompt_chars).replace("\n", "\n    ")
        literal.print("    " + body, markup=False, soft_wrap=True)
    if rec.value is not None:
        value = (
            {k: v for k, v in rec.value.items() if k != "_logprobs"}
            if isinstance(rec.value, dict)
            else rec.value
        )
        literal.print(
            "  → " + json.dumps(value, ensure_ascii=False)[:2000], markup=False, soft_wrap=True
        )
    # All samples valid at the first reply: the tally says it all. Otherwise every try.
    if any(att.kind not in ("ok", "cache") for att in rec.attempts):
        for att in rec.attempts:
            sample = "" if att.sample is None else f" (sample {att.sample})"
            where = "" if att.replica is None else f" at {att.replica}"
            literal.print(
                f"  attempt {att.number}{sample}: {att.kind}{where}"
                + (f" — {att.error}" if att.error else ""),
                markup=False,
                highlight=False,
            )
    if rec.error:
        literal.print(f"  [red]error:[/] {escape(rec.error)}")


@app.command()
def serve(
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    model_dir: Annotated[
        Path | None,
        typer.Option(help="HF model folder (default: the converted SmolLM2 in the cache)."),
    ] = None,
) -> None:
    """Prepare and start the embedded vLLM CPU server; Ctrl-C stops it."""
    from .. import local as embedded

    try:
        # Shared: `run`, `demo` and the API use it (embedded.find_running); it is never
        # taken for another program answering on the port (start_server checks who listens).
        server = embedded.start_server(
            port=port or embedded.DEFAULT_PORT,
            model_dir=model_dir,
            log=console.print,
            shared=True,
        )
    except embedded.EmbeddedServerError as exc:
        fail(str(exc))
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
    out: Annotated[
        Path | None,
        typer.Option(
            help="The page's file (default RUN_DIR/report.html), e.g. to report a "
            "read-only run folder."
        ),
    ] = None,
) -> None:
    """Write RUN_DIR/report.html, a self-contained page to audit every decision of a run."""
    from ..report import build_report, make_server, serve_until_interrupted, serving_line
    from ..store import RunReader

    if not RunReader(folder).has_results:
        fail(f"{folder} has no results.jsonl; is it a run folder?")
    try:
        if serve:
            server = make_server(folder, port=port, full_prompts=full_prompts)
            # On stdout, as the command's answer: where the report is.
            console.print(
                serving_line(folder, server), markup=False, highlight=False, soft_wrap=True
            )
            serve_until_interrupted(server)
            return
        path = build_report(folder, full_prompts=full_prompts, out=out)
    except OrchestratorError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"could not write the report: {exc}")
    console.print(f"Report written to {path} — open it in a browser.", markup=False)


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
    from ..analysis import distill as train
    from ..analysis import format_card

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
    except (ValueError, FileNotFoundError, ImportError, OrchestratorError) as exc:
        fail(str(exc))  # OrchestratorError: the run folder is damaged, or its disk failed
        return
    console.print(format_card(card))
    console.print(f"saved to {out}", markup=False, highlight=False, soft_wrap=True)


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
    level: Annotated[
        str | None,
        typer.Option(help="Krippendorff level for score labels (default interval)."),
    ] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples per interval.")] = 2000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    cluster: Annotated[
        str | None,
        typer.Option(help="Row field examples are nested in (e.g. user): resample its clusters."),
    ] = None,
) -> None:
    """Agreement of a run with human labels, with bootstrap intervals → meta_eval.json."""
    from ..analysis import meta_eval as evaluate
    from ..analysis import meta_eval_table
    from ..ui import rich_table

    try:
        result = evaluate(
            folder,
            labels,
            field=field,
            baseline=baseline,
            level=level,
            resamples=resamples,
            seed=seed,
            cluster=cluster,
        )
    except (ValueError, FileNotFoundError, OrchestratorError) as exc:
        fail(str(exc))  # OrchestratorError: the run folder is damaged, or its disk failed
        return
    console.print(rich_table(meta_eval_table(result)))
    console.print(f"written to {folder / 'meta_eval.json'}")


@app.command("cache")
def cache_cmd(
    clear: Annotated[bool, typer.Option(help="Delete every cached reply.")] = False,
    path: Annotated[Path | None, typer.Option(help="Cache file.")] = None,
) -> None:
    """Show (or clear) the response cache."""
    from ..store import ResponseCache, default_cache_path

    target = path or default_cache_path()
    try:
        store = ResponseCache(target)
        try:
            if clear:
                console.print(f"Deleted {store.clear()} cached replies from {store.path}")
            else:
                console.print(f"{store.path}: {len(store)} cached replies")
        finally:
            store.close()
    except (sqlite3.Error, OSError) as exc:
        # Garbage fails on open; damaged pages open fine and fail when counted or cleared.
        fail(f"the response cache {target} cannot be read ({exc}); delete or move the file")
