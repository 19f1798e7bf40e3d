"""Five protocols written from the README and docs alone (issue 26, "Done when").

G-Eval with steps generated once per run and logprob weighting, LLMBar-style pairwise with
a swap, a per-row checklist fan-out, a two-judge persona-fit rubric with in-run
correlations, and a filter-then-judge cascade live in tests/integration/protocols/ as a
user would write them: a graph file, its own prompts folder and a few rows. Each must pass
`orchestrator validate` and run on the fake server with the values worked out here; the
mistakes issue 26 saw pass `validate` (and two more found writing these) are edited into
copies of them and must be refused.
None of these talks to the real embedded server, so none is marked `integration`.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import scipy.stats
import yaml
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, run_graph, trace_records
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app

HERE = Path(__file__).parent / "protocols"
PROTOCOLS = ("geval", "llmbar", "checklist", "persona_fit", "cascade")


def rows_of(stem: str) -> dict[str, dict[str, Any]]:
    lines = (HERE / "data" / f"{stem}.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


def schema_props(body: dict[str, Any]) -> dict[str, Any]:
    fmt = body.get("response_format") or {}
    return ((fmt.get("json_schema") or {}).get("schema") or {}).get("properties") or {}


def prompt_text(body: dict[str, Any]) -> str:
    """Everything the model was shown, system message included."""
    return "\n".join(str(m["content"]) for m in body["messages"])


def section(text: str, title: str) -> str:
    """The text under '## title', up to the next '## ' heading or the end."""
    start = text.index(f"## {title}\n") + len(title) + 4
    end = text.find("\n## ", start)
    return text[start : None if end < 0 else end].strip()


def answer(value: dict[str, Any]) -> Reply:
    return Reply(content=json.dumps(value))


def scripted(respond: Callable[[dict[str, Any]], Reply]) -> Callable[[dict[str, Any]], Reply]:
    """The canary gets a schema-valid answer; every other request goes to `respond`."""

    def responder(body: dict[str, Any]) -> Reply:
        return schema_responder(body) if is_canary(body) else respond(body)

    return responder


def validate(graph: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["validate", str(graph)])
    return result.exit_code, result.output


def results_by_id(ran: Any) -> dict[str, dict[str, Any]]:
    lines = (ran.folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {line["id"]: line for line in map(json.loads, lines)}


# --------------------------------------------------------------------------------------------
# All five validate as written
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", PROTOCOLS)
def test_protocol_validates(stem: str) -> None:
    code, output = validate(HERE / f"{stem}.yaml")
    assert code == 0, output
    assert "is valid" in output


# --------------------------------------------------------------------------------------------
# 1. G-Eval: steps once per run, logprob-weighted score
# --------------------------------------------------------------------------------------------

STEPS = [
    "Read the source article and note its main points.",
    "Read the summary and check that its sentences follow one another logically.",
    "Rate coherence from 1 to 5.",
]
# Each row's score distribution at the digit: the weighted score differs from the digit.
GEVAL_DIST = {
    "g1": {5: 0.6, 4: 0.4},
    "g2": {1: 0.5, 2: 0.3, 3: 0.2},
    "g3": {4: 0.5, 5: 0.5},
    "g4": {2: 0.7, 1: 0.2, 3: 0.1},
    "g5": {5: 0.9, 4: 0.1},
}


def logprob_tokens(content: str, field: str, dist: dict[int, float]) -> list[dict[str, Any]]:
    """OpenAI-shaped logprobs for `content`: the digit after `"field": ` is its own token,
    with every score of `dist` among its top alternatives."""
    key = content.index(f'"{field}": ') + len(field) + 4
    chosen = max(dist, key=lambda s: dist[s])
    assert content[key] == str(chosen)

    def token(text: str, alternatives: dict[str, float]) -> dict[str, Any]:
        top = [{"token": t, "logprob": lp} for t, lp in alternatives.items()]
        return {"token": text, "logprob": alternatives.get(text, 0.0), "top_logprobs": top}

    digit = {str(score): math.log(p) for score, p in dist.items()}
    return [
        token(content[:key], {content[:key]: 0.0}),
        token(content[key], digit),
        token(content[key + 1 :], {content[key + 1 :]: 0.0}),
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_geval_writes_steps_once_and_weights_the_score(tmp_path: Path, workers: int) -> None:
    rows = rows_of("geval")

    def respond(body: dict[str, Any]) -> Reply:
        props = schema_props(body)
        if "steps" in props:
            assert body["temperature"] == 0.7
            assert "Coherence" in prompt_text(body)  # the criterion param reached the prompt
            return answer({"steps": STEPS})
        assert body.get("logprobs") is True and body["top_logprobs"] == 20
        text = prompt_text(body)
        assert all(step in text for step in STEPS)  # the judge follows the generated steps
        row = next(r for r in rows.values() if r["summary"] == section(text, "Summary to rate"))
        dist = GEVAL_DIST[row["id"]]
        content = json.dumps({"reason": "followed the steps", "score": max(dist, key=dist.get)})
        return Reply(content=content, logprobs=logprob_tokens(content, "score", dist))

    with FakeServer(scripted(respond)) as server:
        # No cache (the Python API's default): a per-row steps node would cost one call a row.
        ran = run_graph(
            HERE / "geval.yaml",
            HERE / "data/geval.jsonl",
            tmp_path / "run",
            server.base_url,
            use_cache=False,
            workers=workers,  # with 2, the run's own process asks once and ships the steps
        )
        steps_calls = [b for b in server.requests if "steps" in schema_props(b)]
        judge_calls = [b for b in server.requests if b.get("logprobs")]
        assert not server.errors, server.errors

    assert len(rows) == 5 and len(steps_calls) == 1 and len(judge_calls) == len(rows)
    once = trace_records(ran.folder / "traces.sqlite", node="steps")
    assert [(r["example_id"], r["status"]) for r in once] == [("__once__", "ok")]
    assert once[0]["value"]["steps"] == STEPS

    lines = results_by_id(ran)
    assert set(lines) == set(rows)
    for row_id, dist in GEVAL_DIST.items():
        line = lines[row_id]
        assert line["status"] == "ok", line
        expected = sum(score * p for score, p in dist.items()) / sum(dist.values())
        assert line["score"] == pytest.approx(expected)
        assert line["score"] != line["rating"]  # the weighting moved it off the digit
        assert line["rating"] == max(dist, key=lambda s: dist[s])
        assert line["n_steps"] == len(STEPS)
    expected_mean = sum(lines[i]["score"] for i in rows) / len(rows)
    assert ran.summary["score_ci"]["mean"] == pytest.approx(expected_mean)


# --------------------------------------------------------------------------------------------
# 2. LLMBar: pairwise in both orders, a verdict only when they agree
# --------------------------------------------------------------------------------------------

# How the scripted judge treats each pair: picks the gold output wherever it is shown,
# the other one wherever it is shown, or whatever is shown first (position bias).
LLMBAR_JUDGE = {
    "b1": "gold",
    "b2": "gold",
    "b3": "gold",
    "b4": "wrong",
    "b5": "first",
    "b6": "first",
}


def test_llmbar_swap_keeps_only_verdicts_both_orders_agree_on(tmp_path: Path) -> None:
    rows = rows_of("llmbar")

    def respond(body: dict[str, Any]) -> Reply:
        text = prompt_text(body)
        shown = (section(text, "Output (a)"), section(text, "Output (b)"))
        row = next(r for r in rows.values() if {r["output_1"], r["output_2"]} == set(shown))
        gold = row[f"output_{row['label']}"]
        habit = LLMBAR_JUDGE[row["id"]]
        if habit == "first":
            pick = 0
        else:
            pick = shown.index(gold) if habit == "gold" else 1 - shown.index(gold)
        return answer({"reason": habit, "choice": ("Output (a)", "Output (b)")[pick]})

    with FakeServer(scripted(respond)) as server:
        ran = run_graph(
            HERE / "llmbar.yaml", HERE / "data/llmbar.jsonl", tmp_path / "run", server.base_url
        )
        judged = [b for b in server.requests if "choice" in schema_props(b)]
        assert not server.errors, server.errors

    assert len(judged) == 2 * len(rows)  # every pair in both orders
    lines = results_by_id(ran)
    for row_id, row in rows.items():
        line = lines[row_id]
        assert line["status"] == "ok", line
        gold, other = f"output_{row['label']}", f"output_{3 - row['label']}"
        habit = LLMBAR_JUDGE[row_id]
        if habit == "first":
            # Each order picked the output it showed first: they disagree, so a tie.
            assert (line["winner_ab"], line["winner_ba"]) == ("output_1", "output_2")
            assert line["winner"] == "tie" and line["correct"] is False
        else:
            agreed = gold if habit == "gold" else other
            assert line["winner"] == line["winner_ab"] == line["winner_ba"] == agreed
            assert line["correct"] is (habit == "gold")
        assert sorted(v["order"] for v in line["votes"]) == ["ab", "ba"]

    summary = ran.summary
    assert summary["accuracy"] == pytest.approx(3 / 6)
    bias = summary["position_bias"]["fake-model"]["all"]
    # Consistent rows pick the first position in one order of two; biased rows in both.
    assert bias["votes"] == 12
    assert bias["first_rate"] == pytest.approx((4 * 1 + 2 * 2) / 12)


# --------------------------------------------------------------------------------------------
# 3. Checklist: a list per row, one yes/no call per item, the fraction passed
# --------------------------------------------------------------------------------------------

CHECKLISTS: dict[str, list[tuple[str, str]]] = {
    "c1": [
        ("Is the response a haiku?", "yes"),
        ("Is it about autumn rain?", "yes"),
        ("Is it all in lower case?", "yes"),
        ("Does it have no title?", "yes"),
    ],
    "c2": [
        ("Does it give exactly two reasons?", "no"),
        ("Is it a numbered list?", "no"),
        ("Is it under 40 words?", "no"),
    ],
    "c3": [
        ("Is the reply one sentence?", "yes"),
        ("Does it apologise?", "yes"),
        ("Does it mention the refund?", "yes"),
    ],
    "c4": [
        ("Does it name three rivers?", "yes"),
        ("Are all of them in Africa?", "no"),
        ("Are they comma-separated?", "yes"),
        ("Is there nothing else?", "yes"),
    ],
}


def test_checklist_fans_out_one_call_per_item(tmp_path: Path) -> None:
    rows = rows_of("checklist")

    def row_for(text: str) -> dict[str, Any]:
        return next(r for r in rows.values() if r["instruction"] == section(text, "Instruction"))

    def respond(body: dict[str, Any]) -> Reply:
        text = prompt_text(body)
        checklist = dict(CHECKLISTS[row_for(text)["id"]])
        if "items" in schema_props(body):
            return answer({"items": list(checklist)})
        question = section(text, "Question")
        return answer({"reason": "checked", "answer": checklist[question]})

    with FakeServer(scripted(respond)) as server:
        ran = run_graph(
            HERE / "checklist.yaml",
            HERE / "data/checklist.jsonl",
            tmp_path / "run",
            server.base_url,
        )
        checks = [b for b in server.requests if "answer" in schema_props(b)]
        assert not server.errors, server.errors

    assert len(checks) == sum(map(len, CHECKLISTS.values()))
    # One trace record per checklist item (0, 1, …) beside each row's whole-node record.
    traced = trace_records(ran.folder / "traces.sqlite", node="check")
    per_item = [r for r in traced if r["item"] >= 0]
    assert len(per_item) == len(checks) and len(traced) == len(checks) + len(CHECKLISTS)
    lines = results_by_id(ran)
    fractions = []
    for row_id, checklist in CHECKLISTS.items():
        line = lines[row_id]
        assert line["status"] == "ok", line
        passed = [q for q, a in checklist if a == "yes"]
        assert line["n_items"] == len(checklist) and line["passed"] == len(passed)
        assert line["score"] == pytest.approx(len(passed) / len(checklist))
        assert line["failed_items"] == [q for q, a in checklist if a == "no"]
        fractions.append(len(passed) / len(checklist))
    assert fractions == [1.0, 0.0, 1.0, 0.75]
    assert ran.summary["mean_score"] == pytest.approx(sum(fractions) / len(fractions))
    assert ran.summary["score_ci"]["n"] == len(fractions)


# --------------------------------------------------------------------------------------------
# 4. Persona fit: two judges (model and temperature per node), in-run correlations
# --------------------------------------------------------------------------------------------

PERSONA_SCORES = {  # row: (judge-small, judge-large)
    "p1": (5, 4),
    "p2": (2, 1),
    "p3": (4, 4),
    "p4": (5, 5),
    "p5": (1, 2),
    "p6": (4, 3),
}


def test_persona_fit_two_judges_and_their_correlation(tmp_path: Path) -> None:
    rows = rows_of("persona_fit")
    seen: dict[str, set[float]] = {"judge-small": set(), "judge-large": set()}

    def respond(body: dict[str, Any]) -> Reply:
        model = body["model"]
        seen[model].add(body["temperature"])
        reply = section(prompt_text(body), "Reply to judge")
        row = next(r for r in rows.values() if r["reply"] == reply)
        score = PERSONA_SCORES[row["id"]][model == "judge-large"]
        return answer({"reason": model, "score": score})

    with FakeServer(scripted(respond), model="judge-small", also_serves=("judge-large",)) as srv:
        ran = run_graph(
            HERE / "persona_fit.yaml",
            HERE / "data/persona_fit.jsonl",
            tmp_path / "run",
            srv.base_url,
        )
        assert not srv.errors, srv.errors
    # Each judge node used its own model and its own temperature.
    assert seen == {"judge-small": {0.0}, "judge-large": {0.3}}

    lines = results_by_id(ran)
    for row_id, (a, b) in PERSONA_SCORES.items():
        line = lines[row_id]
        assert line["status"] == "ok", line
        assert (line["score_a"], line["score_b"]) == (a, b)
        assert line["mean_score"] == pytest.approx((a + b) / 2)

    x = [PERSONA_SCORES[i][0] for i in rows]
    y = [PERSONA_SCORES[i][1] for i in rows]
    expected = {
        "pearson": scipy.stats.pearsonr(x, y),
        "spearman": scipy.stats.spearmanr(x, y),
        "kendall": scipy.stats.kendalltau(x, y, variant="b"),
    }
    for name, reference in expected.items():
        got = ran.summary[name]
        assert got["n"] == len(rows)
        assert got["statistic"] == pytest.approx(float(reference.statistic))
        assert got["p_value"] == pytest.approx(float(reference.pvalue))
    assert ran.summary["pearson"]["statistic"] > 0.8  # the two judges mostly agree


# --------------------------------------------------------------------------------------------
# 5. Cascade: a yes/no gate, the judge only on the rows it lets through
# --------------------------------------------------------------------------------------------

GATE = {"q1": "yes", "q2": "no", "q3": "yes", "q4": "no", "q5": "yes"}
HELPFUL = {"q1": 9, "q3": 6, "q5": 8}


def test_cascade_judges_only_rows_the_gate_accepts(tmp_path: Path) -> None:
    rows = rows_of("cascade")

    def respond(body: dict[str, Any]) -> Reply:
        text = prompt_text(body)
        answer_text = section(
            text, "Answer to grade" if "score" in schema_props(body) else "Answer"
        )
        row = next(r for r in rows.values() if r["answer"] == answer_text)
        if "on_topic" in schema_props(body):
            return answer({"on_topic": GATE[row["id"]]})
        return answer({"reason": "graded", "score": HELPFUL[row["id"]]})

    with FakeServer(scripted(respond)) as server:
        ran = run_graph(
            HERE / "cascade.yaml",
            HERE / "data/cascade.jsonl",
            tmp_path / "run",
            server.base_url,
            use_cache=False,
        )
        judged = [b for b in server.requests if "score" in schema_props(b)]
        assert not server.errors, server.errors

    accepted = {i for i, verdict in GATE.items() if verdict == "yes"}
    assert len(judged) == len(accepted)
    trace = {r["example_id"]: r for r in trace_records(ran.folder / "traces.sqlite", node="judge")}
    assert {i for i, r in trace.items() if r["status"] == "ok" and r["attempts"]} == accepted
    for row_id in set(rows) - accepted:
        assert trace[row_id]["status"] == "skipped" and not trace[row_id]["attempts"]

    lines = results_by_id(ran)
    for row_id in rows:
        line = lines[row_id]
        assert line["status"] == "ok", line
        assert line["on_topic"] == GATE[row_id]
        assert line["score"] == HELPFUL.get(row_id)  # None where the gate said no
    assert ran.summary["judged"] == len(accepted)
    assert ran.summary["mean_score"] == pytest.approx(sum(HELPFUL.values()) / len(HELPFUL))
    # The summary's own mean leaves the unscored rows out too, rather than counting a 0.
    assert ran.summary["means"]["score"] == pytest.approx(sum(HELPFUL.values()) / len(HELPFUL))


# --------------------------------------------------------------------------------------------
# Mistakes made in copies of these graphs: those issue 26 saw pass `validate`, and those
# writing these five turned up (a bare field of a gated node, `id` not in `inputs:`)
# --------------------------------------------------------------------------------------------


def edited_copy(tmp_path: Path, stem: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of protocol `stem` (its prompts beside it) with `edit` applied to the graph."""
    folder = tmp_path / "copy"
    shutil.copytree(HERE / "prompts", folder / "prompts")
    spec = yaml.safe_load((HERE / f"{stem}.yaml").read_text(encoding="utf-8"))
    edit(spec)
    graph = folder / f"{stem}.yaml"
    graph.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return graph


