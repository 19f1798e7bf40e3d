"""An LLM node's `abstain: {threshold: T, field: F}`: when the judge is less sure of F than
T, its example ends "abstained" instead of answered, and the nodes after it do not run.

The confidence is `compute.confidence.judged`, the measure `orchestrator calibrate` picks
its threshold with, so a threshold it found applies here unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..compute import ASK_FOR_CONFIDENCE, judged
from ..errors import NodeAbstained, NodeError
from ..store import AbstainCheck
from .base import evaluate

if TYPE_CHECKING:
    from ..graph import Expression, FieldSpec, NodeScope, Sampling
    from ..store import NodeRecord

__all__ = ["Abstain", "AbstainRule", "compile_abstain", "field_known", "no_confidence"]


class Abstain(BaseModel):
    """`abstain:` as a graph file writes it: a threshold in [0, 1] (or an expression such as
    `params.abstain_at`) and the output field whose confidence is judged."""

    model_config = ConfigDict(extra="forbid")

    threshold: float | str
    field: str | None = None  # may be left out when the output has one field
    # Samples within this of their majority agree with it: calibrate's `--tolerance`.
    tolerance: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

    @field_validator("threshold", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected a number or an expression string, not true/false")
        return value


def _threshold_problem(value: Any) -> str | None:
    """Why a threshold value cannot be used, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"the threshold must be a number between 0 and 1, got {value!r}"
    if not 0.0 <= float(value) <= 1.0:
        return f"the threshold must be between 0 and 1, got {value}"
    return None


@dataclass
class AbstainRule:
    """A compiled `abstain:` key: the field judged and the threshold (a literal, or an
    expression evaluated per call)."""

    field: str
    threshold: float | None = None
    expression: Expression | None = None
    tolerance: float = 0.0

    def check(
        self, node: str, ctx: dict[str, Any], value: Any, rec: NodeRecord
    ) -> Exception | None:
        """Judge one reply: note the confidence on `rec`, and return the error that ends the
        example (NodeAbstained below the threshold; NodeError when the reply carries no
        confidence), or None when the node answers. `rec` is marked as that error says."""
        threshold = self.threshold
        if self.expression is not None:
            raw = evaluate(self.expression, ctx, node, "abstain.threshold")
            problem = _threshold_problem(raw)
            if problem is not None:
                return _failed(rec, NodeError(node, f"abstain.threshold: {problem}"))
            threshold = float(raw)
        assert threshold is not None
        found = judged(value, self.field, self.tolerance)
        if found is None:
            message = (
                f"abstain: the reply has neither token logprobs nor several samples to judge "
                f"'{self.field}' by: ask for {ASK_FOR_CONFIDENCE}"
            )
            return _failed(rec, NodeError(node, message))
        rec.abstain = AbstainCheck(
            field=self.field,
            threshold=threshold,
            confidence=found.confidence,
            source=found.source,
        )
        if found.confidence >= threshold:
            return None
        abstained = NodeAbstained(node, found.confidence, threshold)
        rec.status = "abstained"
        rec.error = abstained.message
        return abstained


def _failed(rec: NodeRecord, error: NodeError) -> NodeError:
    rec.status = "failed"
    rec.error = error.message
    return error


def field_known(output: dict[str, FieldSpec], path: str) -> bool:
    """Whether a dotted field path names a field of the output schema."""
    fields: dict[str, FieldSpec] | None = output
    for part in path.split("."):
        if not fields or part not in fields:
            return False
        fields = fields[part].fields
    return True


def no_confidence(sampling: Sampling) -> bool:
    """Whether a node's sampling surely gives no confidence: neither token logprobs nor
    several samples (an expression may give either: it is judged per call instead)."""
    n, logprobs = sampling.n, sampling.logprobs
    known = not isinstance(n, str) and not isinstance(logprobs, str)
    return known and not logprobs and int(n or 1) <= 1


def compile_abstain(
    spec: Abstain, output: dict[str, FieldSpec], sampling: Sampling, once: bool, scope: NodeScope
) -> AbstainRule | None:
    """The rule of a node's `abstain:` key, each problem reported through `scope`."""
    fields = ", ".join(output)
    field = spec.field
    if field is None:
        if len(output) == 1:
            field = next(iter(output))
        else:
            scope.problem(f"the output has several fields ({fields}): name one", "abstain.field")
    elif not field_known(output, field):
        scope.problem(f"'{field}' is not a field of the output ({fields})", "abstain.field")
        field = None
    rule = AbstainRule(field or "", tolerance=spec.tolerance)
    if isinstance(spec.threshold, str):
        rule.expression = scope.expression(spec.threshold, "abstain.threshold")
    elif (problem := _threshold_problem(spec.threshold)) is not None:
        scope.problem(problem, "abstain.threshold")
    else:
        rule.threshold = float(spec.threshold)
    if no_confidence(sampling):
        scope.problem(
            "abstain needs a confidence, and the node asks for neither token logprobs nor "
            f"several samples: ask for {ASK_FOR_CONFIDENCE}",
            "abstain",
        )
    if once:
        scope.problem(
            "abstain on a once node would abstain on every example at once: put it on a node "
            "that runs per example",
            "abstain",
        )
    return rule if field is not None else None
