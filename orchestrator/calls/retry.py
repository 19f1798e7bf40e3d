"""The transport budget of one request: transient failures sent again after a backoff with
jitter, Retry-After honoured and server outages waited out without spending the budget, and
a deadline for each whole reply. Injectable: a run may bring its own `RetryPolicy`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from ..errors import DeadlineExceeded, RetryAfterTooLong
from ..servers import DEFAULT_SERVER_WAIT
from ..store import Attempt

T = TypeVar("T")

MIN_RETRY_AFTER = 1.0  # seconds: the shortest wait a Retry-After gets


class RetryHooks(Protocol):
    """What the policy asks of the layer below: which faults are which, how to name them
    (secrets redacted), and where to count a retry."""

    def is_transient(self, exc: BaseException) -> bool: ...

    def may_be_outage(self, exc: BaseException) -> bool: ...

    def retry_after(self, exc: BaseException) -> float | None: ...

    def describe(self, exc: BaseException) -> str: ...

    def count_retry(self) -> None: ...


class Route(Protocol):
    """Where a call's tries go: the replica of the latest one, and what its failure means."""

    @property
    def url(self) -> str | None:
        """The replica the latest try was sent to (None before the first)."""
        ...

    async def after_failure(self, failed_at: float) -> str | None:
        """None: the server answers, the request was lost on its own (a counted retry).
        Otherwise a note for the failed try: it was an outage, waited out or routed around,
        so the request goes again without spending the budget. May raise ServerGone."""
        ...


def _secs(seconds: float) -> str:
    return f"{round(seconds, 1):g}"


@dataclass
class RetryPolicy:
    """`retries` transport retries after the first try; backoff exponential from
    `backoff_first` s up to `backoff_max`, plus up to `jitter` s; Retry-After waits within
    `server_wait`; `timeout` bounds each whole reply; `max_outages_per_try` outages one try
    may wait out before it counts as failed."""

    retries: int = 4
    backoff_max: float = 20.0
    backoff_first: float = 0.5
    jitter: float = 0.5
    server_wait: float = DEFAULT_SERVER_WAIT
    timeout: float = 120.0
    max_outages_per_try: int = 3

    def deadline_exceeded(self, what: str = "reply") -> DeadlineExceeded:
        return DeadlineExceeded(
            f"timed out: no complete {what} within {self.timeout:g} s (--timeout, a deadline "
            "for the whole request: connecting, waiting and reading the body)"
        )

    async def run(
        self,
        post: Callable[[], Awaitable[T]],
        route: Route,
        attempts: list[Attempt] | None,
        hooks: RetryHooks,
    ) -> T:
        """`post` with the transport budget: transient failures are sent again after a
        backoff, each failed try appended to `attempts`; waits for an outage or a
        Retry-After do not spend the budget."""
        try:
            # Most requests succeed at once, so tenacity (~60 µs of bookkeeping per attempt)
            # is only brought in after a failure.
            return await self._send(post, route, attempts, hooks)
        except Exception as exc:
            if not hooks.is_transient(exc):
                raise
            first: Exception | None = exc
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.retries + 1),
            # Exponential from 0.5 s plus up to 0.5 s of jitter, built from parts every
            # tenacity since 8.2 has (wait_exponential_jitter's `multiplier` came in 9.2).
            wait=wait_exponential(multiplier=self.backoff_first, max=self.backoff_max)
            + wait_random(0, self.jitter),
            retry=retry_if_exception(hooks.is_transient),
            before_sleep=lambda _: hooks.count_retry(),
            reraise=True,
        ):
            with attempt:
                if first is not None:
                    # Replayed as tenacity's attempt 1: same schedule, same records.
                    failed, first = first, None
                    raise failed from None
                return await self._send(post, route, attempts, hooks)
        raise AssertionError("unreachable: tenacity returns the value or re-raises")

    async def _send(
        self,
        post: Callable[[], Awaitable[T]],
        route: Route,
        attempts: list[Attempt] | None,
        hooks: RetryHooks,
    ) -> T:
        """One counted try: a request lost to a server outage is sent again once the server
        is back, or at once to another replica (a few times at most, so a flapping server
        cannot loop us), and one the server asks us to repeat later (Retry-After) is
        repeated then, as long as the waits stay within the run's server wait."""
        outages_left = self.max_outages_per_try
        waited = 0.0
        while True:
            try:
                return await post()
            except Exception as exc:
                described = hooks.describe(exc)
                if attempts is not None:
                    attempts.append(
                        Attempt(
                            number=len(attempts) + 1,
                            kind="transport",
                            error=described,
                            replica=route.url,
                        )
                    )
                asked = hooks.retry_after(exc)
                if asked is not None:
                    waited += await self._wait_as_asked(exc, asked, waited, described, attempts)
                    continue
                if not hooks.may_be_outage(exc) or outages_left == 0:
                    raise
                note = await route.after_failure(time.monotonic())
                if note is None:
                    raise
                outages_left -= 1
                if attempts:
                    attempts[-1].error = f"{described}; {note}"

    async def _wait_as_asked(
        self,
        exc: Exception,
        asked: float,
        waited: float,
        described: str,
        attempts: list[Attempt] | None,
    ) -> float:
        """Sleep for a Retry-After (raised from the fault being handled when it would take
        the waits past `server_wait`); the seconds slept."""
        # "0" or a date already past would have us ask again at once, for as long as the
        # server keeps saying it: each wait is a second at least.
        pause = max(asked, MIN_RETRY_AFTER)
        if pause > self.server_wait:
            raise RetryAfterTooLong(
                f"{described}; the server's Retry-After {_secs(asked)} s is longer "
                f"than --server-wait ({self.server_wait:g} s) allows; raise "
                "--server-wait to wait for it"
            ) from exc
        if waited + pause > self.server_wait:
            raise RetryAfterTooLong(
                f"{described}; still asked to wait (Retry-After) after waiting "
                f"{_secs(waited)} s as the server asked, and --server-wait is "
                f"{self.server_wait:g} s; raise it to wait longer"
            ) from exc
        if attempts:
            attempts[-1].error = (
                f"{described}; waited {_secs(pause)} s as the server asked "
                f"(Retry-After{'' if pause == asked else f' {_secs(asked)} s'})"
            )
        await asyncio.sleep(pause)
        return pause
