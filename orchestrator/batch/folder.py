"""A batch folder: what a graph run through batch files keeps between its rounds.

    DIR/batch.json                      the job: graph, data, model, params, cache (BatchJob)
    DIR/round-001.requests.jsonl        what export wrote (one file per model and round)
    DIR/round-001.output.jsonl          what the batch runner wrote (its name is the user's)
    DIR/replies.sqlite                  every imported reply, by custom_id

Replies are kept by custom_id (a digest of the exact request body), so a round answers
exactly the questions it was asked; they reach the response cache when the graph runs again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ValidationError

from ..errors import ConfigurationError
from ..providers import BatchRequestLine, served_identity
from ..store import ResponseCache

JOB = "batch.json"
REPLIES = "replies.sqlite"
REQUESTS_SUFFIX = ".requests.jsonl"
OUTPUT_SUFFIX = ".output.jsonl"
_ROUND = re.compile(r"^round-(\d+)(?:\.[^.]+)?" + re.escape(REQUESTS_SUFFIX) + "$")


class BatchJob(BaseModel):
    """What each round of a batch folder runs: a graph file over a data file, and what
    answers it: the weights the batch runner serves (`server_root`, the --model given to
    `vllm run-batch`, with its `max_model_len`), or a `server_id` for them. A live server
    reporting the same is answered from the batch's replies in the response cache."""

    graph: Path
    data: Path
    model: str
    params: dict[str, Any] = {}
    structured: Literal["server", "prompt"] = "server"
    cache: Path | None = None  # None: the default response cache, as for `orchestrator run`
    limit: int | None = None
    server_root: str | None = None
    max_model_len: int | None = None
    server_id: str | None = None

    def identity(self) -> str:
        """What serves the batch's model, as a live run would know it (the cache key's)."""
        if self.server_id:
            return self.server_id
        if self.server_root:
            return served_identity(self.server_root, self.max_model_len)
        raise ConfigurationError(
            "the batch job does not say which weights answer it, so its replies could be "
            "taken for another model's: name them with --server-root PATH (the --model "
            "given to vllm run-batch, and --max-model-len N if given there) or --server-id ID "
            "(the same ID a live run then takes), on `batch export` or, for a folder "
            "exported before jobs named them, on `batch import`"
        )


class ExportFile(BaseModel):
    """One batch input file written by export, and the requests in it by custom_id."""

    path: Path
    round: int
    requests: dict[str, BatchRequestLine]


class BatchFolder:
    """The files of one batch folder (see the module docstring)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def save_job(self, job: BatchJob) -> None:
        # Paths as absolute: the next round may run from another directory.
        job = job.model_copy(
            update={
                "graph": job.graph.resolve(),
                "data": job.data.resolve(),
                "cache": job.cache.resolve() if job.cache is not None else None,
            }
        )
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / JOB).write_text(job.model_dump_json(indent=2) + "\n", encoding="utf-8")

    def job(self) -> BatchJob:
        where = self.path / JOB
        try:
            return BatchJob.model_validate_json(where.read_bytes())
        except FileNotFoundError:
            raise ConfigurationError(
                f"{self.path} is not a batch folder (no {JOB}); make one with "
                "`orchestrator batch export GRAPH --data DATA --dir "
                f"{self.path} --model MODEL`"
            ) from None
        except ValidationError as exc:
            raise ConfigurationError(f"{where} cannot be read: {exc}") from None

    def name_weights(
        self,
        server_root: str | None = None,
        max_model_len: int | None = None,
        server_id: str | None = None,
    ) -> BatchJob:
        """Record which weights answer the saved job (a folder exported before jobs named
        them); the same weights again change nothing, other weights are refused: replies
        already imported came from the weights recorded."""
        job = self.job()
        named = job.model_copy(
            update={
                "server_root": server_root,
                "max_model_len": max_model_len,
                "server_id": server_id,
            }
        )
        if job.server_root is None and job.server_id is None:
            named.identity()
            self.save_job(named)
            return named
        if named.identity() != job.identity():
            raise ConfigurationError(
                f"{self.path / JOB} says its batch is answered by {job.identity()}, not "
                f"{named.identity()}; export a new batch folder for other weights"
            )
        return job

    def replies(self) -> ResponseCache:
        """The imported replies (first reply kept for an id, as in the response cache)."""
        return ResponseCache(self.path / REPLIES)

    # -- export files ---------------------------------------------------------------------

    def exports(self) -> list[ExportFile]:
        """Every batch input file written here, oldest round first."""
        found: list[ExportFile] = []
        for path in sorted(self.path.glob("round-*" + REQUESTS_SUFFIX)):
            match = _ROUND.match(path.name)
            if match is None:
                continue
            requests = {line.custom_id: line for line in read_requests(path)}
            found.append(ExportFile(path=path, round=int(match.group(1)), requests=requests))
        return found

    def next_round(self) -> int:
        return max((e.round for e in self.exports()), default=0) + 1

    def write_round(self, number: int, requests: list[BatchRequestLine]) -> list[Path]:
        """Write a round's requests, one file per model (a batch runner serves one)."""
        by_model: dict[str, list[BatchRequestLine]] = {}
        for line in requests:
            by_model.setdefault(line.model, []).append(line)
        written: list[Path] = []
        for model, lines in sorted(by_model.items()):
            tag = "" if len(by_model) == 1 else "." + _slug(model)
            path = self.path / f"round-{number:03d}{tag}{REQUESTS_SUFFIX}"
            with path.open("wb") as handle:
                for line in lines:
                    handle.write(orjson.dumps(line.model_dump()) + b"\n")
            written.append(path)
        return written


def output_name(requests: Path) -> Path:
    """Where we suggest the batch runner writes the replies to `requests`."""
    return requests.with_name(requests.name.removesuffix(REQUESTS_SUFFIX) + OUTPUT_SUFFIX)


def read_requests(path: Path) -> Iterator[BatchRequestLine]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if raw.strip():
                try:
                    yield BatchRequestLine.model_validate_json(raw)
                except ValidationError as exc:
                    raise ConfigurationError(
                        f"{path}:{number}: not a batch request line ({exc.errors()[0]['msg']}); "
                        "this file was changed after export: export the round again"
                    ) from None


def _slug(model: str) -> str:
    """A model name as it can stand in a file name."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", model).strip("-") or "model"
