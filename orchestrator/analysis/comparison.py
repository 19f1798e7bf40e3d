"""The typed result of `compare`: per output and per pair of runs, the paired statistics;
for a judge comparison, how far the runs agree; which examples each run lacks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Kind = Literal["judge", "system"]

# The columns of a paired-differences table, as the terminal and the comparison page show it.
DIFFERENCE_COLUMNS = [
    "output",
    "a → b",
    "n",
    "mean a",
    "mean b",
    "b − a",
    "95% CI",
    "p",
    "Holm",
    "d_z",
    "W/T/L",
]


# Below this fraction of the numbers it was computed from, a value is float rounding (a
# mean of differences that cancel leaves ~1e-17), not a finding.
NOISE = 1e-12


def format_number(value: float | None, digits: int = 3, *, scale: float = 1.0) -> str:
    """A comparison's number as the table and the HTML page print it ("—" for none); one
    within rounding noise of zero, relative to `scale` (the size of its inputs), prints 0."""
    if value is None:
        return "—"
    if abs(value) <= NOISE * max(1.0, abs(scale)):
        value = 0.0  # also turns -0.0 into 0.0: a sign on nothing reads as a direction
    # Fixed decimals read best in a column; a small real value keeps `digits` significant
    # digits rather than showing as 0.000.
    return f"{value:.{digits}g}" if 0 < abs(value) < 1e-3 else f"{value:.{digits}f}"


def format_p(value: float | None) -> str:
    """A p-value as printed: below 0.001 the digits mean little at these sample sizes."""
    if value is None:
        return "—"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


EFFECT_SIZE = "paired Cohen's d_z: mean difference / sd of the differences (ddof 1)"


class RunInfo(BaseModel):
    """One compared run: where it came from, what judged it, which examples it lacks."""

    label: str
    path: str | None = None
    graph: str | None = None
    graph_hash: str | None = None
    model: str | None = None
    dataset_hash: str | None = None
    examples: int = 0  # result lines (one per example)
    ok: int = 0
    failed: list[str] = Field(default_factory=list)  # ids whose line failed
    abstained: list[str] = Field(default_factory=list)  # ids whose judge abstained (`abstain:`)
    missing: list[str] = Field(default_factory=list)  # ids another run has and this lacks


class Interval(BaseModel):
    """A confidence interval of the mean difference.

    `compare` gives "sign-flip": every mean difference the sign-flip test does not reject
    (`draws` says whether its sign vectors were enumerated or drawn, `resamples` how many),
    so it excludes 0 exactly when p < 1 − level; "bca" and "percentile" are bootstrap
    intervals (`resamples` resampled data sets).
    """

    low: float
    high: float
    level: float
    method: Literal["sign-flip", "bca", "percentile"]
    resamples: int
    seed: int
    draws: Literal["exact", "monte-carlo"] | None = None  # sign-flip only


class Correlation(BaseModel):
    """How two judges' scores of the same examples move together (None: a side is constant)."""

    pearson: float | None = None
    spearman: float | None = None
    kendall_tau_b: float | None = None


class PairDifference(BaseModel):
    """Run b against run a on one numeric output, over the examples both scored."""

    run_a: str
    run_b: str
    n: int
    mean_a: float | None = None
    mean_b: float | None = None
    difference: float | None = None  # mean_b − mean_a = the mean of the differences
    # None with fewer than two examples, or too few for the test to reject any mean
    # difference at this level (five or fewer: the smallest p is 2/2^n ≥ 0.0625)
    ci: Interval | None = None
    p: float | None = None  # two-sided sign-flip (paired permutation) test
    p_method: Literal["exact", "monte-carlo"] | None = None
    p_count: int = 0  # sign vectors enumerated (exact) or drawn (Monte Carlo)
    clusters: int | None = None  # `cluster=`: the clusters whose signs were flipped
    p_holm: float | None = None  # adjusted over this output's pairs
    effect_size: float | None = None  # d_z (see EFFECT_SIZE); None when undefined
    wins: int = 0  # examples where b scored higher than a
    ties: int = 0
    losses: int = 0  # examples where b scored lower than a
    agreement: Correlation | None = None  # judge comparisons only


class OutputComparison(BaseModel):
    """One numeric output across the runs: each run's mean and every pair's difference."""

    output: str
    means: dict[str, float | None]  # run label → mean over its ok examples with a value
    counts: dict[str, int]  # run label → how many values that mean is over
    pairs: list[PairDifference]


class LabelAgreement(BaseModel):
    """Two judges' labels on the examples both labelled: raw agreement, κ, verdict flips."""

    run_a: str
    run_b: str
    n: int
    agreement: float | None = None  # share of examples given the same label
    kappa: float | None = None  # Cohen's κ, unweighted
    kappa_quadratic: float | None = None  # quadratic-weighted κ, numeric labels only
    flips: int | None = None  # verdicts only: one run picked one side, the other the other
    flip_rate: float | None = None  # flips / examples where both picked a side


