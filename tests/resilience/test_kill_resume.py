"""Kill a run mid-way (SIGKILL, SIGINT) and run the same command again (issue 9, part 3).

Setting, and why it makes the 1.1 bound meaningful. The graph is a diamond of three LLM
calls per example (`extract`, then `content` and `style` on its answer), so at any moment
many examples are half done: resume must reuse their finished nodes from the trace (the
test checks that the trace, not the cache, supplied them). The fake server answers each
call after 0.1–0.3 s (mean 0.2 s, fixed per call from a hash of its prompt): real LLM
servers take that long or longer. A kill can only lose the calls in flight (at most
`CONCURRENCY`, one latency's worth of work) and the replies received since the last flush
(at most one 0.5 s flush interval of work): about 0.3 + 0.5 = 0.8 s of requests in the
worst case, ~0.45 s on average. `EXAMPLES` makes a clean run ~8.3 s of requests at full
concurrency (11–16 s measured, with start-up and a loaded machine), so that worst case
stays under the 10% the bound allows, while a run that flushed only at the end would lose
everything before a kill and fail it at every kill point. A run much shorter than 10 ×
0.8 s could not meet 1.1 × by design, whatever the code did: in-flight calls die with
the process. The clean run each scenario is compared with runs at the same time, on its
own server, folder and cache. The per-run canary is left out of both counts (see the
test). SIGINT is tested on a smaller workload, with an exact bound (see its docstring).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_zygote import ForkedProcess
from fakeserver import FakeServer, Reply, schema_responder
from helpers import CLI, is_canary, requests_per_call, write_graph, write_rows

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 8
EXAMPLES = 110  # 330 calls, 8 in flight, 0.2 s each: ~8.3 s of requests (see above)
BOUND = 1.1
SIGINT_EXAMPLES = 40
NODES = ("extract", "content", "style")

GRAPH: dict[str, Any] = {
    "name": "diamond",
    "inputs": ["text"],
    "defaults": {"temperature": 0.0, "max_tokens": 100},
    "nodes": {
        "extract": {
            "kind": "llm",
            "prompt": "extract.jinja",
            "output": {"summary": "string", "claims": {"type": "integer", "min": 1, "max": 9}},
        },
        "content": {
            "kind": "llm",
            "prompt": "content.jinja",
            "output": {"reason": "string", "score": {"type": "integer", "min": 1, "max": 10}},
        },
        "style": {
            "kind": "llm",
            "prompt": "style.jinja",
            "output": {"reason": "string", "score": {"type": "integer", "min": 1, "max": 10}},
        },
    },
    "outputs": {"content": "content.score", "style": "style.score", "claims": "extract.claims"},
}
# Each call's prompt names its node and its text, so `requests_per_call` tells calls apart.
TEMPLATES = {
    "extract.jinja": "Extract the claims of <<{{ text }}>>.",
    "content.jinja": "Content of <<{{ text }}>> given {{ extract.summary }}, {{ extract.claims }}.",
    "style.jinja": "Style of <<{{ text }}>> given {{ extract.summary }}.",
}


def first_user(body: dict[str, Any]) -> str:
    """The call a request belongs to (as `requests_per_call` names it)."""
    return next((m["content"] for m in body["messages"] if m["role"] == "user"), "")


def llm_latency(body: dict[str, Any]) -> Reply:
    """A valid answer after 0.1–0.3 s, the same delay for the same call on every run."""
    reply = schema_responder(body)
    reply.delay = 0.1 + 0.2 * (zlib.crc32(first_user(body).encode()) % 1000) / 1000
    return reply


class AnswerLog:
    """`llm_latency`, noting when each node call's reply is due, so that after a kill the
    calls asked again can be split into those in flight at the kill and those already
    answered but not yet flushed (the two ways a kill loses work)."""

    def __init__(self) -> None:
        self.due: dict[str, float] = {}  # call → when its first reply was sent

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = llm_latency(body)
        if not is_canary(body):
            self.due.setdefault(first_user(body), time.monotonic() + reply.delay)
        return reply

    def split(self, asked_again: list[str], dead: float) -> tuple[int, int, float]:
        """(answered before `dead` yet asked again, in flight at `dead`, how many seconds
        before `dead` the oldest of those answers was sent)."""
        ages = [dead - self.due[call] for call in asked_again if self.due[call] <= dead]
        return len(ages), len(asked_again) - len(ages), max(ages, default=0.0)


def node_requests(server: FakeServer) -> int:
    """Requests for node calls so far (the per-run canary excluded)."""
    return sum(1 for body in list(server.requests) if not is_canary(body))


def canaries(server: FakeServer) -> int:
    return sum(1 for body in list(server.requests) if is_canary(body))


@dataclass
class Workload:
    """A graph and its data on disk, and the ids a finished run must hold."""

    graph: Path
    data: Path
    ids: list[str]


def make_workload(root: Path, rows: range) -> Workload:
    """The diamond graph over the rows `rows` (ids and texts fixed by the row number)."""
    graph = write_graph(root / "graph", GRAPH, TEMPLATES)
    data = [{"id": f"ex{i:04d}", "text": f"text number {i}"} for i in rows]
    return Workload(graph, write_rows(root / "rows.jsonl", data), [r["id"] for r in data])


@dataclass
class Cli:
    """One `orchestrator run` subprocess with its output in files (no pipe can fill up)."""

    proc: ForkedProcess | subprocess.Popen[str]
    log: Path
    started: float

    def wait(self, timeout: float = 180) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def start_cli(
    work: Workload,
    out: Path,
    base_url: str,
    cache: Path,
    concurrency: int = CONCURRENCY,
    log: Path | None = None,
    extra: tuple[str, ...] = (),
) -> Cli:
    """Start `python -m orchestrator run …` as a user would type it, with `extra` flags
    (e.g. `--workers 2`), in a process of its own forked by the tests' CLI zygote
    (cli_zygote.py: what stays the same as a new interpreter)."""
    command = [
        "run",
        str(work.graph),
        "--data",
        str(work.data),
        "--out",
        str(out),
        "--base-url",
        base_url,
        "--concurrency",
        str(concurrency),
        "--cache",
        str(cache),
        *extra,
    ]
    log = log or out.parent / f"{out.name}.{time.monotonic_ns()}.log"
    with log.open("wb") as sink:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = CLI.start(
            "orchestrator", command, env, stdout=sink.fileno(), stderr=subprocess.STDOUT
        )
    return Cli(proc, log, time.monotonic())


def wait_until(condition: Callable[[], bool], what: str, cli: Cli, timeout: float = 120) -> None:
    """Poll `condition` (generously: the machine may be loaded); fail if the run ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if cli.proc.poll() is not None:
            code = cli.proc.returncode
            pytest.fail(f"the run ended (exit {code}) before {what}:\n{cli.output()}")
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def integrity(path: Path) -> str:
    """SQLite's own verdict on a database file ("ok" when nothing is corrupt)."""
    db = sqlite3.connect(path)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


