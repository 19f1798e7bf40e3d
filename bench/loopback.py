"""A fast OpenAI-compatible loopback server for throughput benchmarks.

Unlike `tests/fakeserver.py` (threads, one responder per request, built for fault
injection), this one is an aiohttp app in its own process, so it has a core of its own and
answers thousands of requests a second: the client side is what a benchmark measures.
Every chat request gets a schema-valid reply (built once per schema), after an optional
fixed latency. `GET /stats` returns how many chat requests it has answered and the peak in
flight; with `--capture`, `GET /take` hands over the request bodies (for checks, not timing).

    python bench/loopback.py --port 9100 --latency 0.1      # standalone
    with Loopback(latency=0.05) as server: ... server.base_url
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
MODEL = "loopback"


def _reply_body(schema: dict[str, Any] | None) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests"))
    from fakeserver import schema_instance

    content = orjson.dumps(schema_instance(schema)).decode() if schema else "ok"
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def serve(port: int, latency: float, capture: bool = False, capacity: int = 0) -> None:
    """Run the server in this process until killed; prints `READY <port>` when listening.

    `GET /stats` gives the chat requests answered and the most ever in flight at once;
    with `capture`, `GET /take` returns the request bodies received since the last take.
    With `capacity`, at most that many requests are answered at once (the rest queue, as in
    a GPU server's batch), each taking `latency`.
    """
    from aiohttp import web

    replies: dict[bytes, bytes] = {}
    stats = {"chat": 0, "in_flight": 0, "peak": 0}
    bodies: list[Any] = []
    models = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
    gate = asyncio.Semaphore(capacity) if capacity else None

    async def chat(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        if capture:
            bodies.append(body)
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema")
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        payload = replies.get(key)
        if payload is None:
            payload = replies[key] = orjson.dumps(_reply_body(schema))
        if gate is not None:
            await gate.acquire()
        stats["in_flight"] += 1
        stats["peak"] = max(stats["peak"], stats["in_flight"])
        try:
            if latency:
                await asyncio.sleep(latency)
        finally:
            stats["in_flight"] -= 1
            if gate is not None:
                gate.release()
        stats["chat"] += 1
        return web.Response(body=payload, content_type="application/json")

    async def list_models(_: web.Request) -> web.Response:
        return web.Response(body=models, content_type="application/json")

    async def get_stats(_: web.Request) -> web.Response:
        return web.json_response(stats)

    async def take(_: web.Request) -> web.Response:
        taken = orjson.dumps({"bodies": bodies, "peak": stats["peak"]})
        bodies.clear()
        stats["peak"] = 0
        return web.Response(body=taken, content_type="application/json")

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/stats", get_stats)
    app.router.add_get("/take", take)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"READY {bound}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class Loopback:
    """The server in a child process, for the length of a `with` block."""

    def __init__(
        self, latency: float = 0.0, port: int = 0, capture: bool = False, capacity: int = 0
    ) -> None:
        self.latency = latency
        self.capacity = capacity
        self.port = port
        self.capture = capture
        self._proc: subprocess.Popen[str] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        """The server process (to read its CPU time from /proc)."""
        if self._proc is None:
            raise RuntimeError("the loopback server is not started")
        return self._proc.pid

    def requests(self) -> int:
        """Chat requests answered so far."""
        import httpx

        return int(httpx.get(f"http://127.0.0.1:{self.port}/stats").json()["chat"])

    def take(self) -> tuple[list[dict[str, Any]], int]:
        """Request bodies since the last take (needs `capture=True`), and the peak number of
        requests in flight over the same stretch."""
        import httpx

        taken = orjson.loads(httpx.get(f"http://127.0.0.1:{self.port}/take", timeout=60).content)
        return taken["bodies"], int(taken["peak"])

    def __enter__(self) -> Loopback:
        self._proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--port",
                str(self.port),
                "--latency",
                str(self.latency),
                *(["--capture"] if self.capture else []),
                *(["--capacity", str(self.capacity)] if self.capacity else []),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("READY"):
            self._proc.kill()
            raise RuntimeError(f"loopback server did not start (printed {line!r})")
        self.port = int(line.split()[1])
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--capture", action="store_true", help="keep request bodies for /take")
    parser.add_argument("--capacity", type=int, default=0, help="requests answered at once")
    args = parser.parse_args()
    serve(args.port, args.latency, args.capture, args.capacity)
