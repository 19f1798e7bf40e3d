"""Pairwise machinery: ordered comparisons, votes mapped back to generators, and the AuPEL /
PERSE graphs end to end against the fake server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import results, run_graph, user_text, write_rows

from orchestrator import compile_graph
from orchestrator.compute.pairwise import (
    fit_profile,
    map_votes,
    pair_key,
    pair_outcomes,
    pairs,
    verdicts,
)

ROOT = Path(__file__).parents[2]
GRAPHS = ROOT / "graphs"
EXAMPLES = ROOT / "examples"
THREE = [
    {"name": "user", "text": "mine"},
    {"name": "big", "text": "large model"},
    {"name": "small", "text": "small model"},
]


# -- pairs ----------------------------------------------------------------------------


def test_pairs_gives_every_pair_in_both_orders() -> None:
    comparisons = pairs(THREE)
    assert len(comparisons) == 6
    shown = {(c["first"]["name"], c["second"]["name"]) for c in comparisons}
    assert shown == {
        ("user", "big"),
        ("big", "user"),
        ("user", "small"),
        ("small", "user"),
        ("big", "small"),
        ("small", "big"),
    }
    for c in comparisons:
        assert c["pair"] == pair_key(c["first"]["name"], c["second"]["name"])
        assert c["order"] in ("ab", "ba")
        assert c["first"]["text"] == next(
            x["text"] for x in THREE if x["name"] == c["first"]["name"]
        )
    # Both orders of a pair carry the same canonical key.
    assert sorted(c["pair"] for c in comparisons).count("big|user") == 2


def test_pairs_accepts_a_mapping_a_subset_one_order_and_dimensions() -> None:
    as_dict = pairs({"user": "mine", "big": "large model", "small": "small model"})
    assert [c["pair"] for c in as_dict] == [c["pair"] for c in pairs(THREE)]
    only = pairs(THREE, subset=["user", "small"])
    assert {c["pair"] for c in only} == {"small|user"} and len(only) == 2
    one_order = pairs(THREE, orders="ab")
    assert len(one_order) == 3 and {c["order"] for c in one_order} == {"ab"}
    swapped = pairs({"A": "x", "B": "y"}, orders="ba")
    assert swapped[0]["first"]["name"] == "B"
    per_dim = pairs({"A": "x", "B": "y"}, dimensions=["ending", "surprise"])
    assert [(c["dimension"], c["order"]) for c in per_dim] == [
        ("ending", "ab"),
        ("ending", "ba"),
        ("surprise", "ab"),
        ("surprise", "ba"),
    ]


@pytest.mark.parametrize(
    ("candidates", "kwargs", "message"),
    [
        ([{"name": "a", "text": "x"}, {"name": "a", "text": "y"}], {}, "unique"),
        (THREE, {"subset": ["user", "ghost"]}, "ghost"),
        ([{"name": "a", "text": "x"}], {}, "at least two"),
        (THREE, {"orders": "random"}, "orders"),
        (["just text", "more"], {}, "name"),
        ({"a|b": "x", "c": "y"}, {}, "'|'"),
    ],
)
def test_pairs_rejects_bad_input(candidates: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        pairs(candidates, **kwargs)


# -- votes ----------------------------------------------------------------------------


def test_always_first_judge_splits_wins_evenly_and_picks_first_every_time() -> None:
    comparisons = pairs(THREE)
    judgments = [[{"answer": "first"}] * 4 for _ in comparisons]  # n = 4 samples each
    votes = map_votes(comparisons, judgments, "quality", judge="m", case="c1")
    assert len(votes) == 24
    assert {v["picked_position"] for v in votes} == {"first"}
    for pair in ("big|user", "small|user", "big|small"):
        mine = [v for v in votes if v["pair"] == pair]
        a, b = pair.split("|")
        assert sum(v["winner"] == a for v in mine) == sum(v["winner"] == b for v in mine) == 4
    assert all(v["dimension"] == "quality" and v["judge"] == "m" for v in votes)
    outcomes = pair_outcomes(votes)
    assert {o["winner"] for o in outcomes} == {"tie"}
    assert all(o["score"] == 0.5 and o["votes"] == 8 for o in outcomes)


def test_votes_follow_the_text_not_the_position() -> None:
    comparisons = pairs(THREE)
    # A judge that always prefers the user's text, wherever it is shown.
    judgments = [
        {"answer": "first"}
        if c["first"]["name"] == "user"
        else {"answer": "second"}
        if c["second"]["name"] == "user"
        else {"answer": "tie"}
        for c in comparisons
    ]
    votes = map_votes(comparisons, judgments, "personalization")
    for vote in votes:
        if "user" in (vote["a"], vote["b"]):
            assert vote["winner"] == "user"
        else:
            assert vote["winner"] == "tie"
    by_pair = {o["pair"]: o for o in pair_outcomes(votes)}
    assert by_pair["big|user"]["winner"] == "user" and by_pair["big|user"]["score"] == 0.0
    assert by_pair["small|user"]["wins_b"] == 2
    assert by_pair["big|small"]["ties"] == 2 and by_pair["big|small"]["score"] == 0.5


def test_map_votes_skips_missing_and_failed_calls_and_maps_custom_labels() -> None:
    comparisons = pairs({"A": "x", "B": "y"}, dimensions=["ending"])
    judgments = [{"choice": "B"}, {"failed": True, "error": "no valid reply"}]
    votes = map_votes(
        comparisons, judgments, field="choice", positions={"A": "first", "B": "second"}
    )
    assert len(votes) == 1
    assert votes[0]["winner"] == "B" and votes[0]["dimension"] == "ending"
    assert map_votes(comparisons, [None, None]) == []
    with pytest.raises(ValueError, match="align"):
        map_votes(comparisons, [{"answer": "first"}])
    with pytest.raises(ValueError, match="'maybe'"):
        map_votes(comparisons, [{"answer": "maybe"}, None])


def test_plurality_ignores_tie_votes_but_s_counts_them() -> None:
    comparisons = pairs({"x": "1", "y": "2"}, orders="ab")
    samples = [{"answer": a} for a in ("tie", "tie", "tie", "first", "second", "first")]
    outcome = pair_outcomes(map_votes(comparisons, [samples], "d"))[0]
    assert (outcome["wins_a"], outcome["wins_b"], outcome["ties"]) == (2, 1, 3)
    assert outcome["winner"] == "x"
    assert outcome["score"] == pytest.approx((2 + 1.5) / 6)


def test_verdicts_per_dimension_and_first_pass_only() -> None:
    comparisons = pairs({"A": "x", "B": "y"}, dimensions=["ending", "surprise"])
    # ending: A in both orders; surprise: the judge follows position (flips).
    judgments = [
        {"choice": "A"},
        {"choice": "B"},
        {"choice": "A"},
        {"choice": "A"},
    ]
    votes = map_votes(
        comparisons, judgments, field="choice", positions={"A": "first", "B": "second"}
    )
    assert verdicts(votes) == {"ending": "A", "surprise": "tie"}
    assert verdicts(votes, order="ab") == {"ending": "A", "surprise": "A"}
    with pytest.raises(ValueError, match="more than one pair"):
        verdicts(map_votes(pairs(THREE, orders="ab"), [{"answer": "first"}] * 3, "d"))


def _swap_votes(ab: list[str], ba: list[str]) -> list[dict[str, Any]]:
    """Votes on the pair x|y: `ab` samples with x shown first, `ba` with y shown first."""
    comparisons = pairs({"x": "1", "y": "2"})
    assert [c["order"] for c in comparisons] == ["ab", "ba"]
    samples = [[{"answer": a} for a in ab], [{"answer": a} for a in ba]]
    return map_votes(comparisons, samples, "d")


@pytest.mark.parametrize(
    ("ab", "ba", "plural", "consistent"),
    [
        # x wins in one order, tie in the other: plurality counts 1-0, MT-Bench a tie.
        (["first"], ["tie"], "x", "tie"),
        (["tie"], ["second"], "x", "tie"),
        # x wins in both orders (shown first, then second): the verdict survives the swap.
        (["first"], ["second"], "x", "x"),
        # The judge follows the position: x in one order, y in the other.
        (["first"], ["first"], "tie", "tie"),
        (["tie"], ["tie"], "tie", "tie"),
        # Several samples per order: each order's plurality decides that order.
        (["first", "first", "tie"], ["second", "first", "second"], "x", "x"),
        (["first", "first", "first"], ["first", "tie", "second"], "x", "tie"),
    ],
)
def test_pair_outcomes_rules(ab: list[str], ba: list[str], plural: str, consistent: str) -> None:
    votes = _swap_votes(ab, ba)
    default = pair_outcomes(votes)[0]
    assert default["winner"] == plural
    assert pair_outcomes(votes, rule="plurality") == [default]
    assert "winner_ab" not in default  # the default record is unchanged
    strict = pair_outcomes(votes, rule="consistent")[0]
    assert strict["winner"] == consistent
    # Counts and S do not depend on the rule.
    assert {k: v for k, v in strict.items() if not k.startswith("winner")} == {
        k: v for k, v in default.items() if k != "winner"
    }
    assert verdicts(votes) == {"d": plural}
    assert verdicts(votes, rule="consistent") == {"d": consistent}


def test_consistent_rule_records_each_order_and_ties_a_missing_order() -> None:
    votes = _swap_votes(["first"], ["tie"])
    strict = pair_outcomes(votes, rule="consistent")[0]
    assert (strict["winner_ab"], strict["winner_ba"]) == ("x", "tie")
    assert strict["score"] == 0.75  # the worked example in docs/pairwise.md
    # A pair seen in one order only (the other call failed) is unconfirmed: a tie.
    one_side = [v for v in votes if v["order"] == "ab"]
    lone = pair_outcomes(one_side, rule="consistent")[0]
    assert (lone["winner"], lone["winner_ab"], lone["winner_ba"]) == ("tie", "x", None)
    assert pair_outcomes(one_side)[0]["winner"] == "x"


def test_consistent_rule_keeps_cases_judges_and_dimensions_apart() -> None:
    comparisons = pairs(THREE, dimensions=["quality", "style"])
    # Prefers the user's text in both orders; between the other two, follows the position.
    judgments = [
        {"answer": "first"}
        if c["first"]["name"] == "user"
        else {"answer": "second"}
        if c["second"]["name"] == "user"
        else {"answer": "first"}
        for c in comparisons
    ]
    votes = map_votes(comparisons, judgments, judge="m", case="c1")
    votes += map_votes(comparisons, [{"answer": "tie"}] * len(comparisons), judge="m", case="c2")
    outcomes = pair_outcomes(votes, rule="consistent")
    assert len(outcomes) == 2 * 3 * 2  # cases x pairs x dimensions
    for outcome in outcomes:
        if outcome["case"] == "c2" or "user" not in outcome["pair"]:
            assert outcome["winner"] == "tie"
        else:
            assert outcome["winner"] == "user"


def test_rule_errors() -> None:
    votes = _swap_votes(["first"], ["second"])
    with pytest.raises(ValueError, match="rule must be 'plurality' or 'consistent'"):
        pair_outcomes(votes, rule="majority")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cannot be combined with order='ab'"):
        pair_outcomes(votes, order="ab", rule="consistent")
    with pytest.raises(ValueError, match=r"vote 1 has order None"):
        pair_outcomes([votes[0], {**votes[1], "order": None}], rule="consistent")
    with pytest.raises(ValueError, match="rule must be"):
        verdicts(votes, rule="")  # type: ignore[arg-type]


def test_fit_profile_drops_the_oldest_first() -> None:
    items = [f"text {i}" for i in range(5)]
    assert fit_profile(items) == {"kept": items, "dropped": 0}
    assert fit_profile(items, max_items=2) == {"kept": ["text 3", "text 4"], "dropped": 3}
    assert fit_profile(items, max_chars=13) == {"kept": ["text 3", "text 4"], "dropped": 3}
    # The newest entry stays even when it alone is over budget.
    assert fit_profile(items, max_chars=1)["kept"] == ["text 4"]


# -- graphs against the fake server ---------------------------------------------------


def _schema_props(body: dict[str, Any]) -> dict[str, Any]:
    fmt = body.get("response_format") or {}
    return (fmt.get("json_schema") or {}).get("schema", {}).get("properties", {})


def always_first(body: dict[str, Any]) -> Reply:
    """A judge with pure position bias: whatever it is shown, it answers "first"."""
    if "answer" in _schema_props(body):
        return Reply(content=json.dumps({"reason": "The first one.", "answer": "first"}))
    return schema_responder(body)


def prefers_user(body: dict[str, Any]) -> Reply:
    """A judge without position bias: it picks whichever slot holds the user's own text."""
    if "answer" not in _schema_props(body):
        return schema_responder(body)
    prompt = user_text(body)
    slots = re.split(r"^## (?:First|Second) (?:candidate|text)$", prompt, flags=re.M)
    first, second = slots[-2], slots[-1]
    answer = "first" if "[U]" in first else "second" if "[U]" in second else "tie"
    return Reply(content=json.dumps({"reason": "Seen.", "answer": answer}))


