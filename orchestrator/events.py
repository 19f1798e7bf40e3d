"""Run events: what happened to a run's servers and workers while it ran, as typed records.

A server that stops answering, one that comes back, a replica that leaves or rejoins the
rotation, an in-flight limit that moves, a worker that is lost: each is one frozen record
with the time it happened (`at`, wall clock), where (a server URL or a worker) and the facts.
The place it happens emits it into the run's one sink (`RunEvents`), which logs its line
(`describe()`, at the level the record carries), keeps it for the manifest (whose `outages`
are derived from these records) and hands it to whoever subscribed (the progress bar).

Every record pickles, so a worker's events travel back to the run's owner in its reports.
This module sits at the bottom of the layers (beside `errors`), so calls/ and scale/ emit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

log = logging.getLogger(__name__)


def _now() -> float:
    return time.time()


_COMMON = frozenset({"at", "worker"})


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent:
    """Something that happened during a run, at `at` (seconds since the epoch), in the
    worker named `worker` ("" for the run's own process)."""

    level: ClassVar[int] = logging.INFO
    kind: ClassVar[str] = "event"  # its name in manifest.json
    at: float = field(default_factory=_now)
    worker: str = ""

    def describe(self) -> str:
        """The event as its log line says it."""
        raise NotImplementedError

    def log_level(self) -> int:
        """The level its log line is written at (a kind may choose it from its facts)."""
        return self.level

    def facts(self) -> dict[str, Any]:
        """Its own fields (not when or in which worker), as the manifest keeps them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _COMMON}

    @property
    def place(self) -> str:
        """Where it happened: a server's URL or a worker's name."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerEvent(RunEvent):
    """An event of one server URL."""

    url: str

    @property
    def place(self) -> str:
        return self.url


@dataclass(frozen=True, slots=True, kw_only=True)
class OutageStarted(ServerEvent):
    """A server stopped answering its probe: an outage opens (closed by `OutageEnded`)."""

    level: ClassVar[int] = logging.WARNING


@dataclass(frozen=True, slots=True, kw_only=True)
class OutageEnded(ServerEvent):
    """The outage of `url` that was open is over after `seconds`: it answers again
    (`recovered`), or the run stopped waiting for it."""

    level: ClassVar[int] = logging.WARNING
    seconds: float
    recovered: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerDown(OutageStarted):
    """The one server of an endpoint does not answer: every call waits for it, up to
    `patience` seconds (--server-wait)."""

    kind: ClassVar[str] = "server down"
    patience: float

    def describe(self) -> str:
        return (
            f"{self.url} does not answer; waiting up to {self.patience:.0f} s for it to come "
            "back (--server-wait)."
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerBack(OutageEnded):
    """The server answers again after `seconds`; the calls that waited go on."""

    kind: ClassVar[str] = "server back"

    def describe(self) -> str:
        return f"{self.url} is back after {self.seconds:.1f} s; going on."


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerGaveUp(OutageEnded):
    """The server stayed silent past the patience: the run stops with ServerGone, whose
    message (the same words) is what the user sees, so the log line is only DEBUG."""

    kind: ClassVar[str] = "server gone"
    level: ClassVar[int] = logging.DEBUG
    recovered: bool = False
    patience: float

    def describe(self) -> str:
        return (
            f"{self.url} did not answer for {self.seconds:.0f} s (--server-wait "
            f"{self.patience:.0f})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerProcessExited(OutageEnded):
    """The server process this command started exited: it cannot come back, so nothing
    waits for it; the run stops with ServerExited, whose message (the same words) the user
    sees, so the log line is only DEBUG."""

    kind: ClassVar[str] = "server exited"
    level: ClassVar[int] = logging.DEBUG
    recovered: bool = False
    seconds: float = 0.0
    why: str

    def describe(self) -> str:
        return self.why


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaLeft(OutageStarted):
    """A replica does not answer and leaves the rotation; `left` of `of` replicas remain."""

    kind: ClassVar[str] = "replica left"
    left: int
    of: int

    def describe(self) -> str:
        return (
            f"{self.url} does not answer; out of rotation, {self.left} of {self.of} replicas left."
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaJoined(OutageEnded):
    """A replica that left answers again after `seconds` and is back in rotation."""

    kind: ClassVar[str] = "replica joined"

    def describe(self) -> str:
        return f"{self.url} answers again after {self.seconds:.1f} s; back in rotation."


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaRefused(ServerEvent):
    """A replica answers again but may not rejoin (it serves other weights): it stays out
    for the rest of the run; `reason` says why and what to do."""

    kind: ClassVar[str] = "replica refused"
    level: ClassVar[int] = logging.ERROR
    reason: str

    def describe(self) -> str:
        return self.reason


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitChanged(ServerEvent):
    """A server's in-flight limit was set to `limit` (`reason`: the flag, the start, or the
    tuner's verdict), `t` seconds after the server joined the run. Frequent under auto
    concurrency, so DEBUG: the manifest keeps them per server under `replicas`, and the
    progress bar shows the limits now."""

    kind: ClassVar[str] = "limit changed"
    level: ClassVar[int] = logging.DEBUG
    limit: int
    reason: str
    t: float = 0.0

    def describe(self) -> str:
        return f"{self.url}: in-flight limit {self.limit} ({self.reason})."


@dataclass(frozen=True, slots=True, kw_only=True)
class TunedByLatency(ServerEvent):
    """A server's limit is tuned by reply latency from now on: it publishes no vLLM
    /metrics (`failures` 0), or they were unreadable `failures` times in a row."""

    kind: ClassVar[str] = "tuned by latency"
    failures: int = 0

    def log_level(self) -> int:
        # Metrics that stopped being readable are news; no metrics at all is a choice.
        return logging.WARNING if self.failures else logging.INFO

    def describe(self) -> str:
        if self.failures:
            return (
                f"{self.url}: /metrics unreadable {self.failures} times in a row; tuning its "
                "limit by latency from now on"
            )
        return f"{self.url} publishes no vLLM /metrics; tuning its limit by latency"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerLost(RunEvent):
    """A worker of a scaled-out run died (`cause`); its `in_flight` examples are lost and
    the run stops once the others finish theirs. (The error of the same name, raised
    after, is `orchestrator.errors.WorkerLost`.)"""

    kind: ClassVar[str] = "worker lost"
    level: ClassVar[int] = logging.WARNING
    cause: str
    in_flight: int

    @property
    def place(self) -> str:
        return self.worker

    def describe(self) -> str:
        return f"{self.cause}; its {self.in_flight} examples in flight are lost."


Subscriber = Callable[[RunEvent], None]


class RunEvents:
    """The run's one sink of events: each is logged, kept and handed to the subscribers.

    Not thread-safe by design: a run's events are emitted on its event loop.
    """

    def __init__(self) -> None:
        self.records: list[RunEvent] = []
        self._subscribers: list[Subscriber] = []
        self._taken = 0  # records handed on by `take_new` (a worker's reports)

    def emit(self, event: RunEvent, logger: logging.Logger | None = None) -> None:
        """Log `event` through `logger` (the emitting module's, so a program that tunes
        that module's logger hears it as before; default: this module's), keep it, and
        hand it to every subscriber."""
        (logger or log).log(event.log_level(), "%s", event.describe())
        self._keep(event)

    def adopt(self, events: Iterable[RunEvent], worker: str) -> None:
        """Keep and hand on events a worker emitted (and logged where it runs), marked as
        its own: each worker watches the servers on its own."""
        for event in events:
            self._keep(replace(event, worker=worker))

    def _keep(self, event: RunEvent) -> None:
        self.records.append(event)
        for subscriber in list(self._subscribers):
            subscriber(event)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber` with every event from now on; returns what unsubscribes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def notable(self) -> list[RunEvent]:
        """The events the manifest's `events` lists: all but limit changes, which can come
        every second and which the manifest has per server under `replicas`."""
        return [event for event in self.records if not isinstance(event, LimitChanged)]

    def take_new(self) -> list[RunEvent]:
        """The events kept since the last call (what a worker's next report carries)."""
        new = self.records[self._taken :]
        self._taken = len(self.records)
        return new

    def outages(self) -> list[dict[str, Any]]:
        """Every stretch a server did not answer, as the manifest's `outages` list writes
        them: grouped by URL in the order the URLs first went down, an outage still open
        counted up to now."""
        # One watch per (process, URL) opens and closes its outages one at a time.
        by_watch: dict[tuple[str, str], list[dict[str, Any]]] = {}
        open_since: dict[tuple[str, str], float] = {}
        for event in self.records:
            watch = (event.worker, event.place)
            if isinstance(event, OutageStarted):
                open_since[watch] = event.at
                by_watch.setdefault(watch, []).append(
                    {"base_url": event.url, "seconds": 0.0, "recovered": False}
                )
            elif isinstance(event, OutageEnded) and watch in open_since:
                del open_since[watch]
                by_watch[watch][-1].update(
                    seconds=round(event.seconds, 2), recovered=event.recovered
                )
        for watch, since in open_since.items():
            by_watch[watch][-1]["seconds"] = round(max(_now() - since, 0.0), 2)
        return [outage for outages in by_watch.values() for outage in outages]
