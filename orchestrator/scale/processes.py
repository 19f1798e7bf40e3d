"""Workers as local processes (`--workers N`): each runs `ShardWorker` in its own event
loop, talking to the run's owner over a pipe — rows in, reports out.

Processes are spawned, not forked: a fork would copy the owner's threads' locks (the
SQLite connections, the logging module) in whatever state they were, and spawn is also
what a Ray worker is, so a graph that runs on one runs on the other (its functions must
be importable, not defined in a notebook cell).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import signal
from contextlib import suppress
from multiprocessing.connection import Connection
from typing import Any

from ..driver import FLUSH_SECONDS
from ..errors import ConfigurationError
from .messages import RowChunk, WorkerJob, WorkerLost, WorkerReport
from .worker import ShardWorker

log = logging.getLogger("orchestrator")

JOIN_SECONDS = 10.0  # how long a worker gets to exit after its last report


def worker_main(conn: Connection, job: WorkerJob, name: str) -> None:
    """A worker process's life: serve rows until told to stop or the owner is gone."""
    # Ctrl-C reaches every process of the terminal's group; the owner decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(format=f"{name}: %(message)s", level=logging.WARNING)
    asyncio.run(_serve(conn, ShardWorker(job, name)))


async def _serve(conn: Connection, worker: ShardWorker) -> None:
    loop = asyncio.get_running_loop()
    orphaned = False

    def readable() -> None:
        nonlocal orphaned
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            # The owner died (a SIGKILL leaves no goodbye): nobody can write what finishes.
            loop.remove_reader(conn.fileno())
            orphaned = True
            worker.close(cancel=True)
            return
        if kind == "push":
            worker.push(payload)
        else:
            worker.close(cancel=bool(payload))

    worker.start()
    loop.add_reader(conn.fileno(), readable)
    try:
        while True:
            report = await worker.pull(FLUSH_SECONDS)
            if not orphaned:
                try:
                    conn.send(report)
                except OSError:
                    orphaned = True
                    worker.close(cancel=True)
            if report.final:
                return
    finally:
        if not orphaned:
            loop.remove_reader(conn.fileno())
        conn.close()


def _exit_words(code: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class ProcessLink:
    """One worker process as the owner reaches it."""

    def __init__(self, name: str, job: WorkerJob) -> None:
        self.name = name
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(
            target=worker_main, args=(child, job, name), name=f"orchestrator-{name}", daemon=True
        )
        try:
            self.process.start()
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            self._conn.close()
            raise ConfigurationError(
                f"the run's settings cannot be sent to a worker process ({exc}); a custom "
                "transport or retry policy must pickle to run with workers > 1."
            ) from None
        finally:
            child.close()
        self.pid = self.process.pid
        self._inbox: asyncio.Queue[WorkerReport | None] = asyncio.Queue()
        self._sending = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._conn.fileno(), self._readable)
        self._reading = True

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid})"

    def _readable(self) -> None:
        try:
            self._inbox.put_nowait(self._conn.recv())
        except (EOFError, OSError):
            self._stop_reading()
            self._inbox.put_nowait(None)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._conn.fileno())

    async def pull(self) -> WorkerReport:
        report = await self._inbox.get()
        if report is None:
            await asyncio.to_thread(self.process.join, JOIN_SECONDS)
            raise WorkerLost(
                f"worker process {self.describe()} died ({_exit_words(self.process.exitcode)})"
            )
        return report

    async def push(self, chunk: RowChunk) -> None:
        await self._send(("push", chunk))

    async def close(self, cancel: bool) -> None:
        await self._send(("close", cancel))

    async def _send(self, message: tuple[str, Any]) -> None:
        # From a thread: a worker busy sending its own report must never find the owner's
        # event loop blocked in a send (the two would wait on each other's pipes).
        async with self._sending:
            with suppress(OSError, ValueError):  # the worker is gone: `pull` says so
                await asyncio.to_thread(self._conn.send, message)

    async def dispose(self) -> None:
        """Wait for the process to exit (killing it if it will not) and free the pipe."""
        self._stop_reading()
        await asyncio.to_thread(self.process.join, JOIN_SECONDS)
        if self.process.is_alive():
            log.warning("%s did not exit; killing it.", self.describe())
            self.process.kill()
            await asyncio.to_thread(self.process.join, JOIN_SECONDS)
        self._conn.close()
