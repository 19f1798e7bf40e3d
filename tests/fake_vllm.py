"""A stand-in for vLLM's API server, for tests of how the embedded server is started: the
command `embedded.start_server(command=...)` runs instead of vLLM. It serves the fake
OpenAI server (tests/fakeserver.py) on --port under --model's name, or with --never-listen
only prints and sleeps, as a vLLM that hangs while loading does; --exit-after ends it
after that many seconds (with --exit-code, after logging a vLLM-like error with
--error), as a vLLM whose engine died does; --latency makes every reply take that long. Each
start appends its pid to --pids, so a test can count the
servers started."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakeserver import FakeServer, latency_responder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--root", help="the weights' path its model list reports, as vLLM does")
    parser.add_argument("--never-listen", action="store_true")
    parser.add_argument("--pids", type=Path)
    parser.add_argument("--exit-after", type=float, default=3600.0 * 24)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--error", help="a line logged just before the exit")
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    if args.pids is not None:
        with args.pids.open("a") as handle:
            handle.write(f"{os.getpid()}\n")
    print(f"fake vLLM {os.getpid()} starting on port {args.port}", flush=True)
    if not args.never_listen:
        responder = latency_responder(args.latency) if args.latency else None
        FakeServer(responder, model=args.model, root=args.root or "/models/fake").start(
            port=args.port
        )
        print(f"fake vLLM {os.getpid()} listening", flush=True)
    time.sleep(args.exit_after)
    if args.error:
        print(args.error, flush=True)
    for n in range(20):  # what follows the cause in vLLM's log: the requests it failed
        print(f'INFO: 127.0.0.1:{40000 + n} - "POST /v1/chat/completions" 500', flush=True)
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
