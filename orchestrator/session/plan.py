"""The run plan as the session builds it: `make_plan` turns the API's flat keyword arguments
(which the CLI reaches through the API) into one `RunPlan`, once per run.

The record itself, and its sub-records, are defined in engine/plan.py: scale/ and engine/
carry and read it and sit below session/ in the layer contract (pyproject
[tool.importlinter]). They are re-exported here under the names the design gives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..calls.endpoints import StructuredChoice
from ..calls.outage import DEFAULT_SERVER_WAIT
from ..calls.retry import RetryPolicy
from ..calls.tuner import Concurrency
from ..engine.plan import (
    CachePlan,
    CallPolicy,
    Executor,
    Resample,
    RunPlan,
    ScalePlan,
    ServerPlan,
    Workers,
)
from ..providers.base import Transport

__all__ = [
    "CachePlan",
    "CallPolicy",
    "Executor",
    "Resample",
    "RunPlan",
    "ScalePlan",
    "ServerPlan",
    "Workers",
    "make_plan",
]


def make_plan(
    *,
    base_url: str | tuple[str, ...],
    model: str | None = None,
    server_id: str | None = None,
    api_key: str = "EMPTY",
    concurrency: Concurrency = None,
    affinity: bool = True,
    limit: int | None = None,
    cache: Path | None = None,
    use_cache: bool = True,
    refresh: bool = False,
    overwrite: bool = False,
    structured: StructuredChoice = "auto",
    params: dict[str, Any] | None = None,
    timeout: float = 120.0,
    server_wait: float = DEFAULT_SERVER_WAIT,
    workers: Workers = 1,
    executor: Executor = "local",
    ray_address: str | None = None,
    allow_servers: tuple[str, ...] = (),
    trust_servers: bool = False,
    transport: Transport | None = None,
    retry: RetryPolicy | None = None,
    resample: Resample | None = None,
) -> RunPlan:
    """A run's settings, each named as `orc.run` names it, grouped into the plan: the one
    place a flat setting is mapped to the record part that reads it."""
    return RunPlan(
        servers=ServerPlan(
            base_url=base_url,
            model=model,
            server_id=server_id,
            api_key=api_key,
            allow_servers=tuple(allow_servers),
            trust_servers=trust_servers,
            transport=transport,
        ),
        calls=CallPolicy(
            timeout=timeout,
            server_wait=server_wait,
            concurrency=concurrency,
            affinity=affinity,
            structured=structured,
            retry=retry,
        ),
        cache=CachePlan(
            use=use_cache, path=Path(cache) if cache is not None else None, refresh=refresh
        ),
        scale=ScalePlan(workers=workers, executor=executor, ray_address=ray_address),
        params=dict(params or {}),
        limit=limit,
        overwrite=overwrite,
        resample=resample,
    )
