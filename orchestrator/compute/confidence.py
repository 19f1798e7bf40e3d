"""How sure a judge was of one answer: the one definition `calibrate` measures and an LLM
node's `abstain:` key applies at run time, so a threshold picked by one means the same in
the other.

Confidence is the probability of the token where the judge started writing the field's
value (a node asked for `logprobs:`), or the share of its n samples that agree with their
most common value (a node asked for `n:` > 1; ties: the first seen). Both `calibrate` and
`abstain:` take it from `judged`, which needs only the node's value: the run's result field
(a median of the samples, say) is not known where `abstain:` applies it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from .expert import score_position

__all__ = [
    "ASK_FOR_CONFIDENCE",
    "Judged",
    "confidence",
    "field_value",
    "judged",
    "majority",
    "token_confidence",
    "wrong_answer",
]

Source = Literal["logprobs", "samples"]

# What to ask a node for when it has no confidence: calibrate's refusal and the graph
# checks of `abstain:` both say it in these words.
ASK_FOR_CONFIDENCE = (
    "`logprobs: 5` (a server that returns them) or `n: 5` with a temperature above 0 on the node"
)


def field_value(row: dict[str, Any], field: str) -> Any:
    """A result field, with dots reaching into nested objects (`judge.score`)."""
    value: Any = row
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def wrong_answer(answer: Any, truth: Any, tolerance: float) -> bool:
    """Whether two answers differ: a different choice (case and outer spaces aside), or
    scores further apart than `tolerance`."""
    numeric = (int, float)
    if isinstance(answer, numeric) and isinstance(truth, numeric):
        return abs(float(answer) - float(truth)) > tolerance
    return str(answer).strip().casefold() != str(truth).strip().casefold()


def token_confidence(value: dict[str, Any], field: str) -> float | None:
    """Probability of the token where the judge started writing `field`'s value; None when
    the value carries no token logprobs or the field is not found in them."""
    tokens = value.get("_logprobs")
    if not tokens:
        return None
    try:
        index, _ = score_position(tokens, field.split(".")[-1])
    except ValueError:
        return None
    return math.exp(float(tokens[index].get("logprob", 0.0)))


def _said(samples: list[Any], field: str) -> list[Any]:
    """Each sample's value of `field` (None where a sample lacks it)."""
    return [field_value(s, field) if isinstance(s, dict) else s for s in samples]


def confidence(
    value: Any, field: str, answer: Any, tolerance: float
) -> tuple[float, Source] | None:
    """One node value's confidence in `answer` and where it came from; None when the value
    has neither token logprobs nor several samples. `judged` calls it with the samples'
    majority as `answer`: that is the confidence calibrate and `abstain:` use."""
    if isinstance(value, dict):
        found = token_confidence(value, field)
        return None if found is None else (found, "logprobs")
    if isinstance(value, list) and len(value) > 1:
        said = _said(value, field)
        agree = sum(s is not None and not wrong_answer(s, answer, tolerance) for s in said)
        return agree / len(value), "samples"
    return None


def majority(samples: list[Any], field: str) -> Any:
    """The most common value of `field` among samples (agreeing as `wrong_answer` with no
    tolerance judges it; ties go to the first seen); None when no sample has one."""
    said = [s for s in _said(samples, field) if s is not None]
    best, most = None, 0
    for candidate in said:
        count = sum(not wrong_answer(s, candidate, 0.0) for s in said)
        if count > most:  # strictly more: a tie keeps the earlier candidate
            best, most = candidate, count
    return best


@dataclass(frozen=True, slots=True)
class Judged:
    """A node value's answer for one field, how sure the judge was of it, and from what."""

    answer: Any
    confidence: float
    source: Source


def judged(value: Any, field: str, tolerance: float = 0.0) -> Judged | None:
    """The answer a node value gives for `field` and its confidence, as `calibrate` measures
    it with the same `tolerance`: the value's own field (with logprobs) or the samples'
    majority (with n > 1), samples within `tolerance` of it agreeing. None when the value
    has no confidence to give."""
    if isinstance(value, dict):
        answer = field_value(value, field)
    elif isinstance(value, list) and len(value) > 1:
        answer = majority(value, field)
    else:
        return None
    found = confidence(value, field, answer, tolerance)
    return None if found is None else Judged(answer, found[0], found[1])
