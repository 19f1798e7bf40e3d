"""`python -m orchestrator ARGS` for the tests, forked from an interpreter that has already
imported the libraries the CLI is built on, instead of started from nothing.

Why: CI is CPU-bound from start to end, and `orchestrator run` of the pointwise example
against the fake server took 2.6 CPU-s, about 2 of them importing openai (1.1), networkx,
typer, rich and pydantic before any work (`-X importtime`, 2026-11-29). The tests start a
few hundred of these interpreters.

What a forked child keeps the same as `python -m orchestrator`: its own pid, environment,
working folder, argv, `sys.path[0]`, stdin/stdout/stderr, exit code (a negative one when a
signal ends it), and a normal interpreter exit (atexit handlers, buffers flushed). orchestrator
itself is never preloaded: every child imports it from scratch, with its own environment.

What it could not keep, and how that is handled:
- Environment variables a preloaded library reads while it is imported (`OPENAI_LOG`;
  `COLUMNS` at typer's floor), the locale and every `PYTHON*` one the interpreter reads at
  start-up. The zygote
  records which ones it read; a command whose environment differs from the zygote's in any
  of them runs in a real process instead (`spawned` counts those).
- The string hash seed, fixed at interpreter start: children of one zygote share it, so a
  bug that depends on set order would show the same way in two runs of one test. Two zygotes
  with their own seeds take calls in turn, so two commands in a row never share a seed.

The zygote has no threads when it forks, and `gc.freeze()` keeps the preloaded objects out
of the children's collections, so they do not copy those pages.

Run as a script, this file is the zygote: `python cli_zygote.py SOCKET`.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import locale
import logging
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

# What `orchestrator`'s commands import from outside the standard library (from
# `python -X importtime -m orchestrator run …`). A library missing here is imported by the
# child as usual; one listed but not installed is skipped.
PRELOAD = (
    "openai",
    "httpx",
    "aiohttp",
    "pydantic",
    "typer",
    "typer.main",
    "click",
    "rich.console",
    "rich.table",
    "rich.progress",
    "rich.markup",
    "jinja2.sandbox",
    "networkx",
    "yaml",
    "tenacity",
    "orjson",
    "cloudpickle",
    "asyncio",
    "sqlite3",
    "concurrent.futures",
    "multiprocessing",
)
# Read by the interpreter at start-up rather than through os.environ, or by networkx while
# it walks the whole environment: a difference in these always means a real process.
ALWAYS_READ_PREFIXES = ("PYTHON", "LC_", "LANG", "NETWORKX_")
HEADER = struct.Struct("!I")


# --- the zygote ---------------------------------------------------------------------------


class _Recording(os._Environ):
    """os.environ that notes each variable read by name (not those a loop over it visits)."""

    read: set[str]

    def _note(self, key: Any) -> None:
        if sys._getframe(2).f_code.co_filename != "<frozen _collections_abc>":
            self.read.add(key)

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self._note(key)
        return super().__contains__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)


def _preload() -> list[str]:
    """Import PRELOAD; return the environment variables read while doing so."""
    plain: Any = os.environ  # its private parts, to share them with the watching copy
    recording = _Recording(
        plain._data, plain.encodekey, plain.decodekey, plain.encodevalue, plain.decodevalue
    )
    recording.read = set()
    os.environ = recording  # noqa: B003 - the same variables, only watched
    try:
        for name in PRELOAD:
            with contextlib.suppress(ImportError):
                __import__(name)
    finally:
        os.environ = plain  # noqa: B003
    return sorted(recording.read)


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("the test process went away before its request arrived")
        data += more
    (size,) = HEADER.unpack_from(data)
    return json.loads(data[HEADER.size : HEADER.size + size]), fds


def _become_the_command(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the command's stdio, folder, environment and argv."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["args"]]
    sys.path[0] = os.getcwd()  # what `python -m` puts first


def _monitor(conn: socket.socket) -> dict[str, Any]:
    """Fork the command, tell the caller its pid and then its exit code.

    Returns the request in the command's process; never returns in the monitor.
    """
    try:
        request, fds = _receive(conn)
    except Exception:
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _become_the_command(request, fds)
        return request
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # the test process went away: still wait
        conn.sendall(f"pid {pid}\n".encode())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    with contextlib.suppress(OSError):
        conn.sendall(f"exit {code}\n".encode())
    os._exit(0)


def serve(path: str) -> dict[str, Any]:
    """Preload, then fork a monitor per connection until stdin closes (the tests ended).

    Returns only in a forked command's process, with its request.
    """
    read = _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    if threading.active_count() != 1:
        raise RuntimeError("a preloaded library started a thread; forking would copy it")
    gc.collect()
    gc.freeze()
    os.write(1, (json.dumps({"read": read}) + "\n").encode())
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)
    while True:
        # Monitors are waited for, not left to the kernel, so that the commands' CPU time
        # adds up to the test process's own children time, as a real process's would.
        _reap()
        for key, _mask in selector.select(1.0):
            if key.fileobj == 0:
                if not os.read(0, 4096):
                    _reap()  # the last monitors' CPU too, before this process is waited for
                    os._exit(0)
                continue
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if os.fork() == 0:
                selector.close()
                listener.close()
                return _monitor(conn)
            conn.close()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


# --- the tests' side ------------------------------------------------------------------------

Output = int | None  # subprocess.PIPE, STDOUT, DEVNULL, a file descriptor, or None to inherit


class ForkedProcess:
    """The parts of subprocess.Popen the tests use (pid, poll, wait, signals, communicate,
    text pipes), for a command a zygote forked."""

    def __init__(
        self, args: list[str], conn: socket.socket, stdout: IO[str] | None, stderr: IO[str] | None
    ) -> None:
        self.args = args
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._conn = conn
        self._replies = b""
        self._read: dict[str, list[str]] = {}
        self._readers: list[threading.Thread] = []
        pid = None
        while pid is None:
            pid = self._receive("pid", None)
        self.pid = pid

    def _receive(self, word: str, timeout: float | None) -> int | None:
        """The number after `word` from the monitor, waiting up to `timeout` (0: not at all)."""
        while True:
            for line in self._replies.decode().split("\n")[:-1]:  # whole lines only
                said, _, number = line.partition(" ")
                if said == word:
                    return int(number)
            self._conn.settimeout(timeout)
            try:
                data = self._conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not data:
                raise RuntimeError(f"the CLI zygote lost track of `{' '.join(self.args)}`")
            self._replies += data

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._receive("exit", 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._receive("exit", timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may have been reused
            _kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Read both pipes to their end, then wait; TimeoutExpired leaves the command be."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._readers:
            for name, pipe in (("stdout", self.stdout), ("stderr", self.stderr)):
                if pipe is not None:
                    reader = threading.Thread(target=self._drain, args=(name, pipe), daemon=True)
                    reader.start()
                    self._readers.append(reader)
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._conn.close()
        return (
            "".join(self._read["stdout"]) if self.stdout is not None else None,
            "".join(self._read["stderr"]) if self.stderr is not None else None,
        )

    def _drain(self, name: str, pipe: IO[str]) -> None:
        self._read[name] = [pipe.read()]
        pipe.close()


@dataclass
class Zygote:
    """One preloaded interpreter, started with `env`, that forks the commands it is sent."""

    env: dict[str, str]
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zygote-")))
    read_at_start: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.path = str(self.folder / "socket")
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the CLI zygote exited with {self.process.wait()}")
        self.read_at_start = frozenset(json.loads(line)["read"])

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a child forked here would start as a fresh interpreter with `env` would."""
        keys = {k for k in {*env, *self.env} if k.startswith(ALWAYS_READ_PREFIXES)}
        return all(env.get(k) == self.env.get(k) for k in keys | self.read_at_start)

    def start(
        self,
        module: str,
        args: list[str],
        env: Mapping[str, str],
        cwd: str,
        stdout: Output = subprocess.PIPE,
        stderr: Output = subprocess.PIPE,
    ) -> ForkedProcess:
        """subprocess.Popen([python, -m, MODULE, *ARGS], stdout=…, stderr=…, text=True)."""
        request = json.dumps({"module": module, "args": args, "env": dict(env), "cwd": cwd})
        payload = request.encode()
        ours: list[int] = []  # what this process opened and must close once the child has it
        readers: dict[str, int] = {}

        def target(choice: Output, name: str, inherit: int) -> int:
            if choice == subprocess.PIPE:
                read, write = os.pipe()
                readers[name] = read
                ours.append(write)
                return write
            if choice == subprocess.DEVNULL:
                ours.append(os.open(os.devnull, os.O_WRONLY))
                return ours[-1]
            return inherit if choice is None else choice

        null = os.open(os.devnull, os.O_RDONLY)
        ours.append(null)
        out = target(stdout, "stdout", 1)
        err = out if stderr == subprocess.STDOUT else target(stderr, "stderr", 2)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            message = HEADER.pack(len(payload)) + payload
            sent = socket.send_fds(conn, [message], [null, out, err])
            conn.sendall(message[sent:])
        except OSError:
            conn.close()
            for fd in (*ours, *readers.values()):
                os.close(fd)
            raise
        for fd in ours:
            os.close(fd)
        encoding = locale.getpreferredencoding(False)  # what subprocess's text mode uses
        pipes = {name: open(fd, encoding=encoding) for name, fd in readers.items()}  # noqa: SIM115
        command = [sys.executable, "-m", module, *args]
        return ForkedProcess(command, conn, pipes.get("stdout"), pipes.get("stderr"))

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        Path(self.path).unlink(missing_ok=True)
        self.folder.rmdir()


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