def test_aupel_always_first_judge_gives_full_position_bias_and_no_winner(tmp_path: Path) -> None:
    with FakeServer(always_first) as server:
        outcome = run_graph(
            GRAPHS / "aupel.yaml", EXAMPLES / "aupel.jsonl", tmp_path / "run", server.base_url
        )
        judged = [b for b in server.requests if "answer" in _schema_props(b)]
    # 6 cases x 3 pairs x 2 orders x 3 dimensions, n = 4 at temperature > 0.
    assert len(judged) == 108
    assert all(b["n"] == 4 and b["temperature"] > 0 for b in judged)
    lines = results(tmp_path / "run")
    assert all(r["status"] == "ok" for r in lines.values()) and len(lines) == 6
    votes = [v for r in lines.values() for v in r["votes"]]
    assert len(votes) == 108 * 4
    for generator in ("user", "gen-large", "gen-small"):
        mine = [v for v in votes if generator in (v["a"], v["b"])]
        wins = sum(v["winner"] == generator for v in mine)
        assert wins * 2 == len(mine), generator  # exactly half of its votes

    summary = outcome.summary
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["position_bias"] == summary["position_bias"]
    for dimension in ("personalization", "quality", "relevance"):
        bias = summary["position_bias"]["fake-model"][dimension]
        assert bias["first_rate"] == 1.0 and bias["tie_rate"] == 0.0
        assert bias["comparisons_both_orders"] == 18 and bias["flip_rate"] == 1.0
        table = summary["win_table"][dimension]["players"]
        assert {p["win_rate"] for p in table.values()} == {0.5}
        elo = summary["elo"][dimension]["players"]
        assert {round(p["rating"], 6) for p in elo.values()} == {1000.0}
        bt = summary["bradley_terry"][dimension]["players"]
        assert all(p["rating"] == pytest.approx(1000.0, abs=1e-3) for p in bt.values())


