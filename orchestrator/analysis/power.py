"""`power`: how many examples (or users) a paired comparison needs to detect a difference.

From a pilot: two runs over the same examples (the sd of their per-example differences) or
one run (the sd of its scores, with an assumed correlation between the two systems). The
sample size solves the power equation of the test `compare` runs: the exact sign-flip
test's power by simulation up to SIMULATED_UP_TO units, where its few sign vectors make it
coarser than the t-test (at n = 6 it rejects only when all six differences share a sign),
the paired t-test's (noncentral t, n − 1 degrees of freedom) beyond, where the two agree
within 0.01. With `cluster` (e.g. a user id) examples nested in clusters count as fewer
independent ones, by the design effect 1 + (m − 1)·ICC of the pilot. The pilot's σ is
itself uncertain: `power_range` is the power the answer has across σ's 80% interval.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..errors import ConfigurationError
from ..stats import normal_n, one_way_icc, sd_interval, sign_flip_power, t_power
from .compare import (
    _is_numeric,
    _missing,
    _present,
    _shared_names,
    check_numbers,
    load_run,
    matched_by_id,
    ok_values,
)
from .groups import cluster_keys

if TYPE_CHECKING:
    from .compare import RunResult

log = logging.getLogger(__name__)

# compare's sign-flip test cannot reach p < 0.05 with fewer: its smallest p is 2/2^n.
SIGN_FLIP_MINIMUM = 6
WALK_LIMIT = 10**7
# Units up to which the sign-flip test's power is simulated; from 12 on the t-test's
# agrees with it within 0.01 (measured over effects giving 0.75–0.8 power).
SIMULATED_UP_TO = 12
SMALL_PILOT = 30  # pilots below this many units get a note on σ's uncertainty
RANGE_LEVEL = 0.8  # the σ interval `power_range` spans


class PowerEstimate(BaseModel):
    """The sample size a paired comparison needs, and the pilot numbers it rests on."""

    output: str
    diff: float  # the mean difference to detect
    alpha: float  # two-sided
    power: float  # the wanted chance of detecting `diff`
    n_required: int  # examples, or clusters (users) when `cluster` is set
    unit: Literal["examples", "clusters"]
    examples_required: int  # n_required, times the mean cluster size with `cluster`
    achieved_power: float  # the power at n_required (sign-flip test, or paired t)
    power_range: list[float] | None = None  # the power at n_required across σ's 80% interval
    n_normal: float  # ((z₁₋α/₂ + z₁₋β)·σ/Δ)², the normal approximation, before rounding
    sd_difference: float  # σ of the per-example differences the estimate uses
    source: Literal["two runs", "one run"]
    correlation: float | None = None  # one run: the assumed correlation of the two systems
    pilot_n: int  # examples the pilot's σ comes from
    pilot_difference: float | None = None  # two runs: their observed mean difference
    cluster: str | None = None
    clusters: int | None = None  # in the pilot
    mean_cluster_size: float | None = None
    icc: float | None = None  # intra-cluster correlation of the differences (ANOVA, ≥ 0)
    design_effect: float | None = None  # 1 + (m − 1)·ICC
    notes: list[str] = Field(default_factory=list)


def compare_power(n: int, effect: float, alpha: float) -> float:
    """The power of compare's test at n units and effect Δ/σ: the exact sign-flip test's
    (simulated) up to SIMULATED_UP_TO units, the paired t-test's beyond."""
    if n <= SIMULATED_UP_TO:
        return sign_flip_power(n, effect, alpha)
    return t_power(n, effect, alpha)


def required_n(sd: float, diff: float, alpha: float, power: float) -> tuple[int, float, float]:
    """The fewest observations whose paired test (compare's sign-flip test) detects `diff`
    with the given power.

    Returns (n, the normal approximation before rounding, the power reached at n). Starts
    from the normal formula and steps up until `compare_power` reaches the power; never
    below SIGN_FLIP_MINIMUM, the smallest n at which compare's test can reject at all.
    """
    if diff == 0 or not math.isfinite(diff):
        raise ConfigurationError(f"diff must be a non-zero number, got {diff!r}")
    if sd == 0:
        return SIGN_FLIP_MINIMUM, 0.0, 1.0
    effect = abs(diff) / sd
    normal = normal_n(effect, alpha, power)
    if not math.isfinite(normal):
        raise ConfigurationError(
            f"diff {diff!r} is too small against the pilot's σ of the differences "
            f"({sd:.3g}): the examples it needs are past counting"
        )
    n = max(SIGN_FLIP_MINIMUM, math.ceil(normal))
    reached = compare_power(n, effect, alpha)
    # Past WALK_LIMIT the t test is the normal one and one more example moves the power by
    # less than a float shows: the walk would not end, and the normal answer stands.
    while reached < power and n < WALK_LIMIT:
        n += 1
        reached = compare_power(n, effect, alpha)
    return n, normal, reached


def power_range(sd: float, diff: float, alpha: float, n: int, df: int) -> tuple[float, float]:
    """The power n units have when σ is anywhere in the pilot's RANGE_LEVEL interval
    (chi-square, `df` degrees of freedom): low at its high end, high at its low end."""
    if sd == 0:
        return 1.0, 1.0
    low, high = sd_interval(sd, df, RANGE_LEVEL)
    return compare_power(n, abs(diff) / high, alpha), compare_power(n, abs(diff) / low, alpha)


