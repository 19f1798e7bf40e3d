"""Test–retest of a finished run's judge: re-ask some of its rows several times at the same
settings and measure how far the answers hold (the judge card's stability line).

    import orchestrator as orc
    found = orc.retest("runs/pointwise", k=3, rows=50, base_url="http://gpu:8000/v1")
    for s in found.stability:
        print(s.node, s.field, s.alpha, s.alpha_ci, s.flip_rate)

Each repeat is an ordinary run of the run's own graph snapshot over the chosen rows, into
RUN/retest-k{K}-n{N}/repeat-{j}: it goes through the engine, the cache and the limits like
any run, so it is traced, resumable, and a second retest of the same rows costs nothing.
Repeat j asks the re-asked nodes under sample indices past the run's own (`Resample`), so
neither the cache nor the run folder mixes a repeat with the run or with another repeat.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

import numpy as np

from ..analysis import Bootstrap, Retest, llm_nodes, measure, output_flips
from ..errors import ConfigurationError, RunFolderError
from ..graph import CompiledGraph
from ..kinds import endpoint_wants
from ..servers import FolderServers, StructuredChoice, reask_servers, recorded_urls
from ..session import Resample, RunArgs
from ..store import ManifestParameters, RunKey, RunReader, ServerEntry
from .run import _blocking, arun, load_graph

log = logging.getLogger(__name__)

# What a retest decides itself: the run's params and rows, a folder per repeat, its re-asks.
_FIXED = ("out", "params", "limit", "overwrite", "resample")


async def aretest(
    run_dir: str | Path,
    *,
    node: str | Sequence[str] | None = None,
    k: int = 3,
    rows: int = 50,
    temperature: float | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    resamples: int = 1000,
    **options: Unpack[RunArgs],
) -> Retest:
    """Re-ask `rows` rows of the run in `run_dir` (a seeded choice among the examples that
    finished) `k` times and measure each LLM node's test–retest stability.

    `node` names the node(s) re-asked (default: every LLM node); the others answer as in
    the run, from the cache when the run's one is used. `temperature` replaces the
    re-asked nodes' own. `out` is where the repeats go (default a sub-folder of the run).
    `options` are `orc.run`'s (base_url, model, transport, cache, concurrency, …); by
    default the run's model and cache file are used again, but never a server it records:
    the repeats ask `base_url` (or the `transport` given) and, for a node's own server,
    only one in `allow_servers`, else a ConfigurationError lists the folder's. The record
    says, per node and judged output field, Krippendorff's α over the repeats with a
    bootstrap interval (`resamples` draws, seeded by `seed`) and the flip rate."""
    fixed = sorted(set(options) & set(_FIXED))
    if fixed:
        raise ConfigurationError(f"a retest sets {', '.join(fixed)} itself: leave it out")
    if k < 2:
        raise ConfigurationError(f"a retest needs k ≥ 2 repeats to compare, not {k}")
    if rows < 1:
        raise ConfigurationError(f"a retest needs at least one row, not {rows}")
    run = Path(run_dir)
    reader = RunReader(run)
    snapshot = reader.snapshot_graph
    if not reader.has_manifest or snapshot is None:
        raise RunFolderError(f"{run} is not a finished run folder with its graph snapshot")
    graph = load_graph(
        snapshot, prompts_dir=reader.snapshot_prompts, trust=bool(options.get("trust"))
    )
    nodes = _nodes(graph, node)
    data = _chosen_rows(reader, rows, seed)
    folder = Path(out) if out is not None else run / _folder_name(k, rows, temperature, seed, node)
    manifest = reader.manifest
    params = dict(manifest.parameters.params)
    _ask_only_named_servers(run, graph, params, manifest.servers, options)
    _run_defaults(options, graph, manifest.parameters, manifest.model)
    repeats = []
    for repeat in range(1, k + 1):
        target = folder / f"repeat-{repeat}"
        settings: RunArgs = {
            **options,
            "params": params,
            "resample": Resample(
                repeat=repeat,
                nodes=tuple(nodes) if node is not None else (),
                temperature=temperature,
            ),
        }
        result = await arun(graph, data, out=target, **settings)
        _check_same_judge(manifest.run_key, result.manifest.run_key, nodes)
        repeats.append(target)
    return Retest(
        run=run,
        folder=folder,
        k=k,
        rows=tuple(str(row["id"]) for row in data),
        seed=seed,
        temperature=temperature,
        nodes=tuple(nodes),
        stability=tuple(
            measure(run, repeats, graph, nodes, Bootstrap(resamples=resamples, seed=seed))
        ),
        outputs=tuple(output_flips(repeats)),
    )


retest = _blocking(aretest)
retest.__doc__ = "`aretest` for code that is not async. " + (aretest.__doc__ or "")


def _nodes(graph: CompiledGraph, node: str | Sequence[str] | None) -> list[str]:
    """The LLM nodes re-asked, in graph order; a name that is not one is refused."""
    every = llm_nodes(graph)
    if node is None:
        if not every:
            raise ConfigurationError(f"graph {graph.name!r} has no LLM node to retest")
        return every
    wanted = [node] if isinstance(node, str) else list(node)
    unknown = [name for name in wanted if name not in every]
    if unknown:
        raise ConfigurationError(
            f"not an LLM node of graph {graph.name!r}: {', '.join(unknown)} "
            f"(its LLM nodes: {', '.join(every) or 'none'})"
        )
    return [name for name in every if name in wanted]


def _chosen_rows(reader: RunReader, rows: int, seed: int) -> list[dict[str, Any]]:
    """`rows` of the examples that finished in the run, drawn with `seed`, in run order,
    each with its inputs as the run read them and its id."""
    finished = {line.id for line in reader.latest_results() if line.status == "ok"}
    inputs = [
        {**line.data, "id": line.id}
        for line in reader.inputs()
        if line.id in finished and line.data is not None
    ]
    if not inputs:
        raise RunFolderError(f"{reader.path} has no finished example to retest")
    if rows >= len(inputs):
        if rows > len(inputs):
            log.info("the run has %d finished examples: all of them are retested", len(inputs))
        return inputs
    picked = np.random.default_rng(seed).choice(len(inputs), size=rows, replace=False)
    return [inputs[i] for i in sorted(picked)]


def _folder_name(
    k: int, rows: int, temperature: float | None, seed: int, node: str | Sequence[str] | None
) -> str:
    """The repeats' folder in the run: named by what changes them, so another retest of
    the same run does not resume this one's folders."""
    name = f"retest-k{k}-n{rows}"
    if temperature is not None:
        name += f"-t{temperature:g}"
    if seed:
        name += f"-s{seed}"
    if node is not None:
        name += "-" + "+".join([node] if isinstance(node, str) else node)
    return name


