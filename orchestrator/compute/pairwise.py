"""Per-example machinery for pairwise judging: ordered comparisons, votes, verdicts.

A pairwise protocol shows a judge two texts and asks which is better. Judges favour a
position, so every pair is shown in both orders and every answer ("first", "second",
"tie", or a protocol's own labels such as "A"/"B") is mapped back to the generator that
sat in that position. Everything here is a plain function over lists and dicts.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Any, Literal

from .registry import register
from .style import style_features

TIE = "tie"
POSITIONS = ("first", "second", TIE)
DEFAULT_POSITIONS: dict[str, str] = {"first": "first", "second": "second", "tie": TIE}


def pair_key(a: str, b: str) -> str:
    """The canonical name of an unordered pair: the two names sorted, joined by '|'."""
    first, second = sorted((a, b))
    return f"{first}|{second}"


def _named(candidates: list[dict[str, Any]] | dict[str, Any]) -> list[dict[str, Any]]:
    """Candidates as a list of {name, text}, from either accepted shape."""
    if isinstance(candidates, dict):
        items = [{"name": str(k), "text": v} for k, v in candidates.items()]
    elif isinstance(candidates, list | tuple):
        items = []
        for position, entry in enumerate(candidates):
            if not isinstance(entry, dict) or "name" not in entry or "text" not in entry:
                raise ValueError(f"candidate {position} must be an object with 'name' and 'text'")
            items.append({**entry, "name": str(entry["name"])})
    else:
        raise ValueError(
            f"candidates must be a list of {{name, text}} or a name→text mapping, "
            f"got {type(candidates).__name__}"
        )
    names = [c["name"] for c in items]
    duplicated = sorted(n for n, count in Counter(names).items() if count > 1)
    if duplicated:
        raise ValueError(f"candidate names must be unique; repeated: {', '.join(duplicated)}")
    if "|" in "".join(names):
        raise ValueError("candidate names may not contain '|' (it joins pair keys)")
    return items


@register("pairs")
def pairs(
    candidates: list[dict[str, Any]] | dict[str, Any],
    subset: list[str] | None = None,
    orders: str = "both",
    dimensions: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Every ordered comparison of an example: each unordered pair, in one or both orders.

    `orders`: "both" (counterbalanced: A first, then B first), "ab" (the listed order
    only) or "ba". With `dimensions`, the comparisons are repeated once per dimension and
    each carries its `dimension`, so one LLM node can `foreach` over all of them.
    """
    if orders not in ("both", "ab", "ba"):
        raise ValueError(f"orders must be 'both', 'ab' or 'ba', got {orders!r}")
    items = _named(candidates)
    if subset is not None:
        known = {c["name"] for c in items}
        unknown = [str(s) for s in subset if str(s) not in known]
        if unknown:
            raise ValueError(f"subset names not among the candidates: {', '.join(unknown)}")
        wanted = {str(s) for s in subset}
        items = [c for c in items if c["name"] in wanted]
    if len(items) < 2:
        raise ValueError("at least two candidates are needed to form a pair")
    comparisons: list[dict[str, Any]] = []
    for dimension in dimensions if dimensions is not None else [None]:
        for a, b in combinations(items, 2):
            shown = [("ab", a, b), ("ba", b, a)]
            if orders != "both":
                shown = [s for s in shown if s[0] == orders]
            for order, first, second in shown:
                item = {
                    "pair": pair_key(a["name"], b["name"]),
                    "first": {"name": first["name"], "text": first["text"]},
                    "second": {"name": second["name"], "text": second["text"]},
                    "order": order,
                }
                if dimension is not None:
                    item["dimension"] = dimension
                comparisons.append(item)
    return comparisons


def _samples(judgment: Any) -> list[dict[str, Any]]:
    """The usable samples of one call: n=1 gives a dict, n>1 a list; skipped/failed give none."""
    if judgment is None:
        return []
    found = judgment if isinstance(judgment, list) else [judgment]
    return [s for s in found if isinstance(s, dict) and not s.get("failed")]