def _pilot_note(estimate: PowerEstimate, units: int, unit: str) -> None:
    """A small pilot's σ is a rough guess: say how far the power may be from the target."""
    if units >= SMALL_PILOT or estimate.power_range is None:
        return
    low, high = estimate.power_range
    estimate.notes.append(
        f"a small pilot ({units} {unit}): σ is uncertain, and across its 80% interval "
        f"{estimate.n_required} {unit} have {low:.0%} to {high:.0%} power, not surely "
        f"{estimate.power:.0%}; a larger pilot narrows this"
    )


def _pick_output(values: list[dict[str, dict[str, Any]]], output: str | None) -> str:
    names = _shared_names(values)
    numeric = [name for name in names if _is_numeric(_present(values, name))]
    if output is None:
        if not numeric:
            raise ConfigurationError("the runs share no numeric output to size a comparison of")
        return numeric[0]
    if output not in numeric:
        raise ConfigurationError(
            f"no numeric output {output!r} in every run; numeric outputs: "
            f"{', '.join(numeric) or 'none'}"
        )
    return output


def estimate_power(
    *runs: str | Path | RunResult,
    diff: float,
    output: str | None = None,
    cluster: str | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    correlation: float = 0.0,
) -> PowerEstimate:
    """How many examples (or clusters, with `cluster`) a paired comparison needs to detect
    a mean difference `diff` with probability `power` at two-sided level `alpha`.

    Two runs: σ is the sd of their per-example differences of `output` (default: the first
    numeric output they share). One run: σ of the differences is √(2(1 − ρ))·σ of its
    scores, ρ = `correlation` (0, the default, assumes the two systems' scores vary
    independently; positively correlated systems need fewer examples).
    """
    import numpy as np

    if len(runs) not in (1, 2):
        raise ConfigurationError(f"power needs one or two pilot runs, got {len(runs)}")
    if not 0.0 < alpha < 1.0:
        raise ConfigurationError(f"alpha must be between 0 and 1, got {alpha!r}")
    if not 0.0 < power < 1.0:
        raise ConfigurationError(f"power must be between 0 and 1, got {power!r}")
    if not -1.0 <= correlation < 1.0:
        raise ConfigurationError(f"correlation must be in [-1, 1), got {correlation!r}")
    loaded = [load_run(run, position) for position, run in enumerate(runs)]
    values = ok_values(loaded)
    name = _pick_output(values, output)
    check_numbers(loaded, values, [name])
    notes: list[str] = []
    if len(loaded) == 2:
        matched = matched_by_id(values, name, 0, 1)
        keys = [key for key, _, _ in matched]
        data = np.array([float(b) - float(a) for _, a, b in matched])
        source: Literal["two runs", "one run"] = "two runs"
        factor = 1.0
    else:
        keys = [k for k in sorted(values[0]) if not _missing(values[0][k].get(name))]
        data = np.array([float(values[0][k][name]) for k in keys])
        source = "one run"
        factor = math.sqrt(2.0 * (1.0 - correlation))
        notes.append(
            f"one pilot run: σ of the differences taken as √(2(1 − ρ))·σ of its scores, "
            f"ρ = {correlation:g} assumed"
        )
    if data.size < 2:
        raise ConfigurationError(
            f"the pilot has {data.size} example(s) with {name!r}; its spread needs two or more"
        )
    sd = float(data.std(ddof=1)) * factor
    estimate = PowerEstimate(
        output=name,
        diff=diff,
        alpha=alpha,
        power=power,
        n_required=0,
        unit="examples",
        examples_required=0,
        achieved_power=0.0,
        n_normal=0.0,
        sd_difference=sd,
        source=source,
        correlation=correlation if source == "one run" else None,
        pilot_n=int(data.size),
        pilot_difference=float(data.mean()) if source == "two runs" else None,
        notes=notes,
    )
    if cluster is None:
        n, normal, reached = required_n(sd, diff, alpha, power)
        estimate.n_required = estimate.examples_required = n
        estimate.n_normal, estimate.achieved_power = normal, reached
        estimate.power_range = list(power_range(sd, diff, alpha, n, int(data.size) - 1))
        _pilot_note(estimate, int(data.size), "examples")
        return estimate
    found = cluster_keys(loaded[0].lines.values(), cluster, loaded[0].inputs)
    missing = [key for key in keys if key not in found]
    if missing:
        raise ConfigurationError(
            f"{len(missing)} example(s) of {loaded[0].info.label} have no field {cluster!r} "
            f"to cluster by (e.g. {missing[0]!r})"
        )
    groups = [found[key] for key in keys]
    icc, count, size = one_way_icc(data, groups)
    effect = 1.0 + (size - 1.0) * icc
    # A cluster's mean difference has variance σ²·DE/m: size the test over cluster means.
    scaled = sd * math.sqrt(effect / size)
    n, normal, reached = required_n(scaled, diff, alpha, power)
    estimate.unit = "clusters"
    estimate.n_required, estimate.n_normal, estimate.achieved_power = n, normal, reached
    estimate.examples_required = math.ceil(n * size)
    estimate.cluster, estimate.clusters, estimate.mean_cluster_size = cluster, count, size
    estimate.icc, estimate.design_effect = icc, effect
    # The clusters' means are the units: their spread rests on count − 1 degrees of freedom.
    estimate.power_range = list(power_range(scaled, diff, alpha, n, max(count - 1, 1)))
    if count < 10:
        notes.append(f"only {count} clusters in the pilot: the ICC is a rough estimate")
    _pilot_note(estimate, count, "clusters")
    log.debug("power: %s clusters of %.1f examples, ICC %.3f", count, size, icc)
    return estimate
