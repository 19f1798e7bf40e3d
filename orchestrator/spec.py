"""The graph file: YAML loaded into typed models. No checks across nodes here (see compile)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import GraphError, Problem


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldSpec(_Strict):
    """One field of an LLM node's output schema (see docs/graph-format.md)."""

    type: Literal["string", "integer", "number", "boolean", "list", "object"]
    description: str | None = None
    enum: list[Any] | None = None
    enum_from: str | None = None  # expression evaluated per call: the allowed values
    min: float | None = None
    max: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    items: FieldSpec | None = None
    fields: dict[str, FieldSpec] | None = None
    required: bool = True

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `reason: string` is short for `reason: {type: string}`.
        return {"type": value} if isinstance(value, str) else value


class Sampling(_Strict):
    """Sampling parameters shared by graph defaults and LLM nodes.

    Each may be a literal or an expression string such as ``params.repeats``, evaluated
    per call (so `--param` can change it without editing the graph).
    """

    temperature: float | str | None = None
    max_tokens: int | str | None = None
    top_p: float | str | None = None
    seed: int | str | None = None
    n: int | str | None = None
    logprobs: int | str | None = Field(default=None, description="top_logprobs per token")
    retries: int | str | None = Field(default=None, description="re-asks after an invalid reply")


# The Python type each sampling value is coerced to once resolved.
SAMPLING_TYPES: dict[str, type] = {
    "temperature": float,
    "max_tokens": int,
    "top_p": float,
    "seed": int,
    "n": int,
    "logprobs": int,
    "retries": int,
}


class NodeBase(_Strict):
    foreach: str | None = None
    as_: str = Field(default="item", alias="as")
    when: str | None = None
    after: list[str] = Field(default_factory=list)
    description: str | None = None


class LLMNode(NodeBase, Sampling):
    """A call to the model: prompt template(s) in, schema-validated JSON out."""

    kind: Literal["llm"]
    prompt: str
    system: str | None = None
    output: dict[str, FieldSpec]
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    on_error: Literal["fail", "record"] = "fail"


class ComputeNode(NodeBase):
    """A plain Python function over upstream values (registered name or module:function)."""

    kind: Literal["compute"]
    function: str
    args: dict[str, Any] = Field(default_factory=dict)


Node = Annotated[LLMNode | ComputeNode, Field(discriminator="kind")]


class Aggregate(_Strict):
    """A dataset-level function run once after every example is done (writes summary.json)."""

    function: str
    args: dict[str, Any] = Field(default_factory=dict)
    description: str | None = None


class GraphSpec(_Strict):
    """A whole graph file."""

    name: str
    description: str | None = None
    inputs: list[str] = Field(default_factory=list)
    optional_inputs: list[str] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    prompts: str = "../prompts"
    defaults: Sampling = Field(default_factory=Sampling)
    nodes: dict[str, Node]
    outputs: dict[str, str]
    aggregates: dict[str, Aggregate] = Field(default_factory=dict)


def _loc_to_place(loc: tuple[Any, ...]) -> tuple[str | None, str | None]:
    """Turn a pydantic error location into (node, field) for the message."""
    parts = [str(p) for p in loc]
    if len(parts) >= 2 and parts[0] == "nodes":
        # Drop the discriminator tag pydantic inserts ('llm'/'compute').
        rest = [p for p in parts[2:] if p not in ("llm", "compute")]
        return parts[1], ".".join(rest) or None
    return None, ".".join(parts) or None


def load_spec(path: Path) -> GraphSpec:
    """Parse a graph file; raise GraphError naming the file, node and field of each problem."""
    file = str(path)
    if not path.is_file():
        raise GraphError([Problem(file, "graph file not found")])
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise GraphError([Problem(file, f"not valid YAML{where}: {exc}")]) from exc
    if not isinstance(raw, dict):
        raise GraphError([Problem(file, "a graph file must be a YAML mapping")])
    try:
        return GraphSpec.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            node, field = _loc_to_place(err["loc"])
            problems.append(Problem(file, err["msg"], node=node, field=field))
        raise GraphError(problems) from exc
