"""`orchestrator report RUN_DIR --serve`: the same page on localhost, traces loaded on demand.

For runs too large to embed in one file: the page carries only the examples table, and
each example's trace is read from traces.sqlite when it is opened. It answers only requests
addressed to localhost, 127.0.0.1 or [::1] (loopback.py), so no other site's page can read it.
"""

from __future__ import annotations

import logging
import re
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

from ..store import NodeRun, TraceReader
from .build import Page, render_page
from .collect import DetailOptions, RunData, example_detail, example_order, load_run
from .loopback import LoopbackHandler

_EXAMPLE = re.compile(r"^/example/(\d+)\.json$")
log = logging.getLogger(__name__)


class ReportServer(ThreadingHTTPServer):
    """Serves one run folder's report page and its per-example JSON."""

    daemon_threads = True

    def __init__(self, run_dir: Path, port: int, full_prompts: bool) -> None:
        self.run: RunData = load_run(Path(run_dir), full_prompts)
        self.order = example_order(self.run)
        page = Page("serve", full_prompts, [], "", 0)
        self.page = render_page(self.run, self.order, page).encode()
        self.options = DetailOptions(full=full_prompts)
        reader = self.run.reader
        self.store: TraceReader | None = reader.trace() if reader.has_trace else None
        self.lock = threading.Lock()  # one SQLite connection, shared by the handler threads
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def detail(self, position: int) -> dict[str, Any] | None:
        if not 0 <= position < len(self.order):
            return None
        result = self.run.results[self.order[position]]
        records: list[NodeRun] = []
        if self.store is not None:
            with self.lock:
                records = list(self.store.node_runs(result.id))
        return example_detail(self.run, result, records, self.options)

    def server_close(self) -> None:
        super().server_close()
        if self.store is not None:
            self.store.close()


class _Handler(LoopbackHandler):
    # Addressed to this machine by name, or refused before any route runs (loopback.py).
    server: ReportServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows where the report is, not every request."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html", "/report.html"):
            self.send_body(200, "text/html; charset=utf-8", self.server.page)
            return
        match = _EXAMPLE.match(path)
        if match:
            detail = self.server.detail(int(match.group(1)))
            if detail is not None:
                self.send_body(200, "application/json", orjson.dumps(detail, default=str))
                return
        self.send_body(404, "text/plain; charset=utf-8", f"not found: {path}".encode())


def make_server(run_dir: Path, port: int = 8770, full_prompts: bool = False) -> ReportServer:
    """A report server bound to 127.0.0.1:port (0 picks a free port), not yet serving."""
    return ReportServer(run_dir, port, full_prompts)


def serve_report(run_dir: Path, port: int = 8770, full_prompts: bool = False) -> None:
    """Serve the report of RUN_DIR on localhost until Ctrl-C; its address is logged."""
    server = make_server(run_dir, port, full_prompts)
    log.info("%s", serving_line(run_dir, server))
    serve_until_interrupted(server)


def serving_line(run_dir: Path, server: ReportServer) -> str:
    """The line that tells the user where the report is and how to stop it."""
    return f"Report of {run_dir} at {server.url} (Ctrl-C stops it)"


def serve_until_interrupted(server: ThreadingHTTPServer) -> None:
    """Serve until Ctrl-C, then release the port and the trace (a report's or a review's)."""
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
