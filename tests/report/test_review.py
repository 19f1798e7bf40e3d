"""`orchestrator review` (issue 38): the API answers only with its token and only to this
machine's names, each answer is one label line with its provenance, a restart resumes at the
reviewer's first unanswered example, two reviewers share one file, the label readers take
the file as it is, and a server killed during an answer loses at most that answer. Every
request goes over a real socket."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import judge_graph, write_graph, write_rows

import orchestrator as orc
from orchestrator.analysis import meta_eval, read_labels, read_truth
from orchestrator.errors import LabelError
from orchestrator.report import ReviewServer, make_review_server

EXAMPLES = 5
URL = re.compile(r"^http://127\.0\.0\.1:(\d+)/\?token=([\w-]+)$")


def score_of(text: str) -> int:
    return int(text.rsplit(" ", 1)[-1]) % 10 + 1


def make_run(root: Path) -> Path:
    """A finished run of a 1–10 judge over five texts; text 1's first reply is invalid, so
    its decision took a re-ask."""
    graph = write_graph(root, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = write_rows(
        root / "rows.jsonl", [{"id": f"r{i}", "text": f"text {i}"} for i in range(EXAMPLES)]
    )
    seen: set[str] = set()

    def respond(request: Any) -> str:
        text = request.messages[0]["content"].removeprefix("Rate: ")
        if text == "text 1" and text not in seen:
            seen.add(text)
            return "no JSON here"
        return json.dumps({"score": score_of(text)})

    orc.run(graph, rows, out=root / "run", transport=orc.FakeTransport(respond))
    return root / "run"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("review"))


class Served:
    """A review server on a free port, serving in a thread until closed."""

    def __init__(self, run: Path, **options: Any) -> None:
        self.server: ReviewServer = make_review_server(run, "score", **options)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "",
        host: str = "127.0.0.1",
        bearer: bool = True,
    ) -> tuple[int, Any]:
        return call(self.port, method, path, body, self.server.token, token, host, bearer)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def call(
    port: int,
    method: str,
    path: str,
    body: Any,
    right: str,
    token: str | None = "",
    host: str = "127.0.0.1",
    bearer: bool = True,
) -> tuple[int, Any]:
    """One request; `token` "" sends the right one, None none, else the one given."""
    sent = right if token == "" else token
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Host": host, "Content-Type": "application/json"}
    if sent is not None and bearer:
        headers["Authorization"] = f"Bearer {sent}"
    elif sent is not None:
        path += f"?token={sent}"
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers=headers)
        reply = connection.getresponse()
        raw = reply.read()
        kind = reply.getheader("Content-Type") or ""
        return reply.status, json.loads(raw) if "json" in kind else raw
    finally:
        connection.close()


@pytest.fixture
def served(finished: Path, tmp_path: Path) -> Iterator[Served]:
    server = Served(finished, labels=tmp_path / "labels.jsonl", reviewer="ann")
    yield server
    server.close()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_every_request_needs_the_token(served: Served) -> None:
    for method, path, body in (
        ("GET", "/", None),
        ("GET", "/api/next", None),
        ("GET", "/api/progress", None),
        ("POST", "/api/labels", {"id": "r0", "score": 3}),
    ):
        for token in (None, "wrong", served.server.token[:-1]):
            status, reply = served.call(method, path, body, token=token)
            assert status == 401, (method, path, token)
            assert b"r0" not in json.dumps(reply).encode()
    assert not served.server.review.file.path.exists()  # the refused answer was not written
    status, page = served.call("GET", "/", bearer=False)  # the printed URL: ?token=
    assert status == 200 and b"<title>review</title>" in page
    status, progress = served.call("GET", "/api/progress")
    assert status == 200 and progress == {"reviewer": "ann", "done": 0, "total": EXAMPLES}


def test_the_token_does_not_pass_a_foreign_host(served: Served) -> None:
    for host in ("attacker.example", f"attacker.example:{served.port}", "127.0.0.2"):
        status, _ = served.call("GET", "/api/next", host=host)
        assert status == 421, host
    assert served.call("GET", "/api/next", host=f"localhost:{served.port}")[0] == 200


def test_an_example_carries_its_trace_and_form(served: Served) -> None:
    status, first = served.call("GET", "/api/next")
    assert status == 200 and first["id"] == "r0" and first["node"] == "judge"
    assert first["form"] == {
        "key": "score",
        "options": [],
        "minimum": 1,
        "maximum": 10,
        "integer": True,
    }
    assert first["inputs"] == {"text": "text 0"}
    assert first["path"] == [{"node": "judge", "status": "ok"}]
    (call_,) = first["calls"]
    assert call_["messages"][-1]["content"] == "Rate: text 0" and call_["value"]["score"] == 1
    assert first["judge"] == {"answer": 1, "confidence": None}
    served.call("POST", "/api/labels", {"id": "r0", "score": 2})
    second = served.call("GET", "/api/next")[1]
    assert second["id"] == "r1"
    (reasked,) = second["calls"]
    assert [a["kind"] for a in reasked["reasks"]] == ["invalid"]  # the re-ask is shown


def test_answers_are_label_lines_with_provenance(served: Served, finished: Path) -> None:
    path = served.server.review.file.path
    assert served.call("POST", "/api/labels", {"id": "r0", "score": 4, "note": "close"})[0] == 200
    served.call("POST", "/api/labels", {"id": "r2", "score": 9})
    status, reply = served.call("POST", "/api/labels", {"id": "r0", "score": 5})  # an edit
    assert status == 200 and reply["progress"]["done"] == 2
    first, _, edit = lines(path)
    assert set(first) == {
        "id",
        "score",
        "reviewer",
        "time",
        "run_key",
        "node",
        "field",
        "judge",
        "probability",
        "note",
    }
    manifest = json.loads((finished / "manifest.json").read_text())
    assert first["run_key"] == manifest["run_key"]["digest"]
    assert (first["reviewer"], first["node"], first["field"], first["note"]) == (
        "ann",
        "judge",
        "score",
        "close",
    )
    assert first["judge"] == {"answer": 1, "confidence": None} and edit["score"] == 5
    # The readers: the reviewer is the annotator, and their last line per example stands.
    assert [(x["id"], x["score"], x["annotator"]) for x in read_labels(path)] == [
        ("r0", 5, "ann"),
        ("r2", 9, "ann"),
    ]
    assert served.call("GET", "/api/next")[1]["id"] == "r1"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"id": "r0", "score": 11}, "outside 1..10"),
        ({"id": "r0", "score": 2.5}, "whole number"),
        ({"id": "r0", "score": "7"}, "must be a number"),
        ({"id": "r0", "choice": "A"}, "asks for 'score'"),
        ({"id": "r0"}, "give 'score', or flag it"),
        ({"id": "nope", "score": 3}, "'nope': not an example"),
        ({"score": 3}, "with an 'id'"),
    ],
)
def test_a_wrong_answer_is_refused_and_not_written(
    served: Served, body: dict[str, Any], says: str
) -> None:
    status, reply = served.call("POST", "/api/labels", body)
    assert status == 400 and says in reply["error"]
    assert not served.server.review.file.path.exists()


def test_a_flag_with_a_note_counts_as_handled(served: Served) -> None:
    body = {"id": "r0", "flag": True, "note": "the text is cut"}
    assert served.call("POST", "/api/labels", body)[0] == 200
    assert served.call("GET", "/api/next")[1]["id"] == "r1"
    assert read_labels(served.server.review.file.path) == []  # a flag is no label


def test_resume_two_reviewers_and_the_card(finished: Path, tmp_path: Path) -> None:
    labels = tmp_path / "shared.jsonl"
    ann = Served(finished, labels=labels, reviewer="ann")
    bob = Served(finished, labels=labels, reviewer="bob", blind=True)
    try:
        for example in ("r0", "r1", "r2"):
            ann.call("POST", "/api/labels", {"id": example, "score": 3})
        blind = bob.call("GET", "/api/next")[1]
        assert blind["id"] == "r0" and "judge" not in blind  # no anchoring
        assert all("reply" not in c and "value" not in c for c in blind["calls"])
        revealed = bob.call("POST", "/api/labels", {"id": "r0", "score": 4})[1]
        assert revealed["judge"]["answer"] == 1  # shown once the person has answered
        bob.call("POST", "/api/labels", {"id": "r1", "score": 2})
    finally:
        ann.close()
        bob.close()
    again = Served(finished, labels=labels, reviewer="ann")
    try:
        assert again.call("GET", "/api/next")[1]["id"] == "r3"
        assert again.call("GET", "/api/progress")[1]["done"] == 3
    finally:
        again.close()
    assert len(lines(labels)) == 5
    # As align reads it: one truth per example, the two reviewers' consensus.
    kind, truth, _ = read_truth(labels, "score")
    assert kind == "scores" and truth == {"r0": 3.5, "r1": 2.5, "r2": 3}
    # As judge-card reads it (its agreement with people is this meta-eval, kept whole).
    scores = meta_eval(finished, labels, "score", resamples=50)["scores"]
    assert scores["annotators"] == 2 and scores["labels"] == 5
    # The human ceiling, from the two examples both reviewers answered.
    humans = scores["humans"]
    assert humans["annotators"] == ["ann", "bob"] and humans["units"] == 2
    assert humans["human_human"]["alpha"] is not None


def test_a_plan_sets_the_order_and_the_probability(finished: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"id": "r3", "probability": 0.25}\n{"id": "r1"}\n')
    served = Served(finished, labels=tmp_path / "l.jsonl", reviewer="ann", plan=plan)
    try:
        assert served.call("GET", "/api/progress")[1]["total"] == 2
        assert served.call("GET", "/api/next")[1]["id"] == "r3"
        saved = served.call("POST", "/api/labels", {"id": "r3", "score": 6})[1]["saved"]
        assert saved["probability"] == 0.25
        assert served.call("POST", "/api/labels", {"id": "r0", "score": 6})[0] == 400
    finally:
        served.close()
    plan.write_text('{"id": "r3"}\n{"id": "zz"}\n')
    with pytest.raises(LabelError, match=r"plan\.jsonl: 1 id\(s\) not in .*'zz'"):
        make_review_server(finished, "score", plan=plan)
    with pytest.raises(LabelError, match="--field 'verdict': no example"):
        make_review_server(finished, "verdict")


def test_a_kill_during_an_answer_loses_at_most_that_answer(finished: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    command = [sys.executable, "-m", "orchestrator", "review", str(finished), "--field"]
    command += ["score", "--labels", str(labels), "--reviewer", "ann", "--no-browser"]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert process.stderr is not None
        match = None
        for line in process.stderr:  # the URL, on a line of its own
            match = URL.match(line.strip())
            if match:
                break
        assert match, "no URL line on stderr"
        port, token = int(match.group(1)), match.group(2)
        for example in ("r0", "r1"):
            assert call(port, "POST", "/api/labels", {"id": example, "score": 7}, token)[0] == 200
        # An answer sent, the server killed before it could reply.
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps({"id": "r2", "score": 8})
        connection.request("POST", "/api/labels", body, {"Authorization": f"Bearer {token}"})
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        connection.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    saved = lines(labels)
    assert [x["id"] for x in saved][:2] == ["r0", "r1"] and len(saved) in (2, 3)
    # A kill inside the write itself leaves a torn last line: the readers leave it out, and
    # the next review cuts it off before appending.
    with labels.open("ab") as handle:
        handle.write(b'{"id": "r3", "sco')
    assert [x["id"] for x in read_labels(labels)] == [x["id"] for x in saved]
    served = Served(finished, labels=labels, reviewer="ann")
    try:
        expected = "r3" if len(saved) == 3 else "r2"
        assert served.call("GET", "/api/next")[1]["id"] == expected
        assert served.call("POST", "/api/labels", {"id": expected, "score": 1})[0] == 200
    finally:
        served.close()
    assert [x["id"] for x in lines(labels)] == [x["id"] for x in saved] + [expected]


def test_the_command_says_what_is_wrong_in_one_line(finished: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"id": "r1", "probability": 2}\n')
    for args, says in (
        (["--field", "verdict"], "--field 'verdict': no example"),
        (["--field", "score", "--plan", str(plan)], "plan.jsonl:1: 'probability' must be"),
        (["--field", "score", "--port", "-5"], "--port -5: a port is 0 to 65535"),
    ):
        result = CliRunner().invoke(app, ["review", str(finished), "--no-browser", *args])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), args
        assert says in " ".join(result.output.split()), (args, result.output)
        assert "Traceback" not in result.output


def test_the_form_follows_the_reply_schema() -> None:
    from orchestrator.report.review import Form, schema_form, value_form

    verdict = {"properties": {"verdict": {"enum": ["good", "bad"]}, "winner": {"enum": PAIR}}}
    assert schema_form("verdict", verdict) == Form("choice", ["good", "bad"])
    assert schema_form("winner", verdict) == Form("winner", PAIR)
    number = {"properties": {"p": {"type": "number", "minimum": 0, "maximum": 1}}}
    assert schema_form("p", number) == Form("score", minimum=0, maximum=1, integer=False)
    assert schema_form("missing", number) is None
    assert value_form("x", [1, 2.5]) == Form("score")
    assert value_form("x", ["A", "tie", "B"]) == Form("winner", PAIR)
    with pytest.raises(LabelError, match="'choice' must be one of good, bad, got 'fine'"):
        Form("choice", ["good", "bad"]).check("fine", "here")
    assert Form("score", minimum=0, maximum=1).check(0.25, "here") == 0.25


PAIR = ["A", "B", "tie"]


def test_two_reviewers_answering_at_once_lose_nothing(finished: Path, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    labels = tmp_path / "shared.jsonl"
    servers = [Served(finished, labels=labels, reviewer=name) for name in ("ann", "bob")]
    note = "x" * 3000  # long lines: a torn or interleaved write would show
    try:
        jobs = [(s, f"r{i}") for i in range(EXAMPLES) for s in servers]
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            body = {"score": 5, "note": note}
            codes = list(
                pool.map(lambda j: j[0].call("POST", "/api/labels", {**body, "id": j[1]})[0], jobs)
            )
    finally:
        for server in servers:
            server.close()
    assert codes == [200] * len(jobs)
    saved = lines(labels)  # every line whole JSON
    assert sorted((x["reviewer"], x["id"]) for x in saved) == sorted(
        (name, f"r{i}") for i in range(EXAMPLES) for name in ("ann", "bob")
    )
