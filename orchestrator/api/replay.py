"""Replay: what would a finished run have said with another judge model, prompt or setting
for one step? Only that step and what depends on it are asked again; every other node's
output is read back from the run's trace, so it costs no request.

    import orchestrator as orc
    again = orc.replay("runs/expert", node="style", base_url="http://gpu:8000/v1",
                       model="Qwen/Qwen2.5-7B-Instruct", out="runs/expert-style7b")

The replay is an ordinary run of the run's own graph snapshot (with the prompt or params
changed) over the run's own rows, into a folder of its own: traced, cached and resumable like
any run. Its manifest and run key record the run it replays (the folder and its run key),
the nodes asked again and what changed (`Replay`), so a replay with another change is
another run, never resumed into this one's folder.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from ..errors import ConfigurationError, RunFolderError
from ..graph import CompiledGraph, load_yaml
from ..session import Replay, RunArgs
from ..store import RunReader
from .retest import _ask_only_named_servers, _run_defaults
from .run import RunResult, _blocking, arun, graph_from_dict, load_graph

log = logging.getLogger(__name__)

# What a replay decides itself: the run's rows, its replay record.
_FIXED = ("limit", "replay", "resample")


async def areplay(
    run_dir: str | Path,
    *,
    node: str | Sequence[str],
    out: str | Path,
    prompt: str | Path | None = None,
    **options: Unpack[RunArgs],
) -> RunResult:
    """Replay the run in `run_dir` into `out`: the nodes `node` names (one, or several
    changed together) and every node that depends on them are asked again; the others'
    outputs are read back from the run's trace and sent to no server.

    `prompt` is a template file that replaces the prompt of the (one) node named.
    `options` are `orc.run`'s: `params` are set over the run's own; the model defaults to
    the run's, its cache file too, but the server is only the one named (`base_url`, or
    `transport`; `allow_servers` for a node's own), never one the folder records. `out`
    follows every run folder's rule: missing, empty, or this replay's own (resumed)."""
    prepared = prepare(run_dir, node, out, prompt, options)
    _announce(prepared.run, prepared.graph, prepared.asked, len(prepared.rows), options)
    settings: RunArgs = {
        **options,
        "params": prepared.params,
        "replay": prepared.record(),
    }
    return await arun(prepared.graph, prepared.rows, out=Path(out), **settings)


@dataclass
class Prepared:
    """A replay decided, before any request: the graph (its prompt changed), the nodes
    asked again, what changed, the params, the run's rows; `options` filled in."""

    run: Path
    graph: CompiledGraph
    reader: RunReader
    source_key: str
    named: list[str]
    asked: list[str]
    changes: dict[str, str]
    params: dict[str, Any]
    rows: list[dict[str, Any]]

    def record(self, **more: str) -> Replay:
        """The `Replay` setting of a run of it, with `more` changes."""
        return Replay(
            source=str(self.run.resolve()),
            source_key=self.source_key,
            named=tuple(self.named),
            nodes=tuple(self.asked),
            changes={**self.changes, **more},
        )


