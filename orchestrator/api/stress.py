"""Stress: a judge node of a finished run asked again on counterfactual versions of the text
it judges, and what changing only that did to its answers (analysis/stress.py).

    import orchestrator as orc
    found = orc.stress("runs/pointwise", node="judge", perturb=["length", "injection"],
                       rows=50, base_url="http://gpu:8000/v1")
    for line in found.flags:
        print(line)

Each variant is a replay (`orc.replay`) of the node on `rows` rows of the run, the judged
text changed, into a folder of its own; a baseline replay of the same rows unchanged, on the
same server and model, is what each variant is compared with. Nodes upstream of the node
are read back from the run's trace, so they see the text as it was.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

from ..analysis import (
    STRESS_REPORT,
    StressEffect,
    StressReport,
    infer_pair,
    stress_effect,
    stress_fields,
    stress_flags,
    stress_perturbations,
    stress_variants,
)
from ..errors import ConfigurationError, RunFolderError
from ..graph import CompiledGraph
from ..session import RunArgs
from ..store import WHOLE, RunReader, check_out, claim_out, command_output, write_json
from .replay import Prepared, prepare
from .retest import _chosen_rows
from .run import _blocking, arun

log = logging.getLogger(__name__)

DEFAULT = ("length", "injection", "typos", "format")
# The stress folder: its replays (each a run folder of its own) and the report; marked as
# this command's so `--out` never writes into a folder holding anything else.
STRESS_FOLDER = command_output("stress", {STRESS_REPORT, "baseline"})


async def astress(
    run_dir: str | Path,
    *,
    node: str,
    perturb: Sequence[str] = DEFAULT,
    rows: int = 50,
    seed: int = 0,
    judged: str | None = None,
    pair: tuple[str, str] | None = None,
    out: str | Path | None = None,
    permutations: int = 10_000,
    **options: Unpack[RunArgs],
) -> StressReport:
    """Ask `node` of the run in `run_dir` again on `rows` of its rows (a seeded choice)
    with the judged text changed by each perturbation in `perturb` (built-in: length,
    order, injection, typos, format; a registered name; a .jinja file), and report per
    variant and output field the mean shift or the share of verdicts flipped, each with
    an interval and a p-value, Holm across the report, and the flags that survive.

    `judged` is the input the node judges (default: the graph's `judged:`, else `output`);
    `pair` the two inputs `order` swaps. `options` are `orc.run`'s, under the re-ask rule
    (only the server named). `out` is where the replays go (default a sub-folder of the
    run)."""
    if rows < 1:
        raise ConfigurationError(f"--rows must be at least 1, not {rows}")
    chosen = stress_perturbations(perturb)
    prepared = prepare(run_dir, node, out, None, options)
    field = judged or prepared.graph.spec.judged or "output"
    picked = _chosen_rows(prepared.reader, rows, seed)
    if not any(p.pairwise for p in chosen) and any(field not in row for row in picked):
        raise ConfigurationError(
            f"--judged {field}: not a field of the run's rows (name it with --judged)"
        )
    if pair is None and any(p.pairwise for p in chosen):
        spec = prepared.graph.spec
        pair = infer_pair([*spec.inputs, *spec.optional_inputs], node)
    variants = {
        (p.name, variant): changed
        for p in chosen
        for variant, changed in stress_variants(p, picked, field, seed, pair).items()
    }
    llm = [name for name in prepared.asked if prepared.graph.nodes[name].is_llm]
    requests = (len(variants) + 1) * len(picked) * len(llm)
    folder = Path(out) if out is not None else prepared.run / f"stress-{node}-n{rows}-s{seed}"
    check_out(folder, STRESS_FOLDER, overwrite=False)
    log.info(
        "Stress of %s in %s: %d variants and a baseline on %d rows, asking %s again: at "
        "most %d requests to %s (fewer from the cache)",
        node,
        prepared.run,
        len(variants),
        len(picked),
        ", ".join(llm) or "no LLM node",
        requests,
        options.get("base_url") or "the transport given",
    )
    claim_out(folder, STRESS_FOLDER)
    baseline = await _replay(prepared, picked, folder / "baseline", options, "baseline")
    before = _answers(baseline, node)
    effects: list[StressEffect] = []
    for (name, variant), changed in variants.items():
        target = folder / _slug(f"{name}-{variant}")
        after = _answers(
            await _replay(prepared, changed, target, options, f"{name}: {variant}"), node
        )
        for output in _fields(prepared.graph, node, before):
            found = stress_effect(
                name,
                variant,
                node,
                output,
                # By id: the replies arrive in any order, and the bootstrap's seeded draws
                # must meet the same pairs in the same places (the interval moved otherwise).
                [(before[i].get(output), after.get(i, {}).get(output)) for i in sorted(before)],
                swap=name == "order",
                seed=seed,
                permutations=permutations,
            )
            if found is not None:
                effects.append(found)
    flags = stress_flags(effects)
    report = StressReport(
        run=str(prepared.run),
        node=node,
        judged=field,
        rows=len(picked),
        seed=seed,
        requests=requests,
        folder=str(folder),
        holds={p.name: p.holds for p in chosen},
        perturbations=effects,
        flags=flags,
    )
    try:
        write_json(folder / STRESS_REPORT, report.model_dump(mode="json"))
    except OSError as exc:
        raise RunFolderError(f"{folder / STRESS_REPORT} could not be written: {exc}") from exc
    return report


stress = _blocking(astress)
stress.__doc__ = "`astress` for code that is not async. " + (astress.__doc__ or "")


async def _replay(
    prepared: Prepared,
    rows: list[dict[str, Any]],
    target: Path,
    options: RunArgs,
    what: str,
) -> Path:
    """One replay of the node on `rows` into `target`; the folder."""
    settings: RunArgs = {
        **options,
        "params": prepared.params,
        "replay": prepared.record(stress=what),
    }
    await arun(prepared.graph, rows, out=target, **settings)
    return target


def _answers(folder: Path, node: str) -> dict[str, dict[str, Any]]:
    """The node's latest finished output per example in a run folder, as fields."""
    found: dict[str, dict[str, Any]] = {}
    for rec in RunReader(folder).node_runs(node=node):
        if rec.item == WHOLE and rec.status == "ok":
            found[rec.example_id] = stress_fields(rec.value)
    return found


def _fields(graph: CompiledGraph, node: str, answers: dict[str, dict[str, Any]]) -> list[str]:
    """The output fields compared: an LLM node's numbers, booleans and enums (free text
    always differs); any field of another node's output."""
    spec = getattr(graph.nodes[node].spec, "output", None)
    if isinstance(spec, dict):
        return [
            name
            for name, item in spec.items()
            if item.type in ("integer", "number", "boolean") or item.enum or item.enum_from
        ]
    return sorted({name for fields in answers.values() for name in fields})


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
