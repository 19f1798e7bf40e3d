"""What every page the tool serves on this machine answers: only requests addressed to it by
a loopback name or the address it is bound to.

A web page elsewhere can make the user's browser send requests to 127.0.0.1 under its own
host name (DNS rebinding: `attacker.example` resolving to 127.0.0.1), and then read the
replies as its own. The Host header is what gives such a request away: it names the
attacker's host. A request whose Host is not `localhost`, `127.0.0.1`, `[::1]` or the bound
address (any port) is answered 421 with no data.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


def host_name(header: str) -> str | None:
    """The host of a Host header (`name`, `name:port`, `[v6]`, `[v6]:port`), lowercased;
    None when the value is not of that form."""
    value = header.strip().lower()
    if value.startswith("["):
        name, bracket, port = value.partition("]")
        name += bracket
        if not bracket:
            return None
    else:
        name, _, port = value.partition(":")
        port = ":" + port if _ else ""
    if port and not (port.startswith(":") and port[1:].isdigit()):
        return None
    return name or None


def accepted_hosts(bound: str) -> frozenset[str]:
    """The host names a server bound to the address `bound` answers to."""
    bound = bound.lower()
    return LOOPBACK_NAMES | {f"[{bound}]" if ":" in bound else bound}


def host_allowed(headers: list[str], bound: str) -> bool:
    """Whether a request carrying these Host headers (all of them: a request has one) was
    addressed to a server bound to `bound` by a name that can only mean this machine."""
    if len(headers) != 1:
        return False
    return host_name(headers[0]) in accepted_hosts(bound)


class LoopbackHandler(BaseHTTPRequestHandler):
    """A request handler that refuses, before any route runs, every request whose Host
    names another machine (see the module docstring). Pages the tool serves derive from
    it."""

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        hosts = self.headers.get_all("Host") or []
        address = self.server.server_address
        bound = str(address[0]) if isinstance(address, tuple) else str(address)
        if host_allowed(hosts, bound):
            return True
        log.warning(
            "Refused a request for host %.100r: this page answers only to localhost, "
            "127.0.0.1, [::1] and %s",
            ", ".join(hosts) or "(none)",
            bound,
        )
        self.send_error(
            HTTPStatus.MISDIRECTED_REQUEST,
            explain="This page answers only requests to localhost, 127.0.0.1 or [::1].",
        )
        return False

    def send_body(self, status: int, kind: str, body: bytes) -> None:
        """Answer with `body` of content type `kind`, never cached; a client gone before
        the reply ends the connection quietly."""
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Referrer-Policy", "no-referrer")  # a review's URL holds a token
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
