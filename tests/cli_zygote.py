"""`python -m orchestrator ARGS` for the tests, forked from an interpreter that has already
imported the libraries the CLI is built on, instead of started from nothing.

Why: CI is CPU-bound from start to end, and a small `orchestrator run` spent about 1.8 of
its 2.4 CPU-s importing openai (1.1), networkx, typer, rich and pydantic before doing any
work (`-X importtime`, 2026-11-29). The tests start a few hundred of these interpreters.

What a forked child keeps the same as `python -m orchestrator`: its own pid, environment,
working folder, argv, `sys.path[0]`, stdin/stdout/stderr, exit code (a negative one when a
signal ends it), and a normal interpreter exit (atexit handlers, buffers flushed). orchestrator
itself is never preloaded: every child imports it from scratch, with its own environment.

What it could not keep, and how that is handled:
- Environment variables a preloaded library reads while it is imported (`OPENAI_LOG`,
  `TERM`, the locale, every `PYTHON*` one the interpreter reads at start-up). The zygote
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
from typing import Any

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


def _monitor(conn: socket.socket) -> dict[str, Any] | None:
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
                    os._exit(0)
                continue
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if os.fork() == 0:
                selector.close()
                listener.close()
                request = _monitor(conn)
                assert request is not None
                return request
            conn.close()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


# --- the tests' side ------------------------------------------------------------------------


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

    def run(
        self, module: str, args: list[str], env: Mapping[str, str], cwd: str, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """subprocess.run(…, capture_output=True, text=True, timeout=timeout) for one command."""
        command = [sys.executable, "-m", module, *args]
        request = json.dumps({"module": module, "args": args, "env": dict(env), "cwd": cwd})
        payload = request.encode()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            message = HEADER.pack(len(payload)) + payload
            sent = socket.send_fds(conn, [message], [null, out_w, err_w])
            conn.sendall(message[sent:])
        except OSError:
            for fd in (out_r, out_w, err_r, err_w, null):
                os.close(fd)
            conn.close()
            raise
        for fd in (out_w, err_w, null):
            os.close(fd)
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        replies = b""
        pid: int | None = None
        code: int | None = None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector, conn:
            for fd in (out_r, err_r):
                selector.register(fd, selectors.EVENT_READ)
            selector.register(conn, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    if pid is not None:
                        _kill(pid)
                    for fd in (out_r, err_r):
                        os.close(fd)
                    raise subprocess.TimeoutExpired(
                        command, timeout, b"".join(chunks[out_r]), b"".join(chunks[err_r])
                    )
                for key, _mask in selector.select(left):
                    if key.fileobj is conn:
                        data = conn.recv(4096)
                        replies += data
                        pid, code = _parse(replies)
                        if not data:
                            selector.unregister(conn)
                        continue
                    fd = key.fd
                    data = os.read(fd, 1 << 16)
                    if data:
                        chunks[fd].append(data)
                    else:
                        selector.unregister(fd)
                        os.close(fd)
        if code is None:
            raise RuntimeError(f"the CLI zygote lost track of `{' '.join(command)}`")
        return subprocess.CompletedProcess(
            command, code, _text(b"".join(chunks[out_r])), _text(b"".join(chunks[err_r]))
        )

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


def _parse(replies: bytes) -> tuple[int | None, int | None]:
    pid = code = None
    for line in replies.decode().splitlines():
        word, _, number = line.partition(" ")
        if word == "pid":
            pid = int(number)
        elif word == "exit":
            code = int(number)
    return pid, code


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _text(data: bytes) -> str:
    # What subprocess's text mode does: the locale's encoding, universal newlines.
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


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

    def run(
        self,
        module: str,
        args: list[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """`python -m MODULE ARGS` with `env`, output captured as text."""
        zygote = self._next(env)
        folder = cwd or os.getcwd()
        if zygote is not None:
            try:
                result = zygote.run(module, args, env, folder, timeout)
            except (OSError, RuntimeError) as exc:
                log.warning("the CLI zygote failed (%s); running a new interpreter", exc)
            else:
                self.forked += 1
                return result
        self.spawned += 1
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env),
            cwd=folder,
        )

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