def prepare(
    run_dir: str | Path,
    node: str | Sequence[str],
    out: str | Path | None,
    prompt: str | Path | None,
    options: RunArgs,
) -> Prepared:
    """Check and decide a replay of the run in `run_dir` (see `areplay`); `options` get the
    servers named (the re-ask rule) and the run's model and cache where not given."""
    fixed = sorted(set(options) & set(_FIXED))
    if fixed:
        raise ConfigurationError(f"a replay sets {', '.join(fixed)} itself: leave it out")
    run = Path(run_dir)
    if out is not None and Path(out).resolve() == run.resolve():
        raise ConfigurationError(
            f"--out {out} is the run replayed: a replay writes a folder of its own"
        )
    reader = RunReader(run)
    snapshot = reader.snapshot_graph
    if not reader.has_manifest or snapshot is None or not reader.has_trace:
        raise RunFolderError(f"{run} is not a finished run folder with its graph snapshot")
    manifest = reader.manifest
    if manifest.run_key is None:
        raise RunFolderError(f"{run}/manifest.json records no run key: it cannot be replayed")
    trust = bool(options.get("trust"))
    named = [node] if isinstance(node, str) else list(node)
    graph = load_graph(snapshot, prompts_dir=reader.snapshot_prompts, trust=trust)
    _check_named(graph, named, prompt)
    changes: dict[str, str] = {}
    if prompt is not None:
        graph, changes["prompt"] = _with_prompt(reader, graph, named[0], Path(prompt), trust)
    params = options.pop("params", None) or {}
    recorded = dict(manifest.parameters.params)
    for key, value in params.items():
        changes[f"params.{key}"] = f"{recorded.get(key)!r} → {value!r}"
    if options.get("model") is not None and options.get("model") != manifest.model:
        changes["model"] = f"{manifest.model} → {options.get('model')}"
    structured = options.get("structured")
    if structured is not None and structured != manifest.parameters.structured:
        changes["structured"] = f"{manifest.parameters.structured} → {structured}"
    run_params = {**recorded, **params}
    _ask_only_named_servers(run, graph, run_params, manifest.servers, options)
    _run_defaults(options, graph, manifest.parameters, manifest.model)
    rows = [{**line.data, "id": line.id} for line in reader.inputs() if line.data is not None]
    if not rows:
        raise RunFolderError(f"{run} holds no example inputs to replay")
    return Prepared(
        run=run,
        graph=graph,
        reader=reader,
        source_key=manifest.run_key.digest,
        named=named,
        asked=_descendants(graph, named),
        changes=changes,
        params=run_params,
        rows=rows,
    )


replay = _blocking(areplay)
replay.__doc__ = "`areplay` for code that is not async. " + (areplay.__doc__ or "")


def _check_named(graph: CompiledGraph, named: list[str], prompt: str | Path | None) -> None:
    """Every node named is the graph's; a new prompt replaces the prompt of one LLM node."""
    if not named:
        raise ConfigurationError("--node names no node to replay")
    unknown = [name for name in named if name not in graph.nodes]
    if unknown:
        raise ConfigurationError(
            f"--node {', '.join(unknown)}: not a node of graph {graph.name!r} "
            f"(its nodes: {', '.join(graph.nodes)})"
        )
    if prompt is not None and (len(named) != 1 or not graph.nodes[named[0]].is_llm):
        raise ConfigurationError(
            f"--prompt {prompt} replaces the prompt of one LLM node: name exactly one with --node"
        )


def _descendants(graph: CompiledGraph, named: list[str]) -> list[str]:
    """The nodes named and every node that reads any of them, directly or not, in graph
    order."""
    asked = set(named)
    for name, compiled in graph.nodes.items():  # in graph order: a node's deps come first
        if compiled.deps & asked:
            asked.add(name)
    return [name for name in graph.nodes if name in asked]


def _with_prompt(
    reader: RunReader, graph: CompiledGraph, node: str, template: Path, trust: bool
) -> tuple[CompiledGraph, str]:
    """The run's graph with `node`'s prompt read from `template`, and the change in words."""
    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--prompt {template}: {exc.strerror or exc}") from None
    assert reader.snapshot_graph is not None
    spec = load_yaml(reader.snapshot_graph)
    folder = reader.snapshot_prompts
    texts = {
        path.relative_to(folder).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
    name = f"replay-{node}-{template.name}"
    texts[name] = text
    spec["nodes"][node]["prompt"] = name
    spec.pop("prompts", None)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    changed = graph_from_dict(
        spec, texts, name=f"{reader.snapshot_graph} ({node}: {name})", trust=trust
    )
    return changed, f"node {node}: {template} (sha256 {digest})"


def _announce(
    run: Path, graph: CompiledGraph, asked: list[str], rows: int, options: RunArgs
) -> None:
    """Before the first request: which nodes are asked again, how many calls at most, and
    which are read back (the servers asked are logged by the re-ask rule)."""
    llm = [name for name in asked if graph.nodes[name].is_llm]
    foreach = [name for name in llm if graph.nodes[name].foreach is not None]
    back = [name for name in graph.nodes if name not in asked]
    calls = f"{rows * len(llm)} calls" + (
        f" and one per item of {', '.join(foreach)}" if foreach else ""
    )
    server = options.get("base_url") or "the transport given"
    log.info(
        "Replaying %s of %s on its %d examples: asks %s at most %s (fewer from the cache); "
        "%s read back from its trace, asked nothing",
        ", ".join(asked),
        run,
        rows,
        server,
        calls,
        ", ".join(back) or "no node",
    )
