"""A request to a set of replicas waits for the first free slot on any live replica, not
for the slot of the replica it happened to be routed to: first come first served, each slot
granted once (a replica may belong to two sets), cancellation leaks no slot, a replica back
in rotation or given a higher limit takes requests already waiting. The last two tests run
on real sockets against a replica that stalls."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, user_text, write_graph
from test_replicas import (
    PROMPTS,
    WAIT,
    attempt_replicas,
    node_requests,
    rows,
    start_run,
    until,
)

import orchestrator as orc
from orchestrator.servers.limiter import Limiter
from orchestrator.servers.outage import ServerGone, ServerWatch
from orchestrator.servers.replicas import Replica, ReplicaSet


class Probe:
    """A replica's probe whose answer the test sets."""

    def __init__(self) -> None:
        self.answers = True

    async def __call__(self) -> bool:
        return self.answers


async def no_metrics() -> str | None:
    return None


def replica(name: str, limit: int, probe: Probe | None = None) -> Replica:
    watch = ServerWatch(name, probe or Probe(), 1.0)
    return Replica(f"http://{name}/v1", Limiter(limit), watch, no_metrics)


def replica_set(*replicas: Replica, patience: float = 5.0) -> ReplicaSet:
    return ReplicaSet(list(replicas), patience, affinity=False)


def hold(target: Replica, slots: int) -> None:
    """Take `slots` of the replica's slots, as requests in flight there would."""
    for _ in range(slots):
        assert target.limit.try_acquire()


async def queue(replicas: ReplicaSet, count: int) -> list[asyncio.Task[Replica]]:
    """`count` requests waiting in the set's queue, in this order."""
    tasks = []
    for _ in range(count):
        tasks.append(asyncio.ensure_future(replicas.acquire()))
        await asyncio.sleep(0)
    assert replicas.waiting >= count
    return tasks


# -- the limiter ----------------------------------------------------------------------


async def test_try_acquire_takes_a_free_slot_or_fails_at_once():
    limiter = Limiter(1)
    assert not limiter.saturated
    assert limiter.try_acquire() and limiter.saturated  # every slot taken
    assert not limiter.try_acquire() and limiter.active == 1
    waiter = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0)
    limiter.release()  # the waiter was first: the slot is its, not try_acquire's
    assert not limiter.try_acquire()
    await waiter
    limiter.release()
    assert limiter.try_acquire() and limiter.active == 1


async def test_listeners_hear_of_a_slot_no_waiter_of_the_limiter_wants():
    limiter = Limiter(2)
    heard: list[int] = []
    limiter.listeners.append(lambda: heard.append(limiter.active))
    await limiter.acquire()
    await limiter.acquire()
    waiter = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0)
    limiter.release()  # the limiter's own waiter takes the slot: nothing to tell
    assert heard == [] and limiter.active == 2
    await waiter
    limiter.set_limit(1)  # a cut with two in flight
    limiter.release()  # one in flight, limit one: still no room
    limiter.wake()
    assert heard == []
    limiter.release()
    limiter.set_limit(3)
    limiter.wake()
    assert heard == [0, 0, 0]


# -- one queue for the set ------------------------------------------------------------


async def test_requests_take_the_first_slot_that_frees_on_any_replica_in_order():
    a, b = replica("a", 1), replica("b", 1)
    replicas = replica_set(a, b)
    assert [await replicas.acquire(), await replicas.acquire()] == [a, b]
    first, second, third = await queue(replicas, 3)
    assert a.limit.waiting == b.limit.waiting == 0  # they wait on the set, not a replica
    b.limit.release()
    assert await first is b and not second.done()
    a.limit.release()
    assert await second is a and not third.done()
    b.limit.release()
    assert await third is b
    a.limit.release(), b.limit.release()
    assert (a.limit.active, b.limit.active, replicas.waiting) == (0, 0, 0)


async def test_a_replica_in_two_sets_grants_each_slot_once_and_lets_both_take_turns():
    a, shared, c = replica("a", 1), replica("shared", 1), replica("c", 1)
    left, right = replica_set(a, shared), replica_set(shared, c)
    hold(a, 1), hold(shared, 1), hold(c, 1)
    queued = {"left": await queue(left, 5), "right": await queue(right, 5)}
    turns: list[str] = []
    for _ in range(10):
        shared.limit.release()
        assert shared.limit.active == 1  # one of the two sets took it, not both
        await asyncio.sleep(0)
        done = [(side, t) for side, tasks in queued.items() for t in tasks if t.done()]
        assert len(done) == 1
        side, task = done[0]
        assert task.result() is shared
        queued[side].remove(task)
        turns.append(side)
    assert left.waiting == right.waiting == 0
    # Neither set kept the shared slot to itself while the other had a queue.
    assert turns.count("left") == turns.count("right") == 5
    for target in (a, shared, c):
        target.limit.release()
        assert target.limit.active == 0
    await left.close(), await right.close()
    assert shared.limit.listeners == []


