"""The typed judge card and its parts, as `judge_card` returns them and `--format json`
dumps them; every statistic carries the numbers it was computed from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

# A part's `ci`: a percentile bootstrap interval unless the part says otherwise.
from ...stats import Interval as Interval
from ..stress import StressReport
from .stability import Retest


class Reliability(BaseModel):
    """How an LLM node's calls went for one model: what the trace's attempts add up to."""

    node: str
    model: str | None
    calls: int  # node runs (foreach items counted one by one) that asked the model
    first_try_invalid: int  # calls whose first reply failed validation or was cut off
    reasks: int  # replies asked for again after an invalid or truncated one
    truncations: int  # replies cut off at max_tokens
    failures: int  # calls that ended failed
    transport_failures: int  # requests that never got a reply
    abstentions: int = 0  # calls whose judge was less sure than its `abstain:` threshold


class Distribution(BaseModel):
    """How one numeric output field of a node is spread over the values it took."""

    node: str
    model: str | None
    field: str
    n: int
    shares: dict[str, float]  # value (as text) -> share of the scores
    entropy: float  # Shannon entropy in bits; 0 when every score is the same
    extremes: float  # share at the lowest or highest value the field took (or its bounds)


class LengthBias(BaseModel):
    """Spearman between a pointwise score and the length (characters) of the judged text."""

    node: str
    model: str | None
    field: str
    judged: str  # the input the judge judged (graph key `judged:`)
    n: int
    spearman: float | None
    ci: Interval | None
    p: float | None


class PreferLonger(BaseModel):
    """Pairwise: how often a decisive vote goes to the longer of two texts of unequal length."""

    votes: str  # the result field that holds the votes
    judge: str
    comparisons: int  # pairs (per example and dimension) with a decisive vote on unequal texts
    decisive_votes: int
    rate: float | None
    ci: Interval | None
    p: float | None


class PositionBias(BaseModel):
    """Pairwise: the share of decisive votes for the first slot, and swap consistency."""

    votes: str
    judge: str
    decisive_votes: int
    first_rate: float | None
    ci: Interval | None
    p: float | None
    comparisons_both_orders: int
    flip_rate: float | None  # each order's verdict picks a different text
    inconsistent_rate: float | None  # flips plus a tie in one order against a win in the other


class SelfPreference(BaseModel):
    """The gap between a judge's scores for its own model's texts and for the others'."""

    node: str
    model: str
    field: str
    generator_field: str
    own: int
    others: int
    gap: float | None  # mean score of own texts minus mean score of the others
    ci: Interval | None
    p: float | None


class Agreement(BaseModel):
    """Agreement with people: the meta-eval statistics (with intervals and ceiling)."""

    labels: str
    field: str | None
    statistics: dict[str, Any]  # what `meta_eval` returns, kept whole


class JuryPair(BaseModel):
    """Krippendorff's α (interval) between two jurors over the examples both scored."""

    a: str
    b: str
    n: int
    alpha: float | None


class Jury(BaseModel):
    """Jurors that score the same examples: how much they agree and how many really differ."""

    jurors: list[str]
    field: str
    n: int  # examples every juror scored
    pairs: list[JuryPair]
    effective_jurors: float | None  # participation ratio of the correlation matrix


class Finding(BaseModel):
    """One tested effect of the card: its raw and Holm-adjusted p, and the sentence a flag says."""

    kind: str
    where: str
    p: float
    p_holm: float
    flagged: bool
    text: str


class JudgeCard(BaseModel):
    """Everything the card says about a run's judges; `flags` lists the surviving findings."""

    run_dir: str
    graph: str | None
    judged: str
    alpha: float = 0.05
    reliability: list[Reliability] = Field(default_factory=list)
    distributions: list[Distribution] = Field(default_factory=list)
    length_bias: list[LengthBias] = Field(default_factory=list)
    prefer_longer: list[PreferLonger] = Field(default_factory=list)
    position_bias: list[PositionBias] = Field(default_factory=list)
    self_preference: list[SelfPreference] = Field(default_factory=list)
    agreement: Agreement | None = None
    juries: list[Jury] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    # Test-retest stability (`--retest`): the repeats' record, when a retest was asked for.
    stability: Retest | None = None
    # The stress tests kept in the run folder (`orchestrator stress`), each with its own
    # Holm correction and flags.
    stress: list[StressReport] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # `--cluster FIELD`: the row field examples are nested in, and how many clusters it has;
    # the card's bootstraps and sign-flip tests then draw and flip whole clusters.
    cluster: str | None = None
    clusters: int | None = None