class Zygotes:
    """The zygotes of one test process, taking calls in turn; started on first use."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.zygotes: list[Zygote] = []
        self.turn: Iterator[int] = itertools.cycle(range(count))
        self.lock = threading.Lock()
        self.forked = 0
        self.spawned = 0

    def _next(self, env: Mapping[str, str]) -> Zygote | None:
        with self.lock:
            if not self.zygotes:
                self.zygotes = [Zygote(dict(env)) for _ in range(self.count)]
            zygote = self.zygotes[next(self.turn)]
        if zygote.process.poll() is None and zygote.serves(env):
            return zygote
        return None

    def start(
        self,
        module: str,
        args: list[str],
        env: Mapping[str, str],
        cwd: str | Path | None = None,
        stdout: Output = subprocess.PIPE,
        stderr: Output = subprocess.PIPE,
    ) -> ForkedProcess | subprocess.Popen[str]:
        """`python -m MODULE ARGS` with `env`, as subprocess.Popen(…, text=True) starts it."""
        zygote = self._next(env)
        folder = str(cwd or os.getcwd())
        if zygote is not None:
            try:
                process = zygote.start(module, args, env, folder, stdout, stderr)
            except (OSError, RuntimeError) as exc:
                log.warning("the CLI zygote failed (%s); starting a new interpreter", exc)
            else:
                self.forked += 1
                return process
        self.spawned += 1
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=stdout,
            stderr=stderr,
            text=True,
            env=dict(env),
            cwd=folder,
        )

    def run(
        self,
        module: str,
        args: list[str],
        env: Mapping[str, str],
        cwd: str | Path | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """subprocess.run([python, -m, MODULE, *ARGS], capture_output=True, text=True, …)."""
        process = self.start(module, args, env, cwd)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        assert process.returncode is not None
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def close(self) -> None:
        with self.lock:
            for zygote in self.zygotes:
                zygote.close()
            self.zygotes = []


if __name__ == "__main__":
    import runpy

    # Only a forked command gets past serve(): it runs as `python -m MODULE` would, and its
    # exceptions and exit code end this interpreter as they would end that one.
    request = serve(sys.argv[1])
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
