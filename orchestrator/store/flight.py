"""What a run has in flight now: node runs started and not finished, and the try each is on.

The engine notes a node run as it starts and drops it as it ends (`Flights`); the call layer
notes each try as it is sent (`note_try`, through a context variable, so no layer has to
pass the node run down). Nothing is written per start: the trace's one flusher writes the
whole set, in the transaction of its next batch, and only when it changed (TraceStore.flush),
so `orchestrator status` on a live run can say what is in flight and for how long. A run
that ends empties the set; a killed one leaves its last set, which readers tell from a live
one by the run lock (`lock.holder_alive`), and the next run of the folder clears.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from .records import WHOLE, Attempt

__all__ = ["CURRENT", "Flight", "Flights", "InFlight", "note_try", "timed_out"]


class InFlight(BaseModel):
    """One node run in flight as the trace's `in_flight` table keeps it: which run, example,
    node and foreach item, when it started, the node's server, the try it is on (0: not sent
    yet, waiting for a slot or for an identical request already in flight), when that try
    was sent and to which replica, and the tries that failed so far."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    example_id: str
    node: str
    item: int = WHOLE
    started: float
    server: str | None = None
    attempt: int = 0
    attempt_started: float | None = None
    replica: str | None = None
    failed: list[Attempt] = Field(default_factory=list)


# One `in_flight` row: InFlight's fields in their order, `failed` as JSON bytes or None.
Row = tuple[Any, ...]


@dataclass(slots=True, eq=False)
class Flight:
    """A node run in flight, as this process knows it (mutated as its tries are sent)."""

    flights: Flights
    example_id: str
    node: str
    item: int
    server: str | None
    started: float = field(default_factory=time.time)
    tries: int = 0
    try_started: float | None = None
    replica: str | None = None
    # The call's attempt list (the layer below appends each failed try to it): read when
    # the set is written, so a timeout shows while its node run is still retrying.
    attempts: list[Attempt] | None = None

    def row(self, run_id: str) -> Row:
        """This node run as the trace's `in_flight` row (InFlight's fields in order), its
        failed tries as they stand now, as JSON (NULL for none). A plain tuple: the set is
        rewritten whole at a flush, and a model per row cost ten times the write."""
        failed = [
            a.model_dump(exclude_none=True)
            for a in self.attempts or ()
            if a.kind not in ("ok", "cache")
        ]
        return (
            run_id,
            self.example_id,
            self.node,
            self.item,
            self.started,
            self.server,
            self.tries,
            self.try_started,
            self.replica,
            orjson.dumps(failed) if failed else None,
        )


class Flights:
    """The node runs in flight in this process, and those each worker process last reported
    (`adopt`); `changed` says the trace's copy is stale."""

    def __init__(self) -> None:
        self._live: dict[int, Flight] = {}
        self._workers: dict[str, list[Row]] = {}
        self.changed = False

    def begin(self, example_id: str, node: str, item: int, server: str | None) -> Flight:
        """Note a node run that starts now."""
        flight = Flight(self, example_id, node, item, server)
        self._live[id(flight)] = flight
        self.changed = True
        return flight

    def end(self, flight: Flight) -> None:
        """Drop a node run that finished (however it finished)."""
        if self._live.pop(id(flight), None) is not None:
            self.changed = True

    def adopt(self, source: str, rows: list[Row]) -> None:
        """A worker's node runs in flight as it last reported them (replacing its earlier
        report): the run's owner writes them with its own."""
        self._workers[source] = rows
        self.changed = True

    def clear(self) -> None:
        """Forget every node run: the run is over, nothing of it is in flight any more."""
        self._live.clear()
        self._workers.clear()
        self.changed = True

    def __len__(self) -> int:
        return len(self._live) + sum(map(len, self._workers.values()))

    def rows(self, run_id: str) -> list[Row]:
        """The set as it stands, this process's and its workers', as `in_flight` rows."""
        rows = [f.row(run_id) for f in self._live.values()]
        for adopted in self._workers.values():
            rows.extend(adopted)
        return rows


# The node run the current task is executing (set by the engine around a node's execute;
# each asyncio task starts with a copy, so concurrent node runs never see each other's).
CURRENT: ContextVar[Flight | None] = ContextVar("orchestrator_flight", default=None)


def note_try(replica: str | None, attempts: list[Attempt] | None) -> None:
    """A try of the current node run's call is sent now, to `replica`; its failed tries are
    appended to `attempts`. Costs a context-variable read where no node run is current."""
    flight = CURRENT.get()
    if flight is None:
        return
    flight.tries += 1
    flight.try_started = time.time()
    flight.replica = replica
    if attempts is not None:
        flight.attempts = attempts
    flight.flights.changed = True


def timed_out(attempt: Attempt) -> bool:
    """Whether a failed try is one that got no complete reply within the run's --timeout."""
    return attempt.kind == "transport" and (attempt.error or "").startswith("timed out")
