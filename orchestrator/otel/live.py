"""Spans sent while a run goes (`orchestrator run --otlp URL`, `otlp=` in Python).

The run's side is an engine `RunObserver` that starts a child process (`python -m
orchestrator.otel.live`) and, on every flush, writes it one byte. The child reads what the
flush wrote to the trace, turns it into spans and sends them in batches. Reading the trace,
building spans and encoding them is all Python: in a thread of the run's own process it
shares the interpreter with the event loop, and measured 0.38 of the run's throughput
without it (bench/engine_overhead.py --otlp), with spans dropped from a full queue; in a
process of its own it takes nothing from the loop but a core's spare time, and falls
behind rather than dropping anything.

The run never fails because of it: a backend that is down costs spans, said at the end with
their count. The headers go to the child through its stdin, never a file, an argument or
the environment.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..store import RunReader, TraceReader, result_ids_since, results_end
from .export import BATCH, Encoder, Sender, parse_headers, require_otel, resolve_endpoint, run_facts
from .spans import SpanBuilder, SpanData

if TYPE_CHECKING:
    from ..engine import RunProgress

log = logging.getLogger(__name__)

LIVE_TIMEOUT = 5.0  # seconds one export request may take, its retries included
STOP_WAIT = 120.0  # seconds the end of a run waits for the last spans to go at most
TICK = b"\n"  # a flush happened: read the trace
READ = 1000  # node runs read from the trace at a time
NICE = 10  # the sender's lower CPU priority where SCHED_IDLE is not to be had


class OtlpObserver:
    """The run's side: starts the sender (`Follower`, in a child process), wakes it on each
    flush, and at the end waits for it and says how many spans reached the backend."""

    def __init__(
        self,
        folder: str | Path,
        endpoint: str | None,
        headers: Sequence[str] = (),
        *,
        content: bool = True,
        timeout: float | None = None,
    ) -> None:
        # What can be wrong with the settings is said here, before the run starts.
        require_otel()
        self.folder = Path(folder)
        self.endpoint = resolve_endpoint(endpoint)
        self._headers = parse_headers(headers)
        self.content = content
        self.timeout = timeout or LIVE_TIMEOUT
        # Started now, so that its imports overlap the run's own start (the graph compiled,
        # the servers checked); it waits for its job. Should the run stop before it starts,
        # the sender's stdin closes with this object, and it exits.
        self._child: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def start(self, run: RunProgress) -> None:
        try:
            job = {
                "folder": str(self.folder),
                "endpoint": self.endpoint,
                "headers": self._headers,
                "content": self.content,
                "timeout": self.timeout,
                # This part's run id: earlier parts' node runs were sent by theirs.
                "current": RunReader(self.folder).manifest.run_id,
                # Result lines past this offset are this part's: their examples are done.
                "results_from": results_end(self.folder),
            }
            stdin = self._pipe()
            stdin.write(json.dumps(job).encode() + b"\n")
            stdin.flush()
            # A flush must never wait for the child: a tick it has not read yet is enough.
            os.set_blocking(stdin.fileno(), False)
        except (OSError, ValueError) as exc:
            log.warning("cannot start sending spans to %s: %s", self.endpoint, exc)
            self._stop_child()

    def _pipe(self) -> IO[bytes]:
        assert self._child is not None and self._child.stdin is not None
        return self._child.stdin

    def tick(self) -> None:
        if self._child is None:
            return
        try:
            self._pipe().write(TICK)
            self._pipe().flush()
        except (BlockingIOError, BrokenPipeError, OSError, ValueError):
            pass  # unread ticks are waiting already, or the sender stopped (said at stop)

    def stop(self) -> None:
        """Tells the sender the run's work ended (its stdin closes) and waits for its
        count; never raises (the run's outcome is the run's, not the exporter's)."""
        if self._child is None:
            return
        try:
            os.set_blocking(self._pipe().fileno(), True)
            # communicate() closes its stdin: the sender's signal that the work ended.
            out, _ = self._child.communicate(timeout=STOP_WAIT)
            counts = json.loads(out.decode().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
            log.warning(
                "sending spans to %s stopped before the end (%s); `orchestrator export %s "
                "--otlp URL` sends them all, with the same ids",
                self.endpoint,
                exc or "no count from the sender",
                self.folder,
            )
            self._stop_child()
            return
        self._report(int(counts["handed"]), int(counts["delivered"]))

    def _stop_child(self) -> None:
        if self._child is not None and self._child.poll() is None:
            self._child.kill()
            self._child.wait()

    def _report(self, handed: int, delivered: int) -> None:
        lost = handed - delivered
        if lost:
            log.warning(
                "%d of %d spans did not reach %s (is the backend up?); the run is complete on "
                "disk: `orchestrator export %s --otlp URL` sends them again, with the same ids",
                lost,
                handed,
                self.endpoint,
                self.folder,
            )
        else:
            log.info("%d spans sent to %s", handed, self.endpoint)


class Follower:
    """The sender's side: reads the node runs each flush added to the trace and sends
    them as spans, `BATCH` a request; at the end each example's root span. Once the run
    has ended and a request failed, what is left is counted as lost rather than each batch
    waiting out its retries."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.folder = Path(job["folder"])
        self.current = str(job.get("current") or "")
        self.content = bool(job["content"])
        self.sender = Sender(job["endpoint"], job["headers"], float(job["timeout"]))
        self.encode = Encoder()
        self.builder: SpanBuilder | None = None
        self.trace: TraceReader | None = None
        self.examples: set[str] = set()
        self.rooted: set[str] = set()  # examples whose root span went already
        self.results_at = int(job.get("results_from") or 0)  # bytes of results read
        self.last = 0  # the id of the last node run read
        self.pending: list[SpanData] = []
        self.handed = self.delivered = 0
        self.failed = self.ending = False

    def read(self) -> None:
        """What the trace gained since the last read, as spans; and the root span of each
        example whose result line was written, rather than all of them at the end (3000
        root spans took the end of a 3000-row run 0.3 s, which the run waited for)."""
        if self.trace is None:
            reader = RunReader(self.folder)
            if not reader.has_trace:
                return
            self.trace = TraceReader.open(reader.traces_path)
            self.builder = SpanBuilder(run_facts(reader, self.trace), content=self.content)
        # Before the trace: a result line is written after its example's trace, so every
        # node run of an example read as done here is in the trace read below.
        done = self._finished()
        self._read_node_runs()
        assert self.builder is not None
        for example in done:
            if example in self.examples and example not in self.rooted:
                self.rooted.add(example)
                self.hand(self.builder.example_span(example))

    def _finished(self) -> list[str]:
        """The examples of the result lines written since the last read (whole lines only;
        a damaged line's example gets its root span at the end)."""
        found, self.results_at = result_ids_since(self.folder, self.results_at)
        return found

    def _read_node_runs(self) -> None:
        assert self.trace is not None and self.builder is not None
        while True:
            # A few at a time, the query closed before any is sent: an open read would
            # keep the writer's log from being merged into the trace for as long.
            query = self.trace.node_runs(after=self.last)
            runs = list(islice(query, READ))
            query.close()
            if not runs:
                return
            for run in runs:
                self.last = run.id or self.last
                spans = self.builder.spans(run)  # every node run counts its occurrence
                if self.current and run.run_id != self.current:
                    continue
                self.examples.add(run.example_id)
                for span in spans:
                    self.hand(span)

    def hand(self, span: SpanData) -> None:
        self.pending.append(span)
        self.handed += 1
        if len(self.pending) >= BATCH:
            self.send()

    def send(self) -> None:
        batch, self.pending = self.pending, []
        if not batch or (self.ending and self.failed):
            return
        if self.sender(self.encode(batch)):
            self.delivered += len(batch)
        else:
            self.failed = True

    def finish(self) -> dict[str, int]:
        """The last node runs and every example's root span sent; the counts."""
        self.ending = True
        try:
            self.read()
            if self.builder is not None:
                for example in sorted(self.examples - self.rooted):
                    self.hand(self.builder.example_span(example))
            self.send()
        finally:
            self.sender.close()
            if self.trace is not None:
                self.trace.close()
        return {"handed": self.handed, "delivered": self.delivered}


def _yield_the_cores() -> None:
    """The run's own process comes first for the cores: the sender takes what they leave
    idle and catches up when the run's work ends.

    Linux's SCHED_IDLE runs it only on a core nothing else wants, and a waking run preempts
    it at once; at nice 10 it still took a share. Paired rounds of bench/engine_overhead.py
    --otlp on 2 cores: 0.971, 0.976 and (15 rounds) 0.952 with SCHED_IDLE, 0.971 and 0.943
    at nice 10 (docs/BENCHMARKS.md). Once set, an unprivileged process cannot leave it: on a
    machine kept busy by other work when the run ends, the last spans may not go within
    STOP_WAIT, and the run says so (`export --otlp` sends them again)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused
        os.nice(NICE)


def main() -> None:
    """The sender process: its job on stdin's first line, then a line per flush until
    stdin closes (the run ended, or its process did); the counts on stdout at the end."""
    logging.basicConfig(level=logging.WARNING, format="orchestrator --otlp: %(message)s")
    # Ctrl-C reaches the whole process group: the run's side says when to stop (its end,
    # or its exit closing this stdin), so what it wrote until then is still sent.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _yield_the_cores()
    # The job's line, then unbuffered reads: one read per wake, however many ticks wait.
    job = b""
    while not job.endswith(b"\n"):
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return
        job += chunk
    first, _, _ = job.partition(b"\n")
    follower = Follower(json.loads(first))
    while True:
        ticks = os.read(0, 1 << 16)
        if not ticks:
            break
        try:
            follower.read()
        except Exception as exc:  # a trace that cannot be read now may be read at the end
            log.warning("cannot read %s for its spans yet: %s", follower.folder, exc)
    # stdout is this child's answer to the run that started it (what was sent and dropped),
    # read by the parent, not a message to a person: messages go through logging.
    sys.stdout.write(json.dumps(follower.finish()) + "\n")
    sys.stdout.flush()
    # Done: the run waits for this process's exit, so skip the interpreter's teardown (its
    # modules and objects freed one by one); nothing is left open or unwritten.
    os._exit(0)


if __name__ == "__main__":
    main()