def _tagged_cases() -> list[dict[str, Any]]:
    cases = []
    for i in range(6):
        cases.append(
            {
                "id": f"c{i}",
                "profile": ["p one", "p two", "p three"],
                "context": f"context {i}",
                "candidates": {
                    "user": f"[U] the user's words {i}",
                    "big": f"big model words {i}",
                    "small": f"small model words {i}",
                },
            }
        )
    return cases


def test_aupel_position_blind_judge_crowns_the_user_whatever_the_order(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "cases.jsonl", _tagged_cases())
    with FakeServer(prefers_user) as server:
        outcome = run_graph(GRAPHS / "aupel.yaml", data, tmp_path / "run", server.base_url)
    summary = outcome.summary
    for dimension in ("personalization", "quality", "relevance"):
        bias = summary["position_bias"]["fake-model"][dimension]
        # The user is shown first in half of its comparisons; the third pair is all ties.
        assert bias["first_rate"] == pytest.approx(1 / 3)
        assert bias["tie_rate"] == pytest.approx(1 / 3)
        assert bias["flip_rate"] == 0.0
        players = summary["win_table"][dimension]["players"]
        assert players["user"]["wins"] == 12 and players["user"]["losses"] == 0
        assert summary["elo"][dimension]["ranking"][0] == "user"
        bt = summary["bradley_terry"][dimension]["players"]
        assert bt["user"]["ci_low"] > max(bt["big"]["ci_high"], bt["small"]["ci_high"])


