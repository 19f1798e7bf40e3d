"""`batch import`: check a batch output file line by line against what was exported, keep
its replies in the batch folder, then run the graph once so that every valid reply goes into
the response cache under the key the live call uses (invalid ones are re-asked: those
re-asks are the next frontier). A file with a problem imports nothing unless `partial`
allows what can wait (error lines, missing lines): a wrong file never half-lands."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import BatchImportError, MalformedReply
from ..providers import BatchOutputLine, ChatReply, parse_reply
from ..store import ResponseCache
from .folder import BatchFolder, ExportFile
from .rounds import RoundOutcome, round_graph, run_round

log = logging.getLogger(__name__)


class Reply(BaseModel):
    """One usable line of an output file."""

    custom_id: str
    body: dict[str, Any]
    where: str  # file:line, kept with the reply


class CheckedOutput(BaseModel):
    """An output file read against the export file it answers."""

    answers: Path
    replies: list[Reply]
    fatal: list[str]  # the file is wrong: never imported
    waiting: list[str]  # error lines and missing lines: imported past with `partial`


class ImportOutcome(BaseModel):
    output: Path
    answers: Path
    imported: int
    skipped: list[str]
    state: RoundOutcome


def check_output(output: Path, exports: list[ExportFile], stored: set[str]) -> CheckedOutput:
    """Every line of `output` checked against the requests exported (`exports`); `stored`:
    ids whose reply an earlier import kept (not missing when absent here)."""
    known = {cid: export for export in exports for cid in export.requests}
    fatal: list[str] = []
    waiting: list[str] = []
    replies: list[Reply] = []
    seen: dict[str, int] = {}
    try:
        raw_lines = output.read_bytes().splitlines()
    except OSError as exc:
        raise BatchImportError(output, [f"cannot read it ({exc})"], "Check the path.") from None
    for number, raw in enumerate(raw_lines, 1):
        where = f"{output}:{number}"
        if not raw.strip():
            continue
        try:
            line = BatchOutputLine.model_validate_json(raw)
        except ValidationError as exc:
            fatal.append(f"{where}: not a batch output line ({exc.errors()[0]['msg']})")
            continue
        cid = line.custom_id
        export = known.get(cid)
        if export is None:
            fatal.append(f"{where}: custom_id {cid} was never exported from this batch folder")
            continue
        if cid in seen:
            fatal.append(f"{where}: custom_id {cid} is answered twice (line {seen[cid]} too)")
            continue
        seen[cid] = number
        failure = line.failure()
        if failure is not None:
            waiting.append(f"{where}: custom_id {cid} came back as an error: {failure}")
            continue
        assert line.response is not None and line.response.body is not None
        problem = _reply_problem(
            line.response.body, export.requests[cid].model, export.requests[cid].n
        )
        if problem is not None:
            fatal.append(f"{where}: custom_id {cid}: {problem}")
            continue
        replies.append(Reply(custom_id=cid, body=line.response.body, where=where))
    answers = _answered_export(list(seen), exports)
    if answers is None:
        if seen and not fatal:
            fatal.append(
                "its lines answer requests of more than one export file; import the output "
                "of each export file on its own"
            )
        return CheckedOutput(
            answers=exports[-1].path if exports else output,
            replies=replies,
            fatal=fatal,
            waiting=waiting,
        )
    missing = [cid for cid in answers.requests if cid not in seen and cid not in stored]
    if missing:
        waiting.append(
            f"{len(missing)} request(s) of {answers.path.name} have no line here "
            f"(custom_id {', '.join(missing[:3])}{', …' if len(missing) > 3 else ''})"
        )
    return CheckedOutput(answers=answers.path, replies=replies, fatal=fatal, waiting=waiting)


def _reply_problem(body: dict[str, Any], model: str, n: int) -> str | None:
    """Why a reply body cannot stand for the request it names, or None."""
    try:
        named = ChatReply.model_validate(body).model
        reply = parse_reply(body)  # as a live reply body is read
    except ValidationError as exc:
        return f"the reply body names no model ({exc.errors()[0]['msg']})"
    except MalformedReply as exc:
        return f"the reply body is not a chat completion ({exc})"
    if named != model:
        return (
            f"the reply is from model '{named}' but the request asked '{model}'; "
            f"serve the batch under the requested name (vLLM: --served-model-name {model})"
        )
    if len(reply.choices) != n:
        return f"the reply has {len(reply.choices)} choice(s), the request asked for {n}"
    return None


def _answered_export(ids: list[str], exports: list[ExportFile]) -> ExportFile | None:
    """The newest export file holding every id (the file these lines answer)."""
    for export in reversed(exports):
        if all(cid in export.requests for cid in ids):
            return export
    return None


async def import_output(
    folder: BatchFolder,
    output: Path,
    partial: bool = False,
    *,
    trust: bool = False,
    allow_servers: Sequence[str] = (),
) -> ImportOutcome:
    """Check `output`, keep its replies, then run the folder's job once (see the module
    docstring). Raises BatchImportError, naming each line, before anything is kept; and
    ConfigurationError, before that, when the job names a node server the user did not
    (`allow_servers`, `trust`)."""
    job = folder.job()
    job.identity()  # replies are kept only for a job that says which weights wrote them
    graph = round_graph(job, folder, trust=trust, allow_servers=allow_servers)
    exports = folder.exports()
    if not exports:
        raise BatchImportError(
            output, ["the batch folder has no export file"], "Run `orchestrator batch export`."
        )
    replies = folder.replies()
    try:
        checked = check_output(output, exports, _stored(replies, exports))
        if checked.fatal or (checked.waiting and not partial):
            problems = checked.fatal + checked.waiting
            hint = (
                "This file does not answer this batch folder's requests: check which output "
                "file and --dir go together."
                if checked.fatal
                else "Import with --partial to keep the other lines; the requests without a "
                "usable reply are exported again."
            )
            raise BatchImportError(output, problems, hint)
        for reply in checked.replies:
            replies.put(reply.custom_id, {"reply": reply.body, "from": reply.where})
        replies.flush()
    finally:
        replies.close()
    for skipped in checked.waiting:
        log.warning("skipped: %s", skipped)
    state = await run_round(job, folder, trust=trust, allow_servers=allow_servers, graph=graph)
    return ImportOutcome(
        output=output,
        answers=checked.answers,
        imported=len(checked.replies),
        skipped=checked.waiting,
        state=state,
    )


def _stored(replies: ResponseCache, exports: list[ExportFile]) -> set[str]:
    """Ids of exported requests whose reply an earlier import already kept."""
    return {cid for export in exports for cid in export.requests if replies.get(cid) is not None}