class LabelComparison(BaseModel):
    """One categorical output across the runs of a judge comparison."""

    output: str
    values: list[str]  # the labels seen, as text
    verdict: bool = False  # a pairwise winner: flips are counted
    pairs: list[LabelAgreement]


class GroupComparison(BaseModel):
    """The paired comparison within one group of examples (`compare --by FIELD`)."""

    key: str  # the field's value the group's examples share
    n: int  # the group's examples ok in every run
    outputs: list[OutputComparison] = Field(default_factory=list)

    def output(self, name: str) -> OutputComparison:
        """The group's comparison of one numeric output (KeyError when not compared)."""
        for found in self.outputs:
            if found.output == name:
                return found
        raise KeyError(name)


class StyleControl(BaseModel):
    """One pairwise run's ratings plain and style-controlled (`compare` of pairwise runs):
    per dimension, Bradley–Terry with and without the style covariates and each pair's win
    rate with and without AlpacaEval's length control, as compute's functions return them."""

    run: str  # the run's label
    matches: int
    bradley_terry: dict[str, Any] = Field(default_factory=dict)
    length_controlled: dict[str, Any] = Field(default_factory=dict)


class Comparison(BaseModel):
    """What `compare` found; `outputs` is empty when no numeric output is shared."""

    kind: Kind
    kind_reason: str
    runs: list[RunInfo]
    common: int  # examples ok in every run
    outputs: list[OutputComparison] = Field(default_factory=list)
    labels: list[LabelComparison] = Field(default_factory=list)
    level: float = 0.95
    resamples: int = 2000
    permutations: int = 10_000
    seed: int = 0
    correction: Literal["holm"] = "holm"
    effect_size: str = EFFECT_SIZE
    notes: list[str] = Field(default_factory=list)
    by: str | None = None  # the field the examples were grouped by (`compare --by`)
    cluster: str | None = None  # the field examples are nested in (`compare --cluster`)
    groups: list[GroupComparison] = Field(default_factory=list)  # one per value of `by`
    ungrouped: int = 0  # examples with no value of `by`, in no group
    style: list[StyleControl] = Field(default_factory=list)  # pairwise runs: style control

    def group(self, key: str) -> GroupComparison:
        """The comparison within one group, by the field's value (KeyError when none)."""
        for found in self.groups:
            if found.key == key:
                return found
        raise KeyError(key)

    def output(self, name: str) -> OutputComparison:
        """The comparison of one numeric output, by name (KeyError when not compared)."""
        for found in self.outputs:
            if found.output == name:
                return found
        raise KeyError(name)

    def pair(self, name: str, run_a: str | int = 0, run_b: str | int = 1) -> PairDifference:
        """One output's pair by run labels or positions (a before b, as given to compare)."""
        labels = [run.label for run in self.runs]
        first = labels[run_a] if isinstance(run_a, int) else run_a
        second = labels[run_b] if isinstance(run_b, int) else run_b
        for found in self.output(name).pairs:
            if (found.run_a, found.run_b) == (first, second):
                return found
        raise KeyError((name, first, second))

    def method_note(self) -> str:
        """How the numbers were computed, in one sentence (the table's and page's footer)."""
        every = [o for o in self.outputs] + [o for g in self.groups for o in g.outputs]
        methods = {p.p_method for o in every for p in o.pairs if p.p_method}
        test = " / ".join(
            "exact (all 2^n signs)"
            if m == "exact"
            else f"Monte Carlo ({self.permutations} draws), seed {self.seed}"
            for m in sorted(methods)
        )
        kinds = {p.ci.method for o in every for p in o.pairs if p.ci is not None}
        alpha = f"{1.0 - self.level:.2g}"
        names = {
            "sign-flip": f"the differences the test does not reject (excludes 0 iff p < {alpha})",
            "bca": f"BCa bootstrap, {self.resamples} resamples",
            "percentile": f"percentile bootstrap, {self.resamples} resamples",
        }
        interval = " / ".join(names[m] for m in sorted(kinds))
        clustered = ""
        if self.cluster is not None:
            counts = sorted({p.clusters for o in every for p in o.pairs if p.clusters})
            shown = f"{counts[0]}–{counts[-1]}" if len(counts) > 1 else "".join(map(str, counts))
            clustered = (
                f"clustered by {self.cluster} ({shown or 'no'} clusters): the test flips the "
                "signs of whole clusters' difference sums; "
            )
            test = test.replace("2^n signs", "2^clusters signs")
        return (
            clustered
            + f"CI: {interval or 'none'}; p: two-sided sign-flip test, {test or 'not run'}; "
            "Holm over each "
            "output's pairs; d_z = mean difference / sd of the differences; W/T/L: examples "
            "where b scored higher / the same / lower."
            + (
                f" Per {self.by}: the same statistics within each group, Holm over each "
                "output's pairs in every group together."
                if self.by
                else ""
            )
        )
