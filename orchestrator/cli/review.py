"""The review verb: people answer a run's decisions in a page on 127.0.0.1, as label lines."""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from ..errors import OrchestratorError
from .app import app, console, fail


@app.command()
def review(
    folder: Annotated[Path, typer.Argument(help="Run folder.")],
    field: Annotated[str, typer.Option(help="The output field people answer.")],
    plan: Annotated[
        Path | None,
        typer.Option(help="Label plan (JSONL of id, probability): its examples, in order."),
    ] = None,
    labels: Annotated[
        Path | None,
        typer.Option(help="Labels file to append to (default RUN/labels/labels.jsonl)."),
    ] = None,
    reviewer: Annotated[
        str | None, typer.Option(help="Who answers (default: the login name).")
    ] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: a free one).")] = 0,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Do not open a browser.")
    ] = False,
    blind: Annotated[
        bool, typer.Option(help="Hide the judge's answer until the person has given theirs.")
    ] = False,
    abstained: Annotated[
        bool,
        typer.Option(help="Walk the examples no judge answered (abstain:, a cascade's queue)."),
    ] = False,
) -> None:
    """Serve a page on 127.0.0.1 that walks the examples of a run (or of --plan) one at a
    time, with every call's prompt and reply, and appends each answer to the labels file
    (read as is by judge-card, align, calibrate); a restart resumes where the reviewer
    stopped. The page's address, with its token, is printed to stderr."""
    from ..report import make_review_server, serve_until_interrupted
    from ..store import RunReader

    if not 0 <= port <= 65535:
        fail(f"--port {port}: a port is 0 to 65535 (0: a free one)")
    if not RunReader(folder).has_results:
        fail(f"{folder} has no results.jsonl; is it a run folder?")
    try:
        server = make_review_server(
            folder,
            field,
            plan=plan,
            labels=labels,
            reviewer=reviewer,
            blind=blind,
            abstained=abstained,
            port=port,
        )
    except OrchestratorError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"--port {port}: cannot listen on 127.0.0.1 ({exc.strerror or exc})")
    review_ = server.review
    console.print(
        f"Review of {folder}, field {field}, by {review_.reviewer}: "
        f"{review_.progress()['done']} of {len(review_.queue)} answered; "
        f"labels in {review_.file.path} (Ctrl-C stops it)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    # On a line of its own, flushed, so a program that started the review can read it.
    sys.stderr.write(server.url + "\n")
    sys.stderr.flush()
    if not no_browser:
        webbrowser.open(server.url)
    serve_until_interrupted(server)
