"""ExPerT compute nodes: matched pairs, the explanation and the 15 P/R/F scores; plus the
G-Eval score (probability-weighted over score tokens). Truncation before extraction lives in
truncate.py and is importable from here too.

The scores are a pure function of the explanation (`scores_from_explanation`), so anyone can
recompute them from a result line; the report imports the same functions.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, get_args

from .registry import register
from .truncate import truncate_to_tokens, truncate_with, truncate_with_server

__all__ = [
    "AGGREGATIONS",
    "FAILED_JUDGMENT",
    "NO_LOGPROBS",
    "SCORE_KEYS",
    "aspect_credit",
    "build_explanation",
    "expert_pairs",
    "expert_scores",
    "f1",
    "failed_judgment_aspects",
    "is_matched",
    "logprob_weighted_score",
    "mean_credit",
    "scores_from_explanation",
    "truncate_to_tokens",
    "truncate_with",
    "truncate_with_server",
]

AGGREGATIONS = (
    "content_only",
    "style_only",
    "content_and_style",
    "content_or_style",
    "content_style_average",
)
SCORE_KEYS = tuple(f"{a}_{m}" for a in AGGREGATIONS for m in ("recall", "precision", "f1"))
NO_MATCH = "none"
# What a failed content or style call does to the other verdict of the same aspect:
# `reference` counts both as no (expert-score does), `keep_other` keeps the one that succeeded.
FailedJudgment = Literal["reference", "keep_other"]
FAILED_JUDGMENT: tuple[str, ...] = get_args(FailedJudgment)

# --------------------------------------------------------------------------------------------
# Matched pairs
# --------------------------------------------------------------------------------------------


def _match_id(match: Any) -> str | None:
    """The matched aspect id of one matching value, None when unmatched, failed or skipped."""
    if not isinstance(match, dict) or match.get("failed"):
        return None
    found = match.get("matched_id")
    return None if found in (None, NO_MATCH) else str(found)


def _pair_key(reference_id: str, output_id: str) -> str:
    return f"{reference_id}|{output_id}"


@register("expert_pairs")
def expert_pairs(
    side: str,
    aspects: list[dict[str, Any]],
    others: list[dict[str, Any]],
    matches: list[Any] | None,
    judged: list[Any] | None = None,
) -> list[dict[str, Any] | None]:
    """One entry per aspect of `side`: the (reference, output) pair its match names, or None.

    None means no alignment call: unmatched, failed, or — when `judged` (the recall side's
    pairs) already holds the same pair — judged there and reused.
    """
    if side not in ("recall", "precision"):
        raise ValueError(f"side must be 'recall' or 'precision', got {side!r}")
    matches = matches or []
    by_id = {o["id"]: o for o in others}
    done = {p["key"] for p in (judged or []) if p}
    pairs: list[dict[str, Any] | None] = []
    for index, aspect in enumerate(aspects):
        other_id = _match_id(matches[index]) if index < len(matches) else None
        other = by_id.get(other_id) if other_id else None
        if other is None:
            pairs.append(None)
            continue
        reference, output = (aspect, other) if side == "recall" else (other, aspect)
        key = _pair_key(reference["id"], output["id"])
        pair = {"key": key, "reference": reference, "output": output}
        pairs.append(None if key in done else pair)
    return pairs


# --------------------------------------------------------------------------------------------
# Explanation and scores
# --------------------------------------------------------------------------------------------


def _verdict(value: Any) -> tuple[bool, str | None, str | None]:
    """(verdict, reason, error) of one alignment call; a failed call counts as False."""
    if isinstance(value, dict) and value.get("failed"):
        return False, None, str(value.get("error"))
    if isinstance(value, dict) and isinstance(value.get("verdict"), bool):
        return value["verdict"], value.get("reason"), None
    return False, None, "no judgment was made for this pair"


def _side(
    side: str,
    aspects: list[dict[str, Any]],
    others: list[dict[str, Any]],
    matches: list[Any] | None,
    content: list[Any] | None,
    style: list[Any] | None,
    shared: dict[str, tuple[Any, Any]],
    failed_judgment: str,
) -> list[dict[str, Any]]:
    matches = matches or []
    content = content or []
    style = style or []
    by_id = {o["id"]: o for o in others}
    entries = []
    for index, aspect in enumerate(aspects):
        match = matches[index] if index < len(matches) else None
        entry: dict[str, Any] = {
            "id": aspect["id"],
            "aspect": aspect.get("title"),
            "description": aspect.get("description"),
            "evidence": list(aspect.get("evidence") or []),
            "matched": False,
            "matched_id": None,
            "matched_aspect": None,
            "match_reason": None,
            "content": None,
            "style": None,
            "content_reason": None,
            "style_reason": None,
            "failed": False,
        }
        entries.append(entry)
        if isinstance(match, dict) and match.get("failed"):
            # ExPerT's reference counts an aspect it could not match as unmatched; we do
            # too, but say so.
            entry["failed"] = True
            entry["failed_calls"] = ["match"]
            entry["error"] = f"matching failed: {match.get('error')}"
            entry["match_reason"] = "not matched because the matching call failed"
            continue
        if not isinstance(match, dict):
            entry["match_reason"] = "not matched: the other text has no aspects"
            continue
        entry["match_reason"] = match.get("reason")
        other_id = _match_id(match)
        other = by_id.get(other_id) if other_id else None
        if other is None:
            continue
        entry.update(matched=True, matched_id=other["id"], matched_aspect=other.get("title"))
        if side == "recall":
            key = _pair_key(aspect["id"], other["id"])
        else:
            key = _pair_key(other["id"], aspect["id"])
        own_content = content[index] if index < len(content) else None
        own_style = style[index] if index < len(style) else None
        if own_content is None and own_style is None and key in shared:
            own_content, own_style = shared[key]
            entry["judged_on"] = "recall"
        else:
            entry["judged_on"] = side
        _judge(entry, own_content, own_style, failed_judgment)
    return entries


def _judge(entry: dict[str, Any], content: Any, style: Any, failed_judgment: str) -> None:
    """Fill an entry's two verdicts; a failed call is a no, and under `reference` so is the
    other verdict (the judge's own answer stays under `overridden`)."""
    failed: list[str] = []
    errors = []
    for name, value in (("content", content), ("style", style)):
        verdict, reason, error = _verdict(value)
        entry[name] = verdict
        entry[f"{name}_reason"] = reason if error is None else f"counted as no: {error}"
        if error is not None:
            failed.append(name)
            errors.append(f"{name} judgment failed: {error}")
    if not failed:
        return
    entry["failed"] = True
    entry["failed_calls"] = failed
    entry["error"] = "; ".join(errors)
    if failed_judgment != "reference":
        return
    for name in ("content", "style"):
        if name in failed:
            continue
        lost = failed[0]
        said = "yes" if entry[name] else "no"
        if entry[name]:
            entry.setdefault("overridden", {})[name] = True
        entry[name] = False
        entry[f"{name}_reason"] = (
            f"counted as no because the {lost} judgment failed (failed_judgment=reference); "
            f"the judge said {said}: {entry[f'{name}_reason']}"
        )


def build_explanation(
    reference_aspects: list[dict[str, Any]],
    output_aspects: list[dict[str, Any]],
    recall_match: list[Any] | None,
    precision_match: list[Any] | None,
    recall_content: list[Any] | None,
    recall_style: list[Any] | None,
    precision_content: list[Any] | None,
    precision_style: list[Any] | None,
    failed_judgment: FailedJudgment = "reference",
) -> dict[str, list[dict[str, Any]]]:
    """The per-aspect explanation of both sides from the graph's node values."""
    _check_failed_judgment(failed_judgment)
    shared: dict[str, tuple[Any, Any]] = {}
    for index, aspect in enumerate(reference_aspects):
        match = recall_match[index] if recall_match and index < len(recall_match) else None
        other = _match_id(match)
        if other is not None:
            c = recall_content[index] if recall_content and index < len(recall_content) else None
            s = recall_style[index] if recall_style and index < len(recall_style) else None
            shared[_pair_key(aspect["id"], other)] = (c, s)
    return {
        "recall": _side(
            "recall",
            reference_aspects,
            output_aspects,
            recall_match,
            recall_content,
            recall_style,
            {},
            failed_judgment,
        ),
        "precision": _side(
            "precision",
            output_aspects,
            reference_aspects,
            precision_match,
            precision_content,
            precision_style,
            shared,
            failed_judgment,
        ),
    }


def _check_failed_judgment(value: str) -> None:
    if value not in FAILED_JUDGMENT:
        raise ValueError(
            f"failed_judgment must be one of {', '.join(FAILED_JUDGMENT)}, got {value!r}"
        )


def failed_judgment_aspects(explanation: dict[str, list[dict[str, Any]]]) -> int:
    """Aspects (both sides) whose content or style call failed: the credits the
    failed_judgment convention can touch."""
    return sum(
        bool({"content", "style"} & set(e.get("failed_calls") or []))
        for side in explanation.values()
        for e in side
    )


def is_matched(entry: Any) -> bool:
    """Whether an explanation entry counts as matched (the report draws the same lines)."""
    return isinstance(entry, dict) and bool(entry.get("matched"))


def aspect_credit(entry: dict[str, Any], aggregation: str) -> float:
    """ε for one aspect: 0 when unmatched, else the aggregation of its two verdicts.

    The one definition of ExPerT's per-aspect credit: the scores and the report's
    explanation of them both use it, so they cannot disagree.
    """
    if not is_matched(entry):
        return 0.0
    content = entry.get("content") is True
    style = entry.get("style") is True
    if aggregation == "content_only":
        return float(content)
    if aggregation == "style_only":
        return float(style)
    if aggregation == "content_and_style":
        return float(content and style)
    if aggregation == "content_or_style":
        return float(content or style)
    if aggregation == "content_style_average":
        return 0.5 * content + 0.5 * style
    raise ValueError(f"unknown aggregation {aggregation!r}")


def mean_credit(entries: list[dict[str, Any]], aggregation: str) -> float:
    """R (over reference aspects) or P (over output aspects): the mean credit, 0 if none."""
    if not entries:
        return 0.0
    return sum(aspect_credit(e, aggregation) for e in entries) / len(entries)


def f1(precision: float, recall: float) -> float:
    total = precision + recall
    return 0.0 if total == 0 else 2 * precision * recall / total


def scores_from_explanation(explanation: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """The 15 ExPerT scores: R over reference aspects, P over output aspects, F1 of the two."""
    scores: dict[str, float] = {}
    for aggregation in AGGREGATIONS:
        recall = mean_credit(explanation.get("recall") or [], aggregation)
        precision = mean_credit(explanation.get("precision") or [], aggregation)
        scores[f"{aggregation}_recall"] = recall
        scores[f"{aggregation}_precision"] = precision
        scores[f"{aggregation}_f1"] = f1(precision, recall)
    return scores


@register("expert_scores")
def expert_scores(
    reference_aspects: list[dict[str, Any]] | None,
    output_aspects: list[dict[str, Any]] | None,
    recall_match: list[Any] | None,
    precision_match: list[Any] | None,
    recall_content: list[Any] | None,
    recall_style: list[Any] | None,
    precision_content: list[Any] | None,
    precision_style: list[Any] | None,
    failed_judgment: Literal["reference", "keep_other"] = "reference",
) -> dict[str, Any]:
    """Explanation, 15 scores, headline score and failed-aspect counts. `failed_judgment`:
    `reference` (a failed content/style call makes both verdicts no) or `keep_other`."""
    explanation = build_explanation(
        reference_aspects or [],
        output_aspects or [],
        recall_match,
        precision_match,
        recall_content,
        recall_style,
        precision_content,
        precision_style,
        failed_judgment,
    )
    scores = scores_from_explanation(explanation)
    failed = sum(e["failed"] for side in explanation.values() for e in side)
    return {
        "scores": scores,
        "score": scores["content_style_average_f1"],
        "explanation": explanation,
        "failed_aspects": failed,
        "failed_judgments": failed_judgment_aspects(explanation),
    }


# --------------------------------------------------------------------------------------------
# G-Eval: the expected score under the judge's own token distribution
# --------------------------------------------------------------------------------------------

NO_LOGPROBS = (
    "the server gave no logprobs for this call, and the G-Eval score is a weighted mean over "
    "the score tokens' probabilities: use a server that returns logprobs/top_logprobs "
    "(vLLM does), or pass --structured server/prompt explicitly if the canary chose a mode "
    "that drops them"
)


def score_position(tokens: list[dict[str, Any]], field: str) -> tuple[int, str]:
    """Index of the token where the value of `"field":` starts, and the text of that token
    before the value (e.g. ':' when a tokenizer glues the colon to the digit)."""
    starts = []
    text = ""
    for token in tokens:
        starts.append(len(text))
        text += str(token.get("token", ""))
    key = re.search(r'"' + re.escape(field) + r'"\s*:\s*', text)
    if key is None:
        raise ValueError(f"no '{field}' key found in the tokens the server returned")
    value_start = key.end()
    for index in range(len(tokens) - 1, -1, -1):
        if starts[index] <= value_start and value_start < starts[index] + len(
            str(tokens[index].get("token", ""))
        ):
            return index, text[starts[index] : value_start]
    raise ValueError(f"the value of '{field}' is not in the returned tokens")


@register("logprob_weighted_score")
def logprob_weighted_score(value: dict[str, Any], field: str, allowed: list[int]) -> float:
    """Σ p(s)·s / Σ p(s) over allowed scores s, from the top logprobs where `field` is written.

    `value` is an LLM node's value with `_logprobs` (list of {token, logprob, top}).
    """
    tokens = value.get("_logprobs") if isinstance(value, dict) else None
    if not tokens:
        raise ValueError(NO_LOGPROBS)
    index, prefix = score_position(tokens, field)
    chosen = tokens[index]
    candidates = dict(chosen.get("top") or {})
    candidates.setdefault(str(chosen.get("token")), float(chosen.get("logprob", 0.0)))
    valid = {str(a): int(a) for a in allowed}
    mass: dict[int, float] = {}
    for token, logprob in candidates.items():
        if not token.startswith(prefix):
            continue
        digits = re.match(r"\s*(\d+)", token[len(prefix) :])
        if digits is None or digits.group(1) not in valid:
            continue
        score = valid[digits.group(1)]
        mass[score] = mass.get(score, 0.0) + math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        raise ValueError(
            f"none of the top tokens where '{field}' is written is an allowed score "
            f"({sorted(valid.values())}); saw {sorted(candidates)}"
        )
    return sum(score * p for score, p in mass.items()) / total
