"""`report --serve` answers only requests addressed to this machine by name (issue 35): a
request whose Host names another host — what a DNS-rebinding page sends — gets 421 and no
run data; localhost, 127.0.0.1, [::1] and the bound address, with or without a port, get
the page. Every request here goes over a real socket."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from helpers import judge_graph, write_graph, write_rows

import orchestrator as orc
from orchestrator.report import make_server
from orchestrator.report.loopback import LoopbackHandler, host_allowed, host_name
from orchestrator.report.serve import ReportServer

pytestmark = pytest.mark.reliability

FOREIGN = [
    "attacker.example:{port}",
    "attacker.example",
    "127.0.0.1.attacker.example:{port}",
    "localhost.attacker.example",
    "127.0.0.2:{port}",
    "0.0.0.0:{port}",
    "localhost:",
    "localhost:{port}x",
    "[::1]x",
    "[::1",
    "::1",
    "",
]
LOOPBACK = [
    "127.0.0.1",
    "127.0.0.1:{port}",
    "localhost",
    "localhost:{port}",
    "LocalHost:{port}",
    "[::1]",
    "[::1]:{port}",
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportServer]:
    """The report of a small finished run, served on a free port."""
    root = tmp_path_factory.mktemp("served")
    graph = write_graph(root, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = write_rows(root / "rows.jsonl", [{"id": f"r{i}", "text": f"text {i}"} for i in range(3)])
    answer = json.dumps({"score": 7})
    orc.run(graph, rows, out=root / "run", transport=orc.FakeTransport(lambda _: answer))
    server = make_server(root / "run", port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def get(server: ThreadingHTTPServer, path: str, host: str | None) -> tuple[int, bytes]:
    """GET `path` from `server` over a socket, with this Host header (None: none at all)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["/", "/example/0.json", "/report.html"])
@pytest.mark.parametrize("host", FOREIGN)
def test_a_foreign_host_gets_421_and_no_run_data(
    served: ReportServer, path: str, host: str
) -> None:
    """Before issue 35: `Host: attacker.example:9076` on /example/0.json was 200 with the
    example's trace, the precondition of DNS rebinding."""
    status, body = get(served, path, host.format(port=served.server_address[1]))
    assert status == 421, body[:200]
    assert b"text 0" not in body and b"judge" not in body


def test_a_request_without_a_host_or_with_two_is_refused(served: ReportServer) -> None:
    assert get(served, "/example/0.json", None)[0] == 421
    connection = http.client.HTTPConnection("127.0.0.1", served.server_address[1], timeout=10)
    try:
        connection.putrequest("GET", "/example/0.json", skip_host=True)
        connection.putheader("Host", "localhost")
        connection.putheader("Host", "attacker.example")
        connection.endheaders()
        assert connection.getresponse().status == 421
    finally:
        connection.close()


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_names_and_the_bound_address_get_the_page(served: ReportServer, host: str) -> None:
    header = host.format(port=served.server_address[1])
    status, page = get(served, "/", header)
    assert status == 200 and b"<html" in page.lower()
    status, detail = get(served, "/example/0.json", header)
    assert status == 200 and json.loads(detail)


def test_the_check_is_the_handlers_for_any_page() -> None:
    """A page of its own on LoopbackHandler (as a future one would be) is held to it too,
    on whatever loopback address it is bound to."""

    class Hello(LoopbackHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"hi")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert get(server, "/", "localhost") == (200, b"hi")
        assert get(server, "/", "attacker.example")[0] == 421
    finally:
        server.shutdown()
        server.server_close()


def test_host_parsing_and_the_bound_address() -> None:
    assert host_name("LocalHost:8770") == "localhost"
    assert host_name("[::1]:8770") == "[::1]"
    assert host_name("[::1]:x") is None and host_name("a:b:c") is None
    # A server bound to another address of this machine answers to that address too.
    assert host_allowed(["192.168.1.5:8770"], "192.168.1.5")
    assert host_allowed(["[fe80::1]:8770"], "fe80::1")
    assert not host_allowed(["192.168.1.6:8770"], "192.168.1.5")
