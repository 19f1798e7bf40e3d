"""A server that redirects (issue 35, item 14): the SDK's client followed a redirect to any
host, so prompts went to a server the user never named and the manifest named the first
one only. No redirect is followed now: the refusal names both URLs, nothing reaches the
other server, and the manifest's server is the one that answered."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from fakeserver import FakeServer
from helpers import judge_graph, write_graph

import orchestrator as orc
from orchestrator.errors import ServerError


class _Redirects(BaseHTTPRequestHandler):
    """Answers POSTs (and, with `everything`, GETs too) with a 307 to `target`; other
    requests are passed to `target` and relayed."""

    target = ""
    everything = True
    seen: ClassVar[list[tuple[str, str]]] = []

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _redirect(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        if size:
            self.rfile.read(size)
        self.seen.append((self.command, self.path))
        self.send_response(307)
        self.send_header("Location", self.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self._redirect()

    def do_GET(self) -> None:
        if self.everything:
            self._redirect()
            return
        import urllib.request

        self.seen.append((self.command, self.path))
        with urllib.request.urlopen(self.target + self.path) as answer:
            body = answer.read()
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def servers() -> Iterator[tuple[FakeServer, str]]:
    """The server a redirect points to (another host name: localhost), and the URL of a
    redirecting one in front of it."""
    with FakeServer() as other:
        _Redirects.target = other.root_url.replace("127.0.0.1", "localhost")
        _Redirects.seen = []
        front = ThreadingHTTPServer(("127.0.0.1", 0), _Redirects)
        thread = threading.Thread(target=front.serve_forever, daemon=True)
        thread.start()
        try:
            yield other, f"http://127.0.0.1:{front.server_address[1]}/v1"
        finally:
            front.shutdown()
            front.server_close()


def _graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})


def test_a_server_redirecting_elsewhere_is_refused_naming_both(
    servers: tuple[FakeServer, str], tmp_path: Path
) -> None:
    other, url = servers
    _Redirects.everything = True
    with pytest.raises(ServerError) as refused:
        orc.run(_graph(tmp_path), [{"id": "a", "text": "x"}], base_url=url, api_key="sk-mine")
    message = str(refused.value)
    assert f"{url}/models redirects (HTTP 307) to {_Redirects.target}/v1/models" in message
    assert "not followed" in message and "Is the server running" not in message
    assert other.paths == []  # the other server got nothing, not even the model list


def test_a_redirected_request_fails_and_reaches_no_other_server(
    servers: tuple[FakeServer, str], tmp_path: Path
) -> None:
    """The model list is served, the chat requests are redirected: each call fails at its
    first try (no retry would change it) with the refusal, and the manifest names the
    server the run reached."""
    other, url = servers
    _Redirects.everything = False
    result = orc.run(
        _graph(tmp_path),
        [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}],
        base_url=url,
        out=tmp_path / "run",
        structured="off",
    )
    assert [line.status for line in result.results] == ["failed", "failed"]
    error = result.results[0].error or ""
    assert f"{url}/chat/completions redirects (HTTP 307) to {_Redirects.target}" in error
    assert not any(path.startswith("/v1/chat") for path in other.paths)
    assert [m for m, p in _Redirects.seen if p.endswith("/chat/completions")] == ["POST"] * 2
    assert [server["base_url"] for server in result.manifest.servers.values()] == [url]
