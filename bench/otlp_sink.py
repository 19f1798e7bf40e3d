"""An OTLP/HTTP sink for benchmarks: answers every POST with 200 and an empty reply, in a
process of its own (so the run measured does not share its interpreter), and prints its
URL on its first line.

    python bench/otlp_sink.py    # -> http://127.0.0.1:PORT/v1/traces
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    print(f"http://127.0.0.1:{server.server_address[1]}/v1/traces", flush=True)
    server.serve_forever()
