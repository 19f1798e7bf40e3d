"""One round of a graph run through batch files: run the graph with the batch transport, so
every call is answered from the response cache or the imported replies (validated and
re-asked exactly as live replies are, valid ones stored in the response cache under the
live call's key) and every other request is collected: the next frontier.

The round runs into a scratch store in memory, so no run folder ever holds an example that
is only waiting; with `out`, a round that waits for nothing is run once more into that run
folder, entirely from the cache.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..calls import RetryPolicy
from ..data import FileSource
from ..graph import CompiledGraph
from ..kinds import compile_graph, endpoint_wants
from ..providers import (
    BATCH_BASE_URL,
    BatchRequestLine,
    BatchTransport,
    Deferred,
    deferrals_unreported,
)
from ..servers import FolderServers, reask_servers
from ..session import RunSettings, make_plan, run_session
from ..store import MemoryStore, RunFolder, RunStore
from ..ui import run_progress
from .folder import BatchFolder, BatchJob, output_name

log = logging.getLogger(__name__)

# Requests "in flight" at once: nothing is sent, so this only bounds how many examples the
# engine holds; wide enough that a round walks the rows quickly.
ROUND_CONCURRENCY = 256


class RoundOutcome(BaseModel):
    """Where the examples stand after a round, and what the next batch file must ask."""

    examples: int  # examples this round ran (those already finished in --out not counted)
    ok: int
    failed: int  # failed as a live run would fail them (e.g. no valid reply after re-asks)
    waiting: int  # stopped at a request no reply was imported for yet
    from_batch: int  # requests answered by imported replies
    frontier: list[BatchRequestLine]


class ExportOutcome(BaseModel):
    """What `export_round` did: the round, the files it wrote, where the run stands."""

    round: int | None  # None when nothing is left to ask
    files: list[Path]
    outputs: list[Path]  # the output file we suggest for each of `files`
    state: RoundOutcome
    run_folder: Path | None = None  # written when nothing waits and `out` was given


def round_graph(
    job: BatchJob, folder: BatchFolder, *, trust: bool = False, allow_servers: Sequence[str] = ()
) -> CompiledGraph:
    """The job's graph, once the servers a round would ask are known to be the user's: the
    batch transport answers the run's nodes, and a node's own server (which a node naming
    a provider reaches live) must be named on the command, as for any re-ask from a folder
    (`reask_servers`): the job's params are the folder's, not the user's word."""
    graph = compile_graph(job.graph, trust=trust)
    found = FolderServers.of(folder.path, endpoint_wants(graph), job.params)
    reask_servers(
        found,
        base_url=None,
        allow_servers=allow_servers,
        transport="the batch transport",
        trust=trust,
    )
    return graph


async def run_round(
    job: BatchJob,
    folder: BatchFolder,
    store: RunStore | None = None,
    *,
    trust: bool = False,
    allow_servers: Sequence[str] = (),
    graph: CompiledGraph | None = None,
) -> RoundOutcome:
    """Run `job` once over the batch transport (into `store`, scratch memory by default).
    `trust` and `allow_servers` are the user's, given with each command, never kept in the
    folder; `graph`: the job's, already checked by `round_graph`."""
    if graph is None:
        graph = round_graph(job, folder, trust=trust, allow_servers=allow_servers)
    # The replies land in the response cache under what answered them, as a live call's.
    identity = job.identity()
    replies = folder.replies()

    def lookup(key: str) -> dict[str, Any] | None:
        found = replies.get(key)
        return None if found is None else found["reply"]

    transport = BatchTransport(lookup)
    settings = RunSettings(
        base_url=BATCH_BASE_URL,
        model=job.model,
        server_id=identity,
        api_key="EMPTY",  # the batch transport sends nothing anywhere
        concurrency=ROUND_CONCURRENCY,
        limit=job.limit,
        cache=job.cache if job.cache is not None else True,
        structured=job.structured,
        params=dict(job.params),
        transport=transport,
        # An imported reply is final: asking again would get the same one.
        retry=RetryPolicy(retries=0),
        trust=trust,
        allow_servers=tuple(allow_servers),
    )
    plan = make_plan(settings, graph)
    scratch = store if store is not None else MemoryStore()
    try:
        with deferrals_unreported():
            # No bar: progress lines, as an `orc.run` without `progress=True` logs them.
            await run_session(graph, FileSource(job.data), scratch, plan, run_progress(False))
    except Deferred:
        # A once-node waits for its reply: no row has started, its request is the frontier.
        pass
    finally:
        replies.close()
    lines = list(scratch.results())
    ok = sum(line.status == "ok" for line in lines)
    entered = len(scratch.numbers) if isinstance(scratch, MemoryStore) else len(lines)
    return RoundOutcome(
        examples=entered,
        ok=ok,
        failed=len(lines) - ok,
        waiting=entered - len(lines),
        from_batch=transport.answered,
        frontier=list(transport.deferred.values()),
    )


async def export_round(
    folder: BatchFolder,
    job: BatchJob | None = None,
    out: Path | None = None,
    *,
    trust: bool = False,
    allow_servers: Sequence[str] = (),
) -> ExportOutcome:
    """Write the next batch file: the requests the examples wait for now. `job` starts or
    changes the folder's job (else the saved one runs); with `out`, once nothing waits, the
    finished run is written to that run folder. A node's own server is asked only when
    `allow_servers` names it, or a param of the `job` given here does."""
    allow = list(allow_servers)
    if job is not None:
        job.identity()  # a job that cannot say what answers it is not saved
        # Its params are the caller's word on this command, a server one names included.
        allow += [value for value in job.params.values() if isinstance(value, str)]
        folder.save_job(job)
    job = folder.job()
    graph = round_graph(job, folder, trust=trust, allow_servers=allow)
    state = await run_round(job, folder, trust=trust, allow_servers=allow, graph=graph)
    if not state.frontier:
        written = None
        if out is not None:
            final = await run_round(
                job, folder, RunFolder(out), trust=trust, allow_servers=allow, graph=graph
            )
            if final.frontier:  # only if the cache lost replies between the two runs
                log.warning(
                    "%d requests had no reply when the run folder was written; export again",
                    len(final.frontier),
                )
            written = out
        return ExportOutcome(round=None, files=[], outputs=[], state=state, run_folder=written)
    number = folder.next_round()
    files = folder.write_round(number, state.frontier)
    return ExportOutcome(
        round=number, files=files, outputs=[output_name(f) for f in files], state=state
    )
