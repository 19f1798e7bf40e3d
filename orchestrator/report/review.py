"""`orchestrator review RUN`: people answer a run's decisions one example at a time in a page
on 127.0.0.1, and each answer becomes a label line that names where it came from.

The page and its JSON API (`GET /api/next`, `POST /api/labels`, `GET /api/progress`) answer
only requests addressed to this machine by name (loopback.py) that carry the server's token,
as a `token` query parameter or an `Authorization: Bearer` header: another local user or a
page in the browser cannot read the traces or write labels without it. The token is in the
URL the command prints, as Jupyter does.
"""

from __future__ import annotations

import getpass
import hmac
import logging
import math
import secrets
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import orjson

from ..errors import LabelError
from ..store import WHOLE, NodeRun, TraceReader
from .build import asset
from .collect import DetailOptions, RunData, example_order, load_run, node_path
from .labelfile import LabelFile
from .loopback import LoopbackHandler

log = logging.getLogger(__name__)

__all__ = ["Form", "Review", "ReviewServer", "default_labels", "make_review_server"]

LABELS = Path("labels") / "labels.jsonl"
PAIR_CHOICES = ("A", "B", "tie")
MAX_BODY = 64 * 1024  # one answer: an id, a value and a note
MAX_NOTE = 4000


def default_labels(run_dir: Path) -> Path:
    """Where a review of RUN writes its labels unless told otherwise."""
    return Path(run_dir) / LABELS


@dataclass
class Form:
    """What the page asks for: a score within bounds, one of a list, or a pair's winner;
    `key` is the label key the answer is written under (as judge-card reads labels)."""

    key: Literal["score", "choice", "winner"]
    options: list[Any] = field(default_factory=list)
    minimum: float | None = None
    maximum: float | None = None
    integer: bool = False

    def check(self, value: Any, where: str) -> Any:
        """The answer as it is stored, or LabelError naming what is wrong with it."""
        if self.key == "score":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise LabelError(f"{where}: 'score' must be a number, got {value!r}")
            if not math.isfinite(value):
                raise LabelError(f"{where}: 'score' must be finite, got {value!r}")
            if self.integer and value != int(value):
                raise LabelError(f"{where}: 'score' must be a whole number, got {value!r}")
            low, high = self.minimum, self.maximum
            if (low is not None and value < low) or (high is not None and value > high):
                raise LabelError(f"{where}: 'score' {value!r} is outside {low:g}..{high:g}")
            return int(value) if self.integer else value
        if self.options and value not in self.options:
            allowed = ", ".join(map(str, self.options))
            raise LabelError(f"{where}: {self.key!r} must be one of {allowed}, got {value!r}")
        if value is None or isinstance(value, list | dict):
            raise LabelError(f"{where}: {self.key!r} must be a name or a number, got {value!r}")
        return value


def schema_form(field_name: str, schema: dict[str, Any]) -> Form | None:
    """The form for one property of a node's reply schema (JSON schema, as traced)."""
    prop = (schema.get("properties") or {}).get(field_name)
    if not isinstance(prop, dict):
        return None
    options = prop.get("enum")
    if options is None:
        options = next((p["enum"] for p in prop.get("anyOf", []) if "enum" in p), None)
    kind = prop.get("type")
    if options is not None:
        pairwise = {str(x) for x in options} <= {*PAIR_CHOICES, "a", "b"}
        return Form("winner" if pairwise else "choice", list(options))
    if kind in ("integer", "number"):
        low, high = prop.get("minimum"), prop.get("maximum")
        return Form("score", minimum=low, maximum=high, integer=kind == "integer")
    if kind == "boolean":
        return Form("choice", [True, False])
    return None


def value_form(field_name: str, values: list[Any]) -> Form:
    """A form guessed from the run's answers, for a field no traced schema describes."""
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if numbers and len(numbers) == len(values):
        return Form("score", integer=all(float(v).is_integer() for v in numbers))
    seen = list(dict.fromkeys(v for v in values if isinstance(v, str | bool | int)))
    if field_name == "winner" or (seen and {str(v) for v in seen} <= set(PAIR_CHOICES)):
        return Form("winner", list(PAIR_CHOICES))
    return Form("choice", seen)


def read_plan(path: Path) -> list[tuple[str, float | None]]:
    """The examples of a label plan (JSONL, one `id` per line, with its `probability` of
    being drawn when the plan says it), in order."""
    if not path.is_file():
        raise LabelError(f"{path}: plan file not found")
    plan: list[tuple[str, float | None]] = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LabelError(f"{path}:{number}: not valid JSON ({exc})") from exc
        if not isinstance(item, dict) or item.get("id") in (None, ""):
            raise LabelError(f"{path}:{number}: a plan line is an object with an 'id'")
        chance = item.get("probability")
        if chance is not None and (
            isinstance(chance, bool) or not isinstance(chance, int | float) or not 0 < chance <= 1
        ):
            raise LabelError(f"{path}:{number}: 'probability' must be in (0, 1], got {chance!r}")
        plan.append((str(item["id"]), None if chance is None else float(chance)))
    return plan