def bare_gate(spec: dict[str, Any]) -> None:
    spec["nodes"]["judge"]["when"] = "gate.on_topic"


def upper_case_positions(spec: dict[str, Any]) -> None:
    spec["nodes"]["votes"]["args"]["positions"] = "{'Output (A)': 'first', 'Output (B)': 'second'}"


def misspelt_item_field(spec: dict[str, Any]) -> None:
    spec["nodes"]["passed"]["args"]["value"] = (
        "check | selectattr('answr', 'equalto', 'yes') | list | length"
    )


def misspelt_result_field(spec: dict[str, Any]) -> None:
    spec["aggregates"]["pearson"]["args"]["y"] = "results | map(attribute='score_c') | list"


def foreach_over_score(spec: dict[str, Any]) -> None:
    spec["nodes"]["judge"]["foreach"] = "gate.on_topic"


def steps_read_a_row(spec: dict[str, Any]) -> None:
    spec["nodes"]["steps"]["when"] = "source != ''"


def bare_skipped_score(spec: dict[str, Any]) -> None:
    spec["outputs"]["score"] = "judge.score"


def id_not_in_inputs(spec: dict[str, Any]) -> None:
    spec["inputs"].remove("id")


MISTAKES = [
    pytest.param("cascade", bare_gate, "when: \"gate.on_topic == 'yes'\"", id="when-on-enum"),
    pytest.param("llmbar", upper_case_positions, "did you mean 'Output (a)'", id="answer-keys"),
    pytest.param("checklist", misspelt_item_field, "did you mean 'answer'", id="element-field"),
    pytest.param("persona_fit", misspelt_result_field, "did you mean 'score_b'", id="results"),
    pytest.param("cascade", foreach_over_score, "foreach needs a list", id="foreach-string"),
    pytest.param("geval", steps_read_a_row, "cannot read the row input 'source'", id="once-row"),
    pytest.param("cascade", bare_skipped_score, "if judge is not none else none", id="skipped"),
    pytest.param("llmbar", id_not_in_inputs, "list `id` in `inputs:`", id="row-id"),
]


@pytest.mark.parametrize(("stem", "edit", "named"), MISTAKES)
def test_validate_refuses_the_mistakes(
    tmp_path: Path, stem: str, edit: Callable[[dict[str, Any]], None], named: str
) -> None:
    code, output = validate(edited_copy(tmp_path, stem, edit))
    assert code == 1, output
    assert named in output, output


def test_foreach_over_a_string_input_stops_the_run_before_any_request(tmp_path: Path) -> None:
    """Inputs have no declared type, so `validate` lets this pass; the run reads the first
    rows and refuses it before the canary, where it used to fail every row after the
    checklist calls were paid for."""

    def loop_over_instruction(spec: dict[str, Any]) -> None:
        spec["nodes"]["check"]["foreach"] = "instruction"

    graph = edited_copy(tmp_path, "checklist", loop_over_instruction)
    with FakeServer() as server:
        with pytest.raises(orc.GraphError, match="foreach needs a list, but input 'instruction'"):
            orc.run(graph, HERE / "data/checklist.jsonl", base_url=server.base_url)
        assert server.requests == []