def test_aupel_compare_subset_and_cache_on_rerun(tmp_path: Path) -> None:
    rows = _tagged_cases()[:2]
    rows[0]["compare"] = ["user", "small"]
    data = write_rows(tmp_path / "cases.jsonl", rows)
    cache = tmp_path / "cache.sqlite"
    with FakeServer(prefers_user) as server:
        first = run_graph(
            GRAPHS / "aupel.yaml", data, tmp_path / "one", server.base_url, cache=cache
        )
        asked = len(server.requests)
        second = run_graph(
            GRAPHS / "aupel.yaml", data, tmp_path / "two", server.base_url, cache=cache
        )
        # Only the capability check goes out again; every sample comes from the cache.
        assert len([b for b in server.requests[asked:] if "answer" in _schema_props(b)]) == 0
    lines = results(tmp_path / "one")
    assert {o["pair"] for o in lines["c0"]["outcomes"]} == {"small|user"}
    assert len(lines["c1"]["outcomes"]) == 9
    assert second.manifest["counts"]["cache_hits"] == (2 + 6) * 3 * 4
    assert first.summary["elo"] == second.summary["elo"]


def test_aupel_repeats_come_from_params(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "cases.jsonl", _tagged_cases()[:1])
    with FakeServer(prefers_user) as server:
        run_graph(
            GRAPHS / "aupel.yaml",
            data,
            tmp_path / "one",
            server.base_url,
            params={"repeats_per_order": 1},
        )
        single = [b for b in server.requests if "answer" in _schema_props(b)]
        asked = len(server.requests)
        run_graph(
            GRAPHS / "aupel.yaml",
            data,
            tmp_path / "six",
            server.base_url,
            params={"repeats_per_order": 6},
        )
        many = [b for b in server.requests[asked:] if "answer" in _schema_props(b)]
    # One sample per request is deterministic sampling; repeats sample at temperature > 0.
    assert {(b.get("n", 1), b["temperature"]) for b in single} == {(1, 0.0)}
    assert {(b["n"], b["temperature"]) for b in many} == {(6, 0.7)}
    assert len(results(tmp_path / "one")["c0"]["votes"]) == 18
    assert len(results(tmp_path / "six")["c0"]["votes"]) == 18 * 6