@register("map_votes", answer_map=("positions", "judgments", "field"))
def map_votes(
    comparisons: list[dict[str, Any]],
    judgments: list[Any],
    dimension: str | None = None,
    field: str = "answer",
    positions: dict[str, str] | None = None,
    judge: str | None = None,
    case: str | None = None,
) -> list[dict[str, Any]]:
    """One vote per sample, with the position the judge picked turned back into a name.

    `judgments[i]` answers `comparisons[i]` (a dict, or a list of samples when n > 1).
    `positions` maps the judge's answer values to first/second/tie (default: the values
    are those words; PERSE uses {"A": "first", "B": "second"}). `dimension` falls back to
    the comparison's own. `judge` (a model name) and `case` (the example id) label the
    votes so dataset-level statistics can group them. Each vote carries `style_a` and
    `style_b`, the two answers' `style_features`, which style control reads.
    """
    if len(comparisons) != len(judgments):
        raise ValueError(
            f"{len(judgments)} judgments for {len(comparisons)} comparisons; they must align"
        )
    mapping = {str(k): v for k, v in (positions or DEFAULT_POSITIONS).items()}
    bad = sorted(v for v in mapping.values() if v not in POSITIONS)
    if bad:
        raise ValueError(f"positions must map to first/second/tie, not {', '.join(bad)}")
    votes: list[dict[str, Any]] = []
    for comparison, judgment in zip(comparisons, judgments, strict=True):
        first = comparison["first"]["name"]
        second = comparison["second"]["name"]
        a, b = sorted((first, second))
        # Both answers' surface style, for the style-controlled ratings downstream.
        texts = {first: comparison["first"].get("text"), second: comparison["second"].get("text")}
        style = {"style_a": style_features(texts[a]), "style_b": style_features(texts[b])}
        for sample, value in enumerate(_samples(judgment)):
            answer = str(value.get(field))
            if answer not in mapping:
                raise ValueError(
                    f"answer {answer!r} in field '{field}' is not one of {list(mapping)}"
                )
            picked = mapping[answer]
            winner = {"first": first, "second": second, TIE: TIE}[picked]
            vote = {
                "pair": comparison.get("pair", pair_key(a, b)),
                "a": a,
                "b": b,
                "winner": winner,
                "shown_first": first,
                "picked_position": picked,
                "dimension": comparison.get("dimension", dimension),
                "order": comparison.get("order"),
                "sample": sample,
                **style,
            }
            if judge is not None:
                vote["judge"] = judge
            if case is not None:
                vote["case"] = case
            votes.append(vote)
    return votes


def plurality(wins_a: int, wins_b: int, a: str, b: str) -> str:
    """The winner of a vote count: more votes for one side wins; equal counts tie."""
    if wins_a > wins_b:
        return a
    if wins_b > wins_a:
        return b
    return TIE


RULES = ("plurality", "consistent")


def _check_rule(rule: str, order: str | None) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be 'plurality' or 'consistent', got {rule!r}")
    if rule == "consistent" and order is not None:
        raise ValueError(
            "rule 'consistent' compares the two presentation orders, so it cannot be "
            f"combined with order={order!r}; use rule 'plurality' for one order"
        )


def _order_winners(group: list[dict[str, Any]], a: str, b: str) -> dict[str, str | None]:
    """The plurality of each presentation order on its own (None: not shown in that order)."""
    found: dict[str, str | None] = {}
    for shown in ("ab", "ba"):
        counts = Counter(v["winner"] for v in group if v.get("order") == shown)
        found[shown] = plurality(counts[a], counts[b], a, b) if counts else None
    return found