def _call(rec: NodeRun, blind: bool) -> dict[str, Any]:
    """One traced execution as the page shows it: the prompt as sent, and (unless blind)
    the reply; re-asks are the attempts the node made before one was accepted."""
    out: dict[str, Any] = {
        "node": rec.node,
        "item": None if rec.item == WHOLE else rec.item,
        "status": rec.status,
        "model": rec.model,
        "messages": [
            {"role": str(m.get("role")), "content": str(m.get("content") or "")}
            for m in rec.messages or []
        ],
        "error": rec.error,
        "reasks": [
            {"number": a.number, "kind": a.kind, "error": a.error}
            for a in rec.attempts
            if a.kind not in ("ok", "cache")
        ],
    }
    if not blind:
        out["reply"] = rec.raw
        out["value"] = rec.value
    return out


class Review:
    """One reviewer's pass over one field of a run: the queue, the form, and the answers."""

    def __init__(
        self,
        run_dir: Path,
        field_name: str,
        *,
        plan: Path | None = None,
        labels: Path | None = None,
        reviewer: str | None = None,
        blind: bool = False,
        abstained: bool = False,
    ) -> None:
        self.run: RunData = load_run(Path(run_dir), full_prompts=True)
        self.field = field_name
        self.reviewer = reviewer or getpass.getuser()
        self.blind = blind
        self.results = {r.id: r for r in self.run.results}
        if plan is not None:
            self.queue = read_plan(plan)
            unknown = [i for i, _ in self.queue if i not in self.results]
            if unknown:
                raise LabelError(
                    f"{plan}: {len(unknown)} id(s) not in {run_dir}, e.g. {unknown[0]!r}"
                )
        else:  # in dataset order, as the report lists them
            rows = [self.run.results[i] for i in example_order(self.run)]
            if abstained:  # the review queue of `abstain:` or a cascade: no judge answered
                self.queue = [(r.id, None) for r in rows if r.status == "abstained"]
            else:
                self.queue = [(r.id, None) for r in rows if field_name in r.outputs]
        self.chances = dict(self.queue)
        if not self.queue and abstained:
            raise LabelError(f"--abstained: no example of {run_dir} abstained")
        if not self.queue:
            known = sorted({k for r in self.run.results for k in r.outputs})
            raise LabelError(
                f"--field {field_name!r}: no example of {run_dir} has it "
                f"(its outputs: {', '.join(known) or 'none'})"
            )
        reader = self.run.reader
        self.trace: TraceReader | None = reader.trace() if reader.has_trace else None
        self.trace_lock = threading.Lock()  # one SQLite connection, shared by the threads
        self.node, self.form = self._form()
        self.file = LabelFile(labels or default_labels(run_dir))
        self.answers = self.file.answers(self.reviewer)
        key = self.run.manifest.run_key
        self.run_key = key.digest if key is not None else None

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()

    def records(self, example: str) -> list[NodeRun]:
        if self.trace is None:
            return []
        with self.trace_lock:
            return list(self.trace.node_runs(example))

    def _form(self) -> tuple[str | None, Form]:
        """The node that decides the field (the last traced one whose reply schema has it)
        and the form its schema asks for; a form guessed from the answers otherwise."""
        for example, _ in self.queue[:20]:
            for rec in reversed(self.records(example)):
                form = schema_form(self.field, rec.schema or {})
                if form is not None:
                    return rec.node, form
        values = [self.results[i].outputs.get(self.field) for i, _ in self.queue]
        return None, value_form(self.field, [v for v in values if v is not None])

    def verdict(self, example: str, records: list[NodeRun] | None = None) -> dict[str, Any]:
        """The judge's answer for the field, and its confidence when the node measured one."""
        answer = self.results[example].outputs.get(self.field)
        confidence = None
        # Measured where a threshold was applied: an `abstain:` node, or a cascade.
        for rec in reversed(records if records is not None else self.records(example)):
            if rec.abstain is not None and rec.abstain["field"] == self.field:
                confidence = rec.abstain["confidence"]
                break
        return {"answer": answer, "confidence": confidence}

    def progress(self) -> dict[str, Any]:
        done = sum(1 for i, _ in self.queue if i in self.answers)
        return {"reviewer": self.reviewer, "done": done, "total": len(self.queue)}

    def next_example(self) -> dict[str, Any]:
        """The first example of the queue this reviewer has not answered, whole."""
        for position, (example, chance) in enumerate(self.queue):
            if example not in self.answers:
                return self.example(example, position, chance)
        return {"done": True, "progress": self.progress()}

    def example(self, example: str, position: int, chance: float | None) -> dict[str, Any]:
        records = self.records(example)
        latest = {(r.node, r.item): r for r in records}  # oldest first: the last try stays
        path = node_path(records, self.run.graph.nodes, DetailOptions(full=True))
        out: dict[str, Any] = {
            "id": example,
            "position": position,
            "field": self.field,
            "node": self.node,
            "form": asdict(self.form),
            "blind": self.blind,
            "probability": chance,
            "inputs": self.run.inputs.get(example, {}),
            "path": [{"node": p["node"], "status": p["status"]} for p in path],
            "calls": [_call(r, self.blind) for r in latest.values()],
            "progress": self.progress(),
        }
        if not self.blind:
            out["judge"] = self.verdict(example, records)
        return out

    def answer(self, body: Any) -> dict[str, Any]:
        """Check an answer, append it as a label line, and say what the judge said."""
        if not isinstance(body, dict) or body.get("id") in (None, ""):
            raise LabelError("an answer is an object with an 'id'")
        example = str(body["id"])
        where = f"answer for {example!r}"
        if example not in self.chances:
            raise LabelError(f"{where}: not an example of this review")
        chance = self.chances[example]
        note = body.get("note")
        if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE):
            raise LabelError(f"{where}: 'note' must be text of at most {MAX_NOTE} characters")
        flag = body.get("flag") is True
        given = [k for k in ("score", "choice", "winner") if k in body]
        if given and given != [self.form.key]:
            raise LabelError(f"{where}: this review asks for {self.form.key!r}, got {given}")
        if not given and not (flag and note):
            raise LabelError(f"{where}: give {self.form.key!r}, or flag it with a note")
        line: dict[str, Any] = {"id": example}
        if given:
            line[self.form.key] = self.form.check(body[self.form.key], where)
        if flag:
            line["flag"] = True
        judge = self.verdict(example)
        line |= {
            "reviewer": self.reviewer,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "run_key": self.run_key,
            "node": self.node,
            "field": self.field,
            "judge": judge,
            "probability": chance,
            "note": note,
        }
        self.file.append(line)
        self.answers[example] = line
        return {"saved": line, "judge": judge, "progress": self.progress()}


