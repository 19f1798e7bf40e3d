"""Workers as local processes (`--workers N`): each runs `ShardWorker` in its own event
loop, talking to the run's owner over a `MessagePipe` — rows in, reports out.

Workers are forked from multiprocessing's fork server, never from the owner: a fork of the
owner would copy its threads' locks (the SQLite connections, the logging module) in
whatever state they were. The fork server is a clean process that imports orchestrator once
(`PRELOAD`), so the first run with workers in a Python session pays that import and every
later run's workers start without it. Like a Ray worker, a worker imports the user's
modules afresh: the kinds and functions registered in the owner come with the graph
(messages.GraphRecipe), a function named by module path must be importable; and it
takes the owner's environment as it is when the run starts (see `worker_main`).
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import logging
import multiprocessing
import multiprocessing.spawn
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType

from ..engine import FLUSH_SECONDS
from ..errors import ConfigurationError
from .messages import RowChunk, WorkerJob, WorkerLost, WorkerReport
from .pipes import MessagePipe
from .worker import ShardWorker

log = logging.getLogger(__name__)

JOIN_SECONDS = 10.0  # how long a worker gets to exit after its last report
PRELOAD = ["orchestrator.scale.processes"]  # what the fork server imports for every worker


def _reimported_main() -> Path | None:
    """The file a worker process runs again as `__mp_main__` while it starts (the user's
    script), or None when none is (an interactive session, `python -m package`)."""
    # multiprocessing's own account of what a child re-imports, so the two cannot differ.
    data = multiprocessing.spawn.get_preparation_data("probe")
    if "init_main_from_path" in data:
        return Path(data["init_main_from_path"])
    name = data.get("init_main_from_name")
    if name is None or name == "__main__" or name.endswith(".__main__"):
        return None  # a package's __main__ is never re-imported (spawn._fixup_main_from_name)
    spec = importlib.util.find_spec(name)
    return Path(spec.origin) if spec is not None and spec.origin else None


def _main_module_frame() -> FrameType | None:
    """The frame running `__main__`'s top level, if this call comes from there."""
    main = sys.modules.get("__main__")
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        if (
            main is not None
            and frame.f_code.co_name == "<module>"
            and frame.f_globals is vars(main)
        ):
            return frame
        frame = frame.f_back
    return None


def _is_main_guard(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either way round, or any `if` testing `__name__`)."""
    return isinstance(statement, ast.If) and any(
        isinstance(node, ast.Name) and node.id == "__name__" for node in ast.walk(statement.test)
    )


def _unguarded_line() -> tuple[Path, int] | None:
    """Where the user's script starts a run with workers outside an `if __name__ ==
    "__main__":` block: (script, line), or None when it is guarded or no script is re-run."""
    script, frame = _reimported_main(), _main_module_frame()
    if script is None or frame is None:
        return None
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None  # nothing to read: the worker's own check still catches it
    line = frame.f_lineno
    for statement in tree.body:
        end = statement.end_lineno or statement.lineno
        if statement.lineno <= line <= end:
            return None if _is_main_guard(statement) else (script, line)
    return None


def _guard_error(where: str) -> ConfigurationError:
    return ConfigurationError(
        f"{where} starts a run with worker processes at the top level of the script, "
        'without an `if __name__ == "__main__":` guard. Each worker process imports the '
        "script again as it starts, which would start the run again inside the worker. Put "
        'the call under the guard:\n\n    if __name__ == "__main__":\n        '
        "orc.run(...)\n"
    )


def check_main_guard() -> None:
    """Refuse, before any worker process starts, a script that calls `orc.run(...,
    workers=N)` outside an `if __name__ == "__main__":` guard: its workers would run it
    again while starting and fail with an error that names neither cause nor fix."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # This process is a worker importing the script: the owner's check could not read it.
        raise _guard_error("the script")
    found = _unguarded_line()
    if found is not None:
        script, line = found
        raise _guard_error(f"{script}, line {line},")


def worker_main(
    rows: Connection, reports: Connection, job: WorkerJob, name: str, environ: dict[str, str]
) -> None:
    """A worker process's life: serve rows until told to stop or the owner is gone."""
    # The fork server's environment is the owner's when the server started, which may be
    # several runs ago: a variable set since (a key, a metric's setting) must reach workers.
    os.environ.clear()
    os.environ.update(environ)
    # Ctrl-C reaches every process of the terminal's group; the owner decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(format=f"{name}: %(message)s", level=logging.WARNING)
    asyncio.run(_serve(rows, reports, ShardWorker(job, name)))


async def _serve(rows: Connection, reports: Connection, worker: ShardWorker) -> None:
    pipe = await MessagePipe.open(rows, reports)
    worker.start()

    async def listen() -> None:
        while True:
            try:
                kind, payload = await pipe.receive()
            except EOFError:
                # The owner died (a SIGKILL leaves no goodbye): nobody can write what
                # finishes, so the rows in flight are given up.
                worker.close(cancel=True)
                return
            if kind == "push":
                worker.push(payload)
            else:
                worker.close(cancel=bool(payload))

    listener = asyncio.create_task(listen())
    try:
        while True:
            report = await worker.pull(FLUSH_SECONDS)
            if not pipe.send(report):
                worker.close(cancel=True)
            if report.final:
                return
    finally:
        listener.cancel()
        await pipe.close()


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
    """One worker process as the owner reaches it (made by `start`)."""

    def __init__(self, name: str, process: multiprocessing.process.BaseProcess) -> None:
        self.name, self.process = name, process
        self.pid = process.pid
        self._pipe: MessagePipe | None = None

    @classmethod
    async def start(cls, name: str, job: WorkerJob) -> ProcessLink:
        check_main_guard()
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)  # read only when the server first starts
        rows_out, rows_in = context.Pipe(duplex=False)  # (read end, write end)
        reports_out, reports_in = context.Pipe(duplex=False)
        process = context.Process(
            target=worker_main,
            args=(rows_out, reports_in, job, name, dict(os.environ)),
            name=f"orchestrator-{name}",
            daemon=True,
        )
        try:
            process.start()
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            for end in (rows_in, reports_out):
                end.close()
            raise ConfigurationError(
                f"the run's settings cannot be sent to a worker process ({exc}); a custom "
                "transport or retry policy must pickle to run with workers > 1."
            ) from None
        finally:
            for end in (rows_out, reports_in):  # the child's ends, now the child's own
                end.close()
        link = cls(name, process)
        link._pipe = await MessagePipe.open(reports_out, rows_in)
        return link

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid})"

    async def pull(self) -> WorkerReport:
        assert self._pipe is not None
        try:
            report: WorkerReport = await self._pipe.receive()
        except EOFError:
            await asyncio.to_thread(self.process.join, JOIN_SECONDS)
            raise WorkerLost(
                f"worker process {self.describe()} died ({_exit_words(self.process.exitcode)})"
            ) from None
        return report

    async def push(self, chunk: RowChunk) -> None:
        assert self._pipe is not None
        self._pipe.send(("push", chunk))  # a worker gone is what `pull` reports

    async def close(self, cancel: bool) -> None:
        if self._pipe is not None:
            self._pipe.send(("close", cancel))

    async def dispose(self) -> None:
        """Wait for the process to exit (killing it if it will not) and free the pipes."""
        await asyncio.to_thread(self.process.join, JOIN_SECONDS)
        if self.process.is_alive():
            log.warning("%s did not exit; killing it.", self.describe())
            self.process.kill()
            await asyncio.to_thread(self.process.join, JOIN_SECONDS)
        if self._pipe is not None:
            await self._pipe.close()
