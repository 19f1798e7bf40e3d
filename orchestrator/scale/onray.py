"""Workers as Ray actors (`executor="ray"`, `--ray [ADDRESS]`): each actor runs
`ShardWorker` in its own asyncio event loop, on whichever machine of the cluster Ray puts
it; the process that called the run is the Ray driver and owns the run folder.

Actors rather than Ray Data: a judge graph is not a map over rows (an example's calls
overlap and wait on each other inside one event loop), and the owner must hand rows out as
workers have room and take finished lines back as they come, which an actor's async methods
give directly.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import Any

from ..engine import FLUSH_SECONDS
from ..errors import ConfigurationError
from ..shipped import pip_install
from .messages import RowChunk, WorkerFailed, WorkerJob, WorkerLost, WorkerReport
from .worker import ShardWorker

log = logging.getLogger(__name__)

PUSHES_IN_FLIGHT = 8  # unconfirmed pushes per actor before the owner waits for them
UNAVAILABLE_TRIES = 3  # an actor Ray calls "temporarily unavailable" gets this many pulls


def import_ray() -> Any:
    """The `ray` module, or a ConfigurationError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigurationError(
            f"executor='ray' (--ray) needs Ray, which is not installed here: {pip_install('scale')}"
        ) from None
    return ray


class RayWorker:
    """The actor's class (made remote in `start_actors`): a `ShardWorker` behind async
    methods, so pushes, pulls and the engine share the actor's event loop."""

    def __init__(self, job: WorkerJob, name: str) -> None:
        self.job, self.name = job, name
        self.worker: ShardWorker | None = None

    async def start(self) -> None:
        self.worker = ShardWorker(self.job, self.name)
        self.worker.start()

    async def push(self, chunk: RowChunk) -> None:
        assert self.worker is not None
        self.worker.push(chunk)

    async def close(self, cancel: bool) -> None:
        assert self.worker is not None
        self.worker.close(cancel)

    async def pull(self, wait: float) -> WorkerReport:
        assert self.worker is not None
        return await self.worker.pull(wait)


def connect(address: str | None) -> Any:
    """Ray, connected: to `address`, else to the instance this process already uses, else
    to a running local one or a new one (what `ray.init()` does)."""
    ray = import_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=True)
        except Exception as exc:  # Ray raises ConnectionError, ValueError, RuntimeError…
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            raise ConfigurationError(
                f"could not connect to {where} ({type(exc).__name__}: {exc}); check the "
                "address (`ray status` on the head node shows it), or use --ray local."
            ) from None
    return ray


def actor_count(ray: Any, wanted: int | None) -> int:
    """`wanted` actors, or one per CPU of the cluster."""
    if wanted is not None:
        return wanted
    return max(int(ray.cluster_resources().get("CPU", 1)), 1)


class RayLink:
    """One actor as the owner reaches it."""

    def __init__(self, ray: Any, actor: Any, name: str) -> None:
        self.ray, self.actor, self.name = ray, actor, name
        self.where = ""  # "pid N on HOST", once the actor has reported
        # Pushes not yet confirmed: not awaited one by one (each actor call is a round trip
        # through Ray; awaiting them in turn starved the actors), but all before `close`.
        self._pushes: list[Any] = []

    def describe(self) -> str:
        return f"Ray {self.name}" + (f" ({self.where})" if self.where else "")

    async def pull(self) -> WorkerReport:
        errors = self.ray.exceptions
        for attempt in range(UNAVAILABLE_TRIES):
            try:
                report: WorkerReport = await self.actor.pull.remote(FLUSH_SECONDS)
            except errors.ActorUnavailableError:
                if attempt + 1 == UNAVAILABLE_TRIES:
                    raise WorkerLost(f"{self.describe()} stayed unavailable") from None
                await asyncio.sleep(1.0)
                continue
            except errors.RayActorError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no reason"
                raise WorkerLost(f"{self.describe()} died ({first})") from None
            except errors.RayError as exc:
                raise WorkerFailed(f"{self.describe()} failed: {exc}") from None
            self.where = f"pid {report.pid} on {report.host}"
            return report
        raise AssertionError("unreachable")

    async def push(self, chunk: RowChunk) -> None:
        self._pushes.append(self.actor.push.remote(chunk))
        if len(self._pushes) > PUSHES_IN_FLIGHT:
            await self._confirm()

    async def _confirm(self) -> None:
        pushes, self._pushes = self._pushes, []
        # An actor gone fails its pushes: `pull` says so.
        await asyncio.gather(*pushes, return_exceptions=True)

    async def close(self, cancel: bool) -> None:
        await self._confirm()  # rows pushed before `close` must arrive before it
        with suppress(self.ray.exceptions.RayError):
            await self.actor.close.remote(cancel)

    async def dispose(self) -> None:
        try:
            self.ray.kill(self.actor, no_restart=True)
        except Exception as exc:  # an actor already gone is what we wanted
            log.debug("ray.kill(%s): %s", self.name, exc)


async def start_actors(ray: Any, job: WorkerJob, count: int) -> list[RayLink]:
    """`count` actors, each given the job and started; each asks for one CPU, or its share
    when more actors are asked for than the cluster has CPUs (so none waits forever)."""
    cpus = max(float(ray.cluster_resources().get("CPU", 1)), 1.0)
    remote = ray.remote(RayWorker).options(num_cpus=min(1.0, cpus / count), max_restarts=0)
    links = [
        RayLink(ray, remote.remote(job, f"worker-{i + 1}"), f"worker-{i + 1}") for i in range(count)
    ]
    await asyncio.gather(*(link.actor.start.remote() for link in links))
    return links