async def test_a_request_cancelled_while_queued_leaves_the_queue():
    a, b = replica("a", 1), replica("b", 1)
    replicas = replica_set(a, b)
    hold(a, 1), hold(b, 1)
    gone, next_one = await queue(replicas, 2)
    gone.cancel()
    await asyncio.sleep(0)
    assert gone.cancelled() and replicas.waiting == 1
    a.limit.release()
    assert await next_one is a
    a.limit.release(), b.limit.release()
    assert a.limit.active == b.limit.active == 0


async def test_a_request_cancelled_as_it_is_granted_hands_the_slot_on():
    a, b = replica("a", 1), replica("b", 1)
    replicas = replica_set(a, b)
    hold(a, 1), hold(b, 1)
    granted, behind = await queue(replicas, 2)
    a.limit.release()  # grants the first at once; its task has not seen it yet
    granted.cancel()
    await asyncio.gather(granted, return_exceptions=True)
    assert granted.cancelled()
    assert await behind is a and a.limit.active == 1
    a.limit.release(), b.limit.release()
    assert a.limit.active == b.limit.active == replicas.waiting == 0


async def test_a_cancelled_request_passed_over_by_a_grant_ends_cancelled():
    """A kill cancels every waiting call at once: a grant in the same tick drops the
    cancelled one and serves the next. The call must end cancelled, not with an error."""
    a, b = replica("a", 1), replica("b", 1)
    replicas = replica_set(a, b)
    hold(a, 1), hold(b, 1)
    cancelled, behind = await queue(replicas, 2)
    cancelled.cancel()  # its future is cancelled now; its task sees it next tick
    b.limit.release()
    await asyncio.gather(cancelled, behind, return_exceptions=True)
    assert cancelled.cancelled() and behind.result() is b
    a.limit.release(), b.limit.release()
    assert a.limit.active == b.limit.active == replicas.waiting == 0


async def test_a_raised_limit_lets_queued_requests_in_and_a_cut_one_takes_none():
    a, b = replica("a", 2), replica("b", 2)
    replicas = replica_set(a, b)
    hold(a, 2), hold(b, 2)
    first, second, third = await queue(replicas, 3)
    a.set_limit(1, "cut by the tuner")
    a.limit.release()  # 1 in flight, limit 1: still full
    await asyncio.sleep(0)
    assert not first.done() and a.limit.active == 1
    b.set_limit(4, "raised by the tuner")
    assert await first is b and await second is b and not third.done()
    third.cancel()
    await asyncio.gather(third, return_exceptions=True)
    a.limit.release()
    for _ in range(4):
        b.limit.release()
    assert a.limit.active == b.limit.active == replicas.waiting == 0


async def test_a_slot_refilled_from_the_set_queue_leaves_the_replica_saturated():
    """The tuner grows a limit only while every slot was taken since its last look."""
    a, b = replica("a", 1), replica("b", 1)
    replicas = replica_set(a, b)
    hold(a, 1), hold(b, 1)
    (waiting,) = await queue(replicas, 1)
    a.limit.saturated = False  # as if the controller had just looked, a slot being free
    a.limit.release()
    assert await waiting is a and a.limit.saturated and a.limit.active == 1


async def test_a_replica_back_in_rotation_takes_requests_already_waiting():
    probe = Probe()
    a, b = replica("a", 2, probe), replica("b", 1)
    replicas = replica_set(a, b)
    probe.answers = False
    replicas.start_without(a.url)
    assert await replicas.acquire() is b
    waiting = await queue(replicas, 2)
    await asyncio.sleep(0.7)  # its first probe fails: still out
    assert not any(t.done() for t in waiting) and not a.up
    probe.answers = True
    assert await asyncio.wait_for(asyncio.gather(*waiting), WAIT) == [a, a]
    await replicas.close()


