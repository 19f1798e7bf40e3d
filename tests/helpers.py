"""Small builders shared by the core tests: graph folders and runs against the fake server."""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cli_zygote import ForkedProcess, Zygotes

import orchestrator as orc

REPO = Path(__file__).resolve().parent.parent
# `python -m orchestrator` forked from a preloaded interpreter (cli_zygote.py says why and
# what stays the same); one pair per test process, ended with it.
CLI = Zygotes()
atexit.register(CLI.close)


def judge_graph(**defaults: Any) -> dict[str, Any]:
    """A one-node graph: `judge` rates `text` 1–10 with prompt judge.jinja; `defaults`
    override the sampling defaults (temperature 0, max_tokens 60)."""
    return {
        "name": "judge",
        "inputs": ["text"],
        "defaults": {"temperature": 0.0, "max_tokens": 60, **defaults},
        "nodes": {
            "judge": {
                "kind": "llm",
                "prompt": "judge.jinja",
                "output": {"score": {"type": "integer", "min": 1, "max": 10}},
            }
        },
        "outputs": {"score": "judge.score"},
    }


def write_graph(root: Path, graph: dict[str, Any], templates: dict[str, str]) -> Path:
    """Write graph.yaml plus its templates under root/prompts; return the graph path."""
    prompts = root / "prompts"
    for name, text in templates.items():
        (prompts / name).parent.mkdir(parents=True, exist_ok=True)
        (prompts / name).write_text(text, encoding="utf-8")
    prompts.mkdir(parents=True, exist_ok=True)
    graph = {"prompts": "prompts", **graph}
    path = root / "graph.yaml"
    path.write_text(yaml.safe_dump(graph, sort_keys=False), encoding="utf-8")
    return path


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@dataclass
class Ran:
    """A finished run as the tests read it: what `orc.run` returned, and the manifest and
    summary as the run folder holds them (plain dicts, as a reader of the files sees them)."""

    result: orc.RunResult
    manifest: dict[str, Any]
    summary: dict[str, Any]
    folder: Path


def run_graph(graph: Path, data: Path, out: Path, base_url: str, **kwargs: Any) -> Ran:
    """`orc.run` of a graph file over a data file into `out`, with a private cache unless
    the test passes its own (`use_cache=False`: none)."""
    kwargs.setdefault("cache", out.parent / "cache.sqlite")
    if not kwargs.pop("use_cache", True):
        kwargs["cache"] = False
    result = orc.run(graph, data, out=out, base_url=base_url, **kwargs)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return Ran(result, manifest, summary, out)


def results(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {str(r["id"]): r for r in map(json.loads, lines)}


def user_text(body: dict[str, Any]) -> str:
    """The last user message of a chat request (what the prompt rendered to)."""
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def is_canary(body: dict[str, Any]) -> bool:
    schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema", {})
    return "token" in schema.get("properties", {}) and "count" in schema.get("properties", {})


def requests_per_call(bodies: list[dict[str, Any]]) -> dict[str, int]:
    """How many requests the server saw for each node call, canary excluded.

    A call is named by its first user message: re-asks append turns after it, so every
    request one call sends (first try, transport retries, re-asks) counts toward it.
    """
    counts: dict[str, int] = {}
    for body in bodies:
        if is_canary(body):
            continue
        first = next(m["content"] for m in body["messages"] if m["role"] == "user")
        counts[first] = counts.get(first, 0) + 1
    return counts


def orchestrator_command(
    *args: str, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`orchestrator ARGS` in a process of its own, as a user runs it, output captured
    (forked from a preloaded interpreter when the environment allows, see cli_zygote.py).

    The console is made very wide so rich wraps no line: a test that looks for a message
    (or for a leaked key) must not miss it because it was split.
    """
    base = {k: v for k, v in os.environ.items() if k not in unset}
    full = {**base, "PYTHONPATH": str(REPO), "COLUMNS": "10000", **(env or {})}
    return CLI.run("orchestrator", list(args), full, timeout=300)


def start_cli_run(
    graph: Path, data: Path, out: Path, base_url: str, *extra: str
) -> ForkedProcess | subprocess.Popen[str]:
    """`orchestrator run` in a process of its own (so it can be killed), output on one pipe.

    Uses a cache next to the run folder unless `extra` passes `--cache`.
    """
    command = ["run", str(graph), "--data", str(data), "--out", str(out), "--base-url", base_url]
    if "--cache" not in extra:
        command += ["--cache", str(out.parent / "cache.sqlite")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return CLI.start("orchestrator", [*command, *extra], env, stderr=subprocess.STDOUT)


def wait_for_lines(
    path: Path, count: int, proc: ForkedProcess | subprocess.Popen[str] | None = None
) -> None:
    """Poll until `path` has `count` lines (finished work is flushed every half second)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= count:
            return
        if proc is not None and proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the run ended before {count} lines:\n{output}")
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {count} lines")


def trace_records(
    trace: Path, example: str | None = None, node: str | None = None
) -> list[dict[str, Any]]:
    """A trace file's node executions (oldest first) as plain dicts, as
    `orchestrator trace --format jsonl` prints them, each with its attempts."""
    from orchestrator.store.reader import TraceReader

    with TraceReader.open(trace) as reader:
        return [run.model_dump() for run in reader.node_runs(example, node)]


def scripted_run(
    out: Path, spec: dict[str, Any], template: str, rows: list[dict[str, Any]], scores: Any
) -> Path:
    """`spec` (a one-judge graph writing `score`) run over `rows` into `out` by a fake judge
    that gives row i the score `scores[i]`; the prompt `template` must render `#i#` (a row
    field holding it), which is how the judge knows the row."""
    graph = orc.Graph.from_dict(spec, prompts={"judge.jinja": template})

    def respond(request: Any) -> str:
        i = int(request.messages[-1]["content"].split("#")[1])
        return json.dumps({"score": float(scores[i])})

    fake = orc.FakeTransport(respond, models=["judge"])
    orc.run(graph, rows, out=out, transport=fake, model="judge", overwrite=True)
    return out


@contextmanager
def refusing_urls(count: int) -> Iterator[list[str]]:
    """`count` base URLs whose connections are refused for the block. Each port is bound and
    never listened on, so no other test's server can take it meanwhile: a stopped fake
    server's port was taken by another worker's, which answered for the "dead" one."""
    with ExitStack() as stack:
        urls = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            urls.append(f"http://127.0.0.1:{sock.getsockname()[1]}/v1")
        yield urls