def _ask_only_named_servers(
    run: Path,
    graph: CompiledGraph,
    params: dict[str, Any],
    servers: dict[str, ServerEntry],
    options: RunArgs,
) -> None:
    """The servers the repeats ask, into `options`: only those the caller named (the rule
    of every re-ask from a folder, `reask_servers`); the run's own are never taken."""
    found = FolderServers.of(run, endpoint_wants(graph), params, recorded_urls(servers))
    chosen = reask_servers(
        found,
        base_url=options.get("base_url"),
        allow_servers=tuple(options.get("allow_servers") or ()),
        transport="the transport given" if options.get("transport") is not None else None,
        trust=bool(options.get("trust")),
    )
    if chosen.base_url is not None:
        options["base_url"] = chosen.base_url
    options["allow_servers"] = chosen.allow_servers


# A manifest is someone else's file: a mode it records that is none of these is not taken,
# nor a timeout past an hour (a folder recording 1e9 s would hang a re-ask on a stalled
# server for good; the caller's own `timeout` is never bounded).
_MOST_INHERITED_TIMEOUT = 3600.0
_STRUCTURED: dict[str, StructuredChoice] = {"auto": "auto", "server": "server", "prompt": "prompt"}


def _run_defaults(
    options: RunArgs,
    graph: CompiledGraph,
    parameters: ManifestParameters,
    model: str | None,
) -> None:
    """Fill in what the run used and the caller did not say: its cache file, its model
    (when no node names its own), how it asked for structured output and how long it gave a
    reply. Never its server: see `_ask_only_named_servers`.

    A re-ask that asked another way than the run (the schema in the prompt where the server
    enforced it) would differ from the run for that reason alone; one with the default
    timeout stopped after 120 s a reply the run had waited 600 s for."""
    cache = parameters.cache
    options.setdefault("cache", Path(cache) if cache else False)
    recorded = _STRUCTURED.get(parameters.structured or "")
    if options.get("structured") is None and recorded is not None:
        options["structured"] = recorded
    timeout = parameters.timeout
    if options.get("timeout") is None and timeout is not None:
        if 0 < timeout <= _MOST_INHERITED_TIMEOUT:
            options["timeout"] = timeout
        else:
            log.info("the run records a timeout of %s s: not taken, the default applies", timeout)
    own_models = any(getattr(n.spec, "model", None) for n in graph.nodes.values() if n.is_llm)
    if "model" not in options and model is not None and not own_models:
        options["model"] = model


def _check_same_judge(before: RunKey | None, after: RunKey | None, nodes: Sequence[str]) -> None:
    """A retest must ask the model the run asked; said after the first repeat otherwise."""
    if before is None or after is None:
        return
    changed = [
        f"{part}: {before.components[part]} → {after.components.get(part, '(none)')}"
        for node in nodes
        for part in (f"model {node}", f"server {node}")
        if part in before.components and before.components[part] != after.components.get(part)
    ]
    if changed:
        raise ConfigurationError(
            "the retest did not ask the run's judge (" + "; ".join(changed) + "): pass the "
            "run's model and server (model=, base_url=, server_id=)"
        )