async def test_with_no_live_replica_a_request_waits_for_one_and_stops_past_the_patience():
    probes = [Probe(), Probe()]
    a, b = replica("a", 1, probes[0]), replica("b", 1, probes[1])
    replicas = replica_set(a, b, patience=WAIT)
    hold(a, 1), hold(b, 1)
    (queued,) = await queue(replicas, 1)
    for target, probe in zip((a, b), probes, strict=True):
        probe.answers = False
        replicas.start_without(target.url)
        target.limit.release()  # its request in flight failed
    # Not sent to a replica known to be down: it waits for one to answer.
    await asyncio.sleep(0.1)
    assert not queued.done() and replicas.waiting == 0
    probes[1].answers = True
    assert await asyncio.wait_for(queued, WAIT) is b
    await replicas.close()

    silent = Probe()
    silent.answers = False
    c, d = replica("c", 1, silent), replica("d", 1, silent)
    gone = replica_set(c, d, patience=0.2)
    gone.start_without(c.url), gone.start_without(d.url)
    with pytest.raises(ServerGone, match="none of the 2 replicas"):
        await gone.acquire()
    assert c.limit.active == d.limit.active == 0
    await gone.close()


async def test_one_replica_waits_on_its_own_limit_as_before():
    only = replica("only", 1)
    replicas = ReplicaSet([only], 1.0)
    assert await replicas.acquire() is only
    waiter = asyncio.ensure_future(replicas.acquire())
    await asyncio.sleep(0)
    assert only.limit.waiting == 1 and replicas.waiting == 0 and only.limit.listeners == []
    assert only.outstanding == 2
    only.limit.release()
    assert await waiter is only and only.outstanding == 1


# -- on real sockets ------------------------------------------------------------------


def stalling(let_go: threading.Event, seen: set[str]) -> Callable[[dict], Reply]:
    """A replica that holds every node request until the test lets go."""

    def respond(body: dict) -> Reply:
        if not is_canary(body):
            seen.add(user_text(body))
            let_go.wait(WAIT)
        return schema_responder(body)

    return respond


def answering(seen: set[str], delay: float = 0.0) -> Callable[[dict], Reply]:
    """A replica that answers every request (after `delay` s)."""

    def respond(body: dict) -> Reply:
        reply = schema_responder(body)
        if not is_canary(body):
            seen.add(user_text(body))
            reply.delay = delay
        return reply

    return respond


def test_requests_do_not_queue_behind_a_stalled_replica_while_another_has_free_slots(
    tmp_path: Path,
):
    """A holds every request it gets (2 at a time, its limit) until every example has
    reached a server; B answers at once. Routed to one replica's own queue, requests sat
    behind A while B had free slots, and never reached a server until A let go."""
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    count = 40
    data = rows(tmp_path, count)
    let_go = threading.Event()
    held: set[str] = set()
    answered: set[str] = set()
    with FakeServer(stalling(let_go, held)) as a, FakeServer(answering(answered)) as b:
        urls = [a.base_url, b.base_url]

        async def scenario() -> orc.RunResult:
            run = start_run(graph, data, tmp_path / "run", urls, 2)
            try:
                await until(lambda: len(held | answered) == count, "every example sent")
            finally:
                let_go.set()
            return await run

        result = asyncio.run(scenario())
        on_a, on_b = node_requests(a), node_requests(b)
    assert result.manifest.counts.examples_ok == count
    assert 1 <= on_a <= 2 and on_b == count - on_a  # A only ever had its own two slots
    served = [replica for kind, replica, _ in attempt_replicas(tmp_path / "run") if kind == "ok"]
    assert served.count(urls[0]) == on_a and served.count(urls[1]) == on_b


def test_a_replica_back_in_rotation_serves_the_requests_that_were_waiting(tmp_path: Path):
    """A holds the requests it gets; B serves, dies, and is restarted on its port. The
    requests that failed on B, and every one made meanwhile, wait for a slot; B takes them
    when it is back, so every example reaches a server while A still holds its two."""
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    count = 40
    data = rows(tmp_path, count)
    let_go = threading.Event()
    held: set[str] = set()
    answered: set[str] = set()
    # B answers in 0.05 s, so that it dies with most of the run still to do.
    with FakeServer(stalling(let_go, held)) as a, FakeServer(answering(answered, 0.05)) as b:
        port = b.port
        urls = [a.base_url, b.base_url]

        async def scenario() -> orc.RunResult:
            run = start_run(graph, data, tmp_path / "run", urls, 2)
            try:
                await until(lambda: len(answered) >= 3, "B to serve")
                await asyncio.to_thread(b.stop)
                await asyncio.sleep(0.5)  # calls fail on B and wait for a slot meanwhile
                before = len(answered)
                await asyncio.to_thread(b.start, port)
                await until(lambda: len(held | answered) == count, "every example sent")
                assert len(answered) > before
            finally:
                let_go.set()
            return await run

        result = asyncio.run(scenario())
        on_a = node_requests(a)
    assert result.manifest.counts.examples_ok == count
    assert 1 <= on_a <= 2
    outages = [o for o in result.manifest.outages if o["base_url"] == urls[1]]
    assert outages and all(o["recovered"] for o in outages)
