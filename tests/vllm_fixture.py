"""Starting the test session's real vLLM server so that a wait is never silent.

A CPU start takes minutes (a first one downloads and converts the model too); under pytest's
capture a session that says nothing looks hung. `start_for_tests` passes each phase
`start_server` logs on to `say`, and while the start is under way says every `every` seconds
how long it has waited and in which phase; a start that fails raises ServerDidNotStart with
the server log's last lines. tests/integration/conftest.py says through `terminal_say`: the
terminal reporter with capture suspended, so the lines show under `-q` (a write to
`sys.__stderr__` goes to the captured descriptor and is shown only with a failure).
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import pytest

from orchestrator.errors import EmbeddedServerError, PortTaken
from orchestrator.local.server import EmbeddedServer, start_server

Say = Callable[[str], None]

WAIT_SAY_SECONDS = 10.0  # how often a start still under way says so
TAIL_LINES = 30  # lines of the server log a failed start shows
_LOG_LINE = re.compile(r"vLLM log: (.+)$")
_ELAPSED = re.compile(r"^\[\d+ s\] ")


class ServerDidNotStart(Exception):
    """The session's vLLM did not come up; the message ends with its log's last lines."""


def terminal_say(config: pytest.Config) -> Say:
    """A line on pytest's own output, shown whatever the capture and `-q`."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capture = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        if reporter is None or capture is None:
            print(line, flush=True)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    return say


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log file ("" when it cannot be read)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""


class StartWatch:
    """`start_server`'s log: passes each phase on, keeps the latest, and while open says
    every `every` seconds that the start of the server on `port` is still under way."""

    def __init__(self, port: int, say: Say, every: float = WAIT_SAY_SECONDS) -> None:
        self.port, self.say, self.every = port, say, every
        self.phase = "not begun"
        self.log_path: Path | None = None
        self.began = time.monotonic()
        self._done = threading.Event()
        self._beat = threading.Thread(target=self._say_waiting, daemon=True)

    def __call__(self, message: str) -> None:
        self.phase = _ELAPSED.sub("", message)
        found = _LOG_LINE.search(self.phase)
        if found:
            self.log_path = Path(found.group(1))
        self.say(f"[embedded server] {message}")

    def waiting_line(self) -> str:
        """What a start still under way says: port, seconds so far, the phase it is in."""
        seconds = time.monotonic() - self.began
        return f"waiting for vLLM on port {self.port}: {seconds:.0f} s, phase: {self.phase}"

    def _say_waiting(self) -> None:
        while not self._done.wait(self.every):
            self.say(self.waiting_line())

    def __enter__(self) -> StartWatch:
        self.began = time.monotonic()
        self._beat.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        self._beat.join()

    def failure(self, exc: BaseException) -> str:
        """Why the start failed, with the server log's last lines (once: the library's
        message already carries them when the server got as far as writing one)."""
        text = f"vLLM on port {self.port} did not start (phase: {self.phase}): {exc}"
        if self.log_path is not None and "--- last lines of" not in text:
            text += f"\n--- last lines of {self.log_path} ---\n{log_tail(self.log_path)}"
        return text


def start_for_tests(
    port: int, say: Say, *, timeout: float = 600, every: float = WAIT_SAY_SECONDS
) -> EmbeddedServer:
    """The embedded server on `port`, its start said as it goes (see the module's text);
    PortTaken as `start_server` raises it, ServerDidNotStart for any other failure."""
    with StartWatch(port, say, every) as watch:
        try:
            return start_server(port=port, log=watch, startup_timeout=timeout)
        except PortTaken:
            raise
        except EmbeddedServerError as exc:
            # The library's message is in it: chained, pytest would print it twice.
            raise ServerDidNotStart(watch.failure(exc)) from None