class ReviewServer(ThreadingHTTPServer):
    """The review page and its API for one `Review`, bound to 127.0.0.1."""

    daemon_threads = True

    def __init__(self, review: Review, port: int = 0, token: str | None = None) -> None:
        self.review = review
        self.token = token or secrets.token_urlsafe(24)
        self.page = asset("review.html").encode()
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/?token={self.token}"

    def server_close(self) -> None:
        super().server_close()
        self.review.close()


class _Handler(LoopbackHandler):
    # Addressed to this machine by name (loopback.py), then carrying the token, or refused.
    server: ReviewServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows where the page is, not every request."""

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        query = parse_qs(urlsplit(self.path).query).get("token", [])
        bearer = self.headers.get("Authorization", "")
        given = bearer[7:].strip() if bearer[:7].lower() == "bearer " else ""
        expected = self.server.token.encode()
        if any(hmac.compare_digest(t.encode(), expected) for t in [*query, given] if t):
            return True
        log.warning("Refused a request to %s without this review's token", self.path[:80])
        self._json(HTTPStatus.UNAUTHORIZED, {"error": "this page needs its token"})
        return False

    def do_GET(self) -> None:
        route = urlsplit(self.path).path
        review = self.server.review
        if route in ("/", "/index.html"):
            self.send_body(HTTPStatus.OK, "text/html; charset=utf-8", self.server.page)
        elif route == "/api/next":
            self._json(HTTPStatus.OK, review.next_example())
        elif route == "/api/progress":
            self._json(HTTPStatus.OK, review.progress())
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"not found: {route}"})

    def do_POST(self) -> None:
        route = urlsplit(self.path).path
        if route != "/api/labels":
            self._json(HTTPStatus.NOT_FOUND, {"error": f"not found: {route}"})
            return
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            size = -1
        if not 0 < size <= MAX_BODY:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"a body of 1..{MAX_BODY} bytes"})
            return
        try:
            reply = self.server.review.answer(orjson.loads(self.rfile.read(size)))
        except orjson.JSONDecodeError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"the body is not JSON ({exc})"})
            return
        except LabelError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        self._json(HTTPStatus.OK, reply)

    def _json(self, status: int, data: Any) -> None:
        self.send_body(status, "application/json", orjson.dumps(data, default=str))


def make_review_server(
    run_dir: Path,
    field_name: str,
    *,
    plan: Path | None = None,
    labels: Path | None = None,
    reviewer: str | None = None,
    blind: bool = False,
    abstained: bool = False,
    port: int = 0,
    token: str | None = None,
) -> ReviewServer:
    """A review server bound to 127.0.0.1:port (0: a free one), not yet serving."""
    review = Review(
        run_dir,
        field_name,
        plan=plan,
        labels=labels,
        reviewer=reviewer,
        blind=blind,
        abstained=abstained,
    )
    return ReviewServer(review, port, token)