def result_ids(out: Path, *, allow_torn_tail: bool = False) -> list[str]:
    """Ids of results.jsonl in file order, each line parsed strictly.

    A SIGKILL can tear the last line mid-write (resume drops it); anywhere else, or after
    a run that ended normally, an unparsable line is a bug.
    """
    lines = (out / "results.jsonl").read_bytes().splitlines()
    ids = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if allow_torn_tail and number == len(lines):
                continue
            raise
        assert row["status"] == "ok", row
        ids.append(str(row["id"]))
    return ids


def lost_rows(ids: list[str], expected: list[str]) -> int:
    """Rows missing from, or repeated in, a finished results.jsonl."""
    counts = Counter(ids)
    missing = sum(1 for i in expected if i not in counts)
    repeated = sum(c - 1 for c in counts.values())
    extra = sum(1 for i in counts if i not in set(expected))
    return missing + repeated + extra


def traced(out: Path, run_id: str | None = None) -> list[tuple[str, str]]:
    """(example, node) of every ok node execution in the trace, or in one run of it."""
    sql, args = "SELECT example_id, node FROM node_runs WHERE status='ok'", ()
    if run_id is not None:
        sql, args = sql + " AND run_id=?", (run_id,)
    db = sqlite3.connect(out / "traces.sqlite")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def half_done(out: Path) -> set[str]:
    """Examples whose trace holds `extract` but not both judges (resume must reuse it)."""
    nodes: dict[str, set[str]] = {}
    for example, node in traced(out):
        nodes.setdefault(example, set()).add(node)
    return {e for e, done in nodes.items() if "extract" in done and done != set(NODES)}


def manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


@dataclass
class CleanRun:
    """An uninterrupted run of the workload: the baseline of the 1.1 bound.

    It runs alongside the scenario it is compared with, on its own server, folder and
    cache: the same machine load, and no wall time added to the suite.
    """

    work: Workload
    server: FakeServer
    cli: Cli
    requests: int = 0  # node-call requests, canary excluded
    seconds: float = 0.0

    @classmethod
    def start(cls, root: Path, server: FakeServer) -> CleanRun:
        work = make_workload(root, range(EXAMPLES))
        return cls(work, server, start_cli(work, root / "run", server.base_url, root / "c.db"))

    def finish(self) -> CleanRun:
        code = self.cli.wait()
        self.seconds = time.monotonic() - self.cli.started
        assert code == 0, self.cli.output()
        assert canaries(self.server) == 1
        self.requests = node_requests(self.server)
        assert sorted(result_ids(self.cli.log.parent / "run")) == sorted(self.work.ids)
        return self


@pytest.mark.parametrize("fraction", [0.15, 0.5, 0.85], ids=["early", "middle", "late"])
def test_sigkill_then_same_command_finishes_every_example_once(
    tmp_path: Path, fraction: float, figure: Callable[..., None]
) -> None:
    """SIGKILL after `fraction` of the run's requests; the same command finishes it."""
    work = make_workload(tmp_path / "killed", range(EXAMPLES))
    out, cache = tmp_path / "killed" / "run", tmp_path / "killed" / "cache.sqlite"
    calls = len(NODES) * EXAMPLES
    answers = AnswerLog()
    with FakeServer(llm_latency) as clean_server, FakeServer(answers) as server:
        baseline = CleanRun.start(tmp_path / "clean", clean_server)
        first = start_cli(work, out, server.base_url, cache)
        target = int(fraction * calls)
        wait_until(lambda: node_requests(server) >= target, f"{target} requests", first)
        first.proc.send_signal(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
        # After the process is gone: a reply not yet due now was still outstanding at its
        # death, so at most CONCURRENCY calls can count as in flight (checked below).
        dead = time.monotonic()
        killed_at = node_requests(server)

        # What the kill left behind: intact databases, unique lines, a manifest still
        # saying "running" (nothing could update it).
        assert integrity(out / "traces.sqlite") == "ok"
        assert integrity(cache) == "ok"
        assert manifest(out)["status"] == "running"
        written = result_ids(out, allow_torn_tail=True)
        assert len(written) == len(set(written))
        partial = half_done(out)

        second = start_cli(work, out, server.base_url, cache)
        code = second.wait()
        recover_s = time.monotonic() - second.started
        assert code == 0, second.output()
        assert "Resuming" in second.output()
        total = node_requests(server)
        # One canary per command: a fixed probe of the server, not work, so it is left out
        # of both sides of the ratio — and checked here, so none hides in the comparison.
        assert canaries(server) == 2
        per_call = requests_per_call(server.requests)
        clean = baseline.finish()

    ids = result_ids(out)
    lost = lost_rows(ids, work.ids)
    assert lost == 0, Counter(ids).most_common(3)
    assert integrity(out / "traces.sqlite") == "ok"
    assert integrity(cache) == "ok"
    after = manifest(out)
    assert after["status"] == "complete" and after["resumed"] is True
    # The trace, not the cache, carried the half-done examples over: the resumed run did
    # not execute their `extract` again, not even as a cache hit.
    again_extracted = {e for e, node in traced(out, after["run_id"]) if node == "extract"}
    assert not again_extracted & partial
    assert clean.requests == calls  # one request per call: this server never needs a retry
    assert len(per_call) == calls  # every call asked at least once, none invented
    ratio = total / clean.requests
    again = [call for call, n in per_call.items() if n > 1]
    unflushed, in_flight, oldest = answers.split(again, dead)
    assert total <= BOUND * clean.requests, (
        f"{total} requests over both runs vs {clean.requests} clean ({ratio:.3f}×); killed "
        f"after {killed_at}, {len(written)} lines kept, {len(partial)} examples half done; asked "
        f"again: {unflushed} answered before the kill, {in_flight} in flight"
    )
    assert in_flight <= CONCURRENCY  # the client never has more requests out
    figure(
        f"SIGKILL mid-run ({int(fraction * 100)}% of requests sent)",
        f"SIGKILL to `orchestrator run` after {killed_at}/{calls} requests "
        f"({CONCURRENCY} in flight, 0.1–0.3 s replies), then the same command",
        runs=2,
        lost=lost,
        max_requests=max(per_call.values()),
        recover_s=recover_s,
        note=(
            f"requests {ratio:.3f} × clean ({total} vs {clean.requests}): asked again "
            f"{in_flight} calls in flight and {unflushed} answered but not yet flushed "
            f"(the oldest {oldest:.2f} s before the kill); "
            f"{len(written)} lines and {len(partial)} half-done examples kept at the kill; "
            f"clean run {clean.seconds:.1f} s"
        ),
    )


def test_sigint_stops_cleanly_and_says_how_to_resume(
    tmp_path: Path, figure: Callable[..., None]
) -> None:
    """Ctrl-C mid-run: exit 130, a message naming the folder, "interrupted", then resume.

    A clean stop writes everything that finished, so unlike a SIGKILL its cost does not
    depend on the run's length: only the calls in flight are asked again. A smaller
    workload (`SIGINT_EXAMPLES`) is enough, and the bound is exact: distinct calls plus
    `CONCURRENCY`. (Against this server every call takes one request, as the SIGKILL
    tests' clean runs check, so the distinct calls are what a clean run would send.)
    """
    work = make_workload(tmp_path, range(SIGINT_EXAMPLES))
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    calls = len(NODES) * SIGINT_EXAMPLES
    with FakeServer(llm_latency) as server:
        first = start_cli(work, out, server.base_url, cache)
        wait_until(lambda: node_requests(server) >= calls // 2, "half of the requests", first)
        stopped = time.monotonic()
        first.proc.send_signal(signal.SIGINT)
        code = first.wait()
        stop_s = time.monotonic() - stopped
        interrupted_at = node_requests(server)
        said = first.output()
        assert code == 130, said
        assert "Traceback" not in said
        # The message tells what to do and where: the same command, this folder. (Rich
        # wraps long lines when not on a terminal, so the path is looked for unwrapped.)
        assert "re-run the same command to resume" in said.replace("\n", " ")
        assert str(out) in said.replace("\n", ""), said
        assert manifest(out)["status"] == "interrupted"
        assert integrity(out / "traces.sqlite") == "ok"
        assert integrity(cache) == "ok"
        written = result_ids(out)  # a clean stop leaves no torn line
        assert len(written) == len(set(written))

        second = start_cli(work, out, server.base_url, cache)
        assert second.wait() == 0, second.output()
        recover_s = time.monotonic() - second.started
        total = node_requests(server)
        assert canaries(server) == 2  # one per command, left out of the count as above
        per_call = requests_per_call(server.requests)

    ids = result_ids(out)
    lost = lost_rows(ids, work.ids)
    assert lost == 0
    assert manifest(out)["status"] == "complete"
    assert len(per_call) == calls
    assert total <= calls + CONCURRENCY, f"{total} requests for {calls} calls"
    figure(
        "Ctrl-C mid-run",
        f"SIGINT to `orchestrator run` after {interrupted_at}/{calls} requests "
        f"({CONCURRENCY} in flight, 0.1–0.3 s replies), then the same command",
        runs=2,
        lost=lost,
        max_requests=max(per_call.values()),
        recover_s=recover_s,
        note=(
            f"exit 130 {stop_s:.2f} s after the signal, status interrupted, {len(written)} "
            f"lines kept; {total - calls} calls asked again (in flight ≤ {CONCURRENCY})"
        ),
    )
