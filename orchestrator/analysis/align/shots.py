"""Few-shot sets drawn from labelled examples: which ids (seeded, stratified) and the
shot records a graph's `shots:` reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ConfigurationError
from .record import Shot


def shot_order(pool: Sequence[str], groups: Mapping[str, str], seed: int, draw: int) -> list[str]:
    """Every id of `pool` in the order shots are taken: shuffled within each stratum, then
    one stratum after another in turn, so any first c of them spread over the labels.
    `draw` (the fold, or the final draw) gives each draw its own seeded order; a larger
    shot count of one draw extends a smaller one."""
    rng = np.random.default_rng([seed, 2, draw])
    by_stratum: dict[str, list[str]] = {}
    for example in sorted(pool):
        by_stratum.setdefault(groups.get(example, ""), []).append(example)
    queues = [
        [by_stratum[name][i] for i in rng.permutation(len(by_stratum[name]))]
        for name in sorted(by_stratum)
    ]
    queues = [queues[i] for i in rng.permutation(len(queues))]
    out: list[str] = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out


def draw_shots(
    pool: Sequence[str], groups: Mapping[str, str], count: int, seed: int, draw: int
) -> list[str]:
    """`count` ids from `pool` (all of it when smaller), stratified by label, seeded."""
    return shot_order(pool, groups, seed, draw)[:count]


def check_counts(counts: Sequence[int], pools: Sequence[Sequence[str]], pooled: str) -> None:
    """Refuse a shot count larger than the smallest pool a draw takes from (`pooled` says
    what the pools are): the draw would show fewer shots than its configuration is named
    and recorded by."""
    most = min(len(pool) for pool in pools)
    if counts and max(counts) > most:
        raise ConfigurationError(
            f"{max(counts)} shots cannot be drawn: {pooled}, so at most {most}; lower the "
            "shot counts or label more examples"
        )


def plain(value: Any) -> Any:
    """A label as a shot states it: a whole-number score as an integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def shot_record(
    example: str,
    row: Mapping[str, Any],
    inputs: Sequence[str],
    field: str,
    label: Mapping[str, Any],
    truth: Any,
) -> Shot:
    """The shot of one example: its dataset inputs (the graph's `inputs` and
    `optional_inputs` the row has; all its fields but `id` when it declares none), the human
    answer in `field` and the label's `reason` when it has one."""
    names = list(inputs) or [name for name in row if name != "id"]
    output: dict[str, Any] = {field: plain(truth)}
    if label.get("reason") not in (None, ""):
        output["reason"] = label["reason"]
    return Shot(id=example, inputs={n: row[n] for n in names if n in row}, output=output)
