"""Typed records of a run, as written to and read back from its store.

A result line's outputs depend on the graph, so `ResultLine` keeps them as extra fields (the
file stays flat: `{"id": …, "status": "ok", "score": 7}`); the manifest and summary are
typed where every run has the field and open where a graph adds its own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .runkey import RunKey

Status = Literal["ok", "failed"]


class ResultLine(BaseModel):
    """One example's line: its id, ok or failed, its outputs, or why it failed."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: Status
    error: str | None = None
    row: int | None = None  # the source row of a failed example

    @property
    def outputs(self) -> dict[str, Any]:
        """The graph's outputs for this example (empty when it failed)."""
        return dict(self.model_extra or {})

    def flat(self) -> dict[str, Any]:
        """id, status, error and every output, nested dicts flattened with dotted names."""
        flat: dict[str, Any] = {"id": self.id, "status": self.status, "error": self.error}
        flat.update(flatten(self.outputs))
        return flat


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; lists stay whole (one cell each)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


class Counts(BaseModel):
    """What a run did: examples by outcome, requests, cache hits, retries, tokens."""

    model_config = ConfigDict(extra="allow")

    examples_ok: int = 0
    examples_failed: int = 0
    examples_resumed: int = 0
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Manifest(BaseModel):
    """manifest.json: what ran, against what, with which settings, and how it ended."""

    model_config = ConfigDict(extra="allow")

    layout_version: int = 1
    run_id: str = ""
    run_key: RunKey | None = None
    graph: dict[str, Any] = Field(default_factory=dict)
    dataset: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    servers: dict[str, Any] = Field(default_factory=dict)
    status: str = "unknown"
    error: str | None = None
    resumed: bool = False
    started: float | None = None
    ended: float | None = None
    wall_seconds: float | None = None
    counts: Counts = Field(default_factory=Counts)
    means: dict[str, float] = Field(default_factory=dict)
    outages: list[dict[str, Any]] = Field(default_factory=list)


class Summary(BaseModel):
    """summary.json: counts, means of numeric outputs, and each aggregate under its name."""

    model_config = ConfigDict(extra="allow")

    graph: str = ""
    counts: Counts = Field(default_factory=Counts)
    means: dict[str, float] = Field(default_factory=dict)

    @property
    def aggregates(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