@register("pair_outcomes")
def pair_outcomes(
    votes: list[dict[str, Any]],
    order: str | None = None,
    rule: Literal["plurality", "consistent"] = "plurality",
) -> list[dict[str, Any]]:
    """Per (pair, dimension): vote counts, the winner under `rule` and S = (wins + ties/2)/votes.

    `score` is S for `a` (the alphabetically first name); `order` keeps only the votes
    cast in that presentation order (e.g. "ab" for a first pass without the swap).
    `rule`: "plurality" (more votes wins, over both orders together) or "consistent"
    (MT-Bench: a side wins only when each order's plurality picks it, otherwise tie; a
    pair missing one order is a tie). "consistent" adds `winner_ab` and `winner_ba`, the
    two orders' own pluralities; counts and `score` are the same under both rules.

    Returns a list, one record per (pair, dimension): `pair`, `a`, `b`, `dimension`,
    `wins_a`, `wins_b`, `ties`, `votes`, `winner` (a name or "tie"), `score`, plus the
    votes' `judge`/`case`/`style_a`/`style_b` when they carry them.
    """
    _check_rule(rule, order)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for position, vote in enumerate(votes):
        if order is not None and vote.get("order") != order:
            continue
        if rule == "consistent" and vote.get("order") not in ("ab", "ba"):
            raise ValueError(
                f"vote {position} has order {vote.get('order')!r}; rule 'consistent' needs "
                "every vote to say which order it was cast in ('ab' or 'ba')"
            )
        key = (vote.get("case"), vote.get("judge"), vote.get("dimension"), vote["pair"])
        groups.setdefault(key, []).append(vote)
    outcomes = []
    for (case, judge, dimension, pair), group in groups.items():
        a, b = group[0]["a"], group[0]["b"]
        counts = Counter(v["winner"] for v in group)
        wins_a, wins_b, ties = counts[a], counts[b], counts[TIE]
        record: dict[str, Any] = {
            "pair": pair,
            "a": a,
            "b": b,
            "dimension": dimension,
            "wins_a": wins_a,
            "wins_b": wins_b,
            "ties": ties,
            "votes": len(group),
            "winner": plurality(wins_a, wins_b, a, b),
        }
        if rule == "consistent":
            by_order = _order_winners(group, a, b)
            # A verdict counts only if it survives the swap: a win in one order against a
            # tie, a loss or no answer in the other is a position effect, not a preference.
            agreed = by_order["ab"] is not None and by_order["ab"] == by_order["ba"]
            record["winner"] = by_order["ab"] if agreed else TIE
            record["winner_ab"], record["winner_ba"] = by_order["ab"], by_order["ba"]
        record["score"] = (wins_a + 0.5 * ties) / len(group)
        for side in ("style_a", "style_b"):
            if side in group[0]:
                record[side] = group[0][side]
        if judge is not None:
            record["judge"] = judge
        if case is not None:
            record["case"] = case
        outcomes.append(record)
    return outcomes


@register("verdicts")
def verdicts(
    votes: list[dict[str, Any]],
    order: str | None = None,
    rule: Literal["plurality", "consistent"] = "plurality",
) -> dict[str, str]:
    """Winner per dimension for an example with one pair (e.g. PERSE: aspect → "A"/"B"/tie).

    `order` and `rule` are as in `pair_outcomes`.
    """
    found: dict[str, str] = {}
    for outcome in pair_outcomes(votes, order, rule):
        key = str(outcome["dimension"])
        if key in found:
            raise ValueError(
                f"dimension '{key}' has more than one pair; use pair_outcomes for several pairs"
            )
        found[key] = outcome["winner"]
    return found


@register("fit_profile")
def fit_profile(
    items: list[Any], max_items: int | None = None, max_chars: int | None = None
) -> dict[str, Any]:
    """Keep the newest profile entries that fit (count and rough size); report what was dropped.

    Profiles are listed oldest first, so the oldest go first when a budget is exceeded;
    the size is the length of each entry's text form, a cheap stand-in for tokens. The
    newest entry is always kept, so a judge never sees an empty profile.
    """
    kept: list[Any] = []
    used = 0
    for entry in reversed(items):
        size = len(entry) if isinstance(entry, str) else len(str(entry))
        if max_items is not None and len(kept) >= max_items:
            break
        if max_chars is not None and kept and used + size > max_chars:
            break
        kept.append(entry)
        used += size
    kept.reverse()
    return {"kept": kept, "dropped": len(items) - len(kept)}