def test_perse_pairwise_swap_reports_flips(tmp_path: Path) -> None:
    # schema_responder answers the first enum value, "A": a judge that always picks slot one.
    with FakeServer(schema_responder) as server:
        plain = run_graph(
            GRAPHS / "perse_pairwise.yaml",
            EXAMPLES / "perse_pairwise.jsonl",
            tmp_path / "plain",
            server.base_url,
        )
        swapped = run_graph(
            GRAPHS / "perse_pairwise.yaml",
            EXAMPLES / "perse_pairwise.jsonl",
            tmp_path / "swap",
            server.base_url,
            params={"swap": True},
        )
    plain_bias = plain.summary["position_bias"]["fake-model"]["all"]
    assert plain_bias["first_rate"] == 1.0 and plain_bias["flip_rate"] is None
    swap_bias = swapped.summary["position_bias"]["fake-model"]["all"]
    assert swap_bias["votes"] == 60 and swap_bias["flip_rate"] == 1.0
    line = results(tmp_path / "swap")["perse-q-01"]
    assert set(line["choices"].values()) == {"tie"}
    assert set(line["first_pass"].values()) == {"A"}
    assert plain.summary["same_answer"]["rate"] == 1.0


def test_perse_pointwise_review_before_score(tmp_path: Path) -> None:
    compiled = compile_graph(GRAPHS / "perse_pointwise.yaml")
    assert list(compiled.spec.nodes["judge"].output) == ["review", "score"]  # type: ignore[union-attr]
    with FakeServer(schema_responder) as server:
        run_graph(
            GRAPHS / "perse_pointwise.yaml",
            EXAMPLES / "perse_pointwise.jsonl",
            tmp_path / "run",
            server.base_url,
            params={"max_profile_examples": 2},
        )
        judged = [b for b in server.requests if "review" in _schema_props(b)]
    assert all(b["temperature"] == 0.8 and b["max_tokens"] == 600 for b in judged)
    schema = judged[0]["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["review", "score"]
    line = results(tmp_path / "run")["perse-p-01"]
    assert line["profile_used"] == 2 and line["profile_dropped"] == 1
    # The oldest example was dropped: its plot is not in the prompt, the newest is.
    prompt = user_text(next(b for b in judged if "fisherman" in user_text(b)))
    assert "piano teacher" not in prompt and "vineyard" in prompt
    assert line["profile_mean"] == pytest.approx((2 + 6) / 2)


@pytest.mark.parametrize("stem", ["aupel", "perse_pointwise", "perse_pairwise"])
def test_graphs_validate(stem: str) -> None:
    compiled = compile_graph(GRAPHS / f"{stem}.yaml")
    assert compiled.name == stem
