"""Which examples people should label: exactly K of a run, drawn with inclusion probabilities
that lean towards those the judge was unsure of (active inference), so that `estimate`'s
interval is narrower than with as many labels drawn at random.

The judge's confidence is the one `calibrate` thresholds and `abstain:` applies
(`compute.judged`): the probability of the answer's token when the node asked for
`logprobs:`, or the share of its `n:` samples that agree. An example's uncertainty is
√(1 − confidence), the scale of its expected error, and π_i ∝ that (with a fifth of the
design spread evenly: `stats.UNIFORM_SHARE`). A run without confidence gets the uniform
design, π = K/N. The draw is systematic PPS over the examples in a seeded random order,
whose inclusion probabilities are exactly π (`stats.systematic_sample`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel

from ..compute import judged
from ..errors import ConfigurationError
from ..stats import active_probabilities, generator, systematic_sample
from ..store import RunReader, check_out_file, write_out_file
from .estimate import judge_answers

__all__ = ["LabelPlan", "label_plan", "write_plan"]

PLAN_KEYS = {"id", "probability"}


class LabelPlan(BaseModel):
    """K examples to label, each with its inclusion probability, and where the lean came from."""

    run: str
    field: str
    budget: int
    examples: int  # examples of the run with an answer in `field`: the design's population
    node: str | None  # the node whose confidence was used (None: uniform)
    source: str  # "logprobs", "samples", "logprobs+samples", or "uniform"
    seed: int
    plan: list[dict[str, Any]]  # {"id", "probability"}, in the run's order
    out: str | None = None
    notes: list[str] = []
    kept: str | None = None  # where `--keep` wrote this plan in the run folder


def _confidences(run: Path, field: str, node: str | None) -> tuple[str | None, dict[str, Any]]:
    """The node used and each example's `judged` confidence (latest execution per example):
    the named node's, or the one node whose values give one; ({} when none does)."""
    found: dict[str, dict[str, Any]] = {}
    for record in RunReader(run).node_runs(node=node):
        if record.status != "ok":
            continue
        value = judged(record.value, field)
        if value is not None:
            found.setdefault(record.node, {})[record.example_id] = value
    if node is not None:
        return node, found.get(node, {})
    if len(found) > 1:
        raise ConfigurationError(
            f"{run}: nodes {', '.join(sorted(found))} each give a confidence for {field!r}; "
            "name the judge with --node"
        )
    return next(iter(found.items()), (None, {}))


def label_plan(
    run: str | Path,
    *,
    budget: int,
    field: str,
    node: str | None = None,
    seed: int = 0,
) -> LabelPlan:
    """Exactly `budget` examples of `run` for people to label, drawn with inclusion
    probabilities leaning towards those where the judge (`node`, or the one node with a
    confidence) was unsure of `field`; uniform when the run recorded no confidence."""
    folder = Path(run)
    answers, _ = judge_answers(folder, field)
    ids = list(answers)
    if not 0 < budget <= len(ids):
        raise ConfigurationError(
            f"--budget {budget}: choose between 1 and {len(ids)} (the examples of {folder} "
            f"with an answer in {field!r})"
        )
    used, confidences = _confidences(folder, field, node)
    notes = []
    if node is not None and not confidences:
        raise ConfigurationError(
            f"node {node!r} of {folder} recorded no confidence for {field!r} (neither token "
            "logprobs nor several samples): leave out --node for a uniform plan"
        )
    if confidences:
        known = [k for k in ids if k in confidences]
        unsure = {k: float(np.sqrt(max(0.0, 1.0 - confidences[k].confidence))) for k in known}
        # An example the node gave no confidence for counts as typically unsure.
        typical = float(np.mean(list(unsure.values())))
        uncertainty = np.asarray([unsure.get(k, typical) for k in ids])
        sources = Counter(confidences[k].source for k in known)
        source = "+".join(sorted(sources))
        if len(known) < len(ids):
            notes.append(f"{len(ids) - len(known)} example(s) had no confidence: given the mean")
    else:
        uncertainty, source, used = np.zeros(len(ids)), "uniform", None
        notes.append("no confidence recorded in the run: every example equally likely")
    rng = generator(seed)
    order = rng.permutation(len(ids))
    pi = active_probabilities(uncertainty[order], budget)
    chosen = set(order[systematic_sample(pi, rng)].tolist())
    probability = dict(zip(order.tolist(), pi.tolist(), strict=True))
    plan = [{"id": ids[i], "probability": probability[i]} for i in range(len(ids)) if i in chosen]
    return LabelPlan(
        run=str(folder),
        field=field,
        budget=budget,
        examples=len(ids),
        node=used,
        source=source,
        seed=seed,
        plan=plan,
        notes=notes,
    )


def _is_plan(path: Path) -> bool:
    """A file `label-plan` wrote and nobody has labelled yet: `{"id", "probability"}` lines."""
    try:
        lines = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
    except (OSError, orjson.JSONDecodeError):
        return False
    return bool(lines) and all(isinstance(x, dict) and set(x) == PLAN_KEYS for x in lines)


def write_plan(plan: LabelPlan, out: Path, overwrite: bool = False) -> LabelPlan:
    """Write the plan as JSONL to `out`: a new file, or (with `overwrite`) one this command
    wrote that holds no label yet; anything else is refused before a byte is written."""
    check_out_file(out, overwrite, _is_plan, what="a label plan nobody has labelled yet")
    write_out_file(out, b"".join(orjson.dumps(line) + b"\n" for line in plan.plan))
    return plan.model_copy(update={"out": str(out)})
