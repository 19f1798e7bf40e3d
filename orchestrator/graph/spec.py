"""The graph file: YAML loaded into typed models. No checks across nodes here (see compile)."""

from __future__ import annotations

import difflib
import functools
import operator
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from ..errors import GraphError, Problem
from .yamlfile import load_yaml

if TYPE_CHECKING:
    from ..compute import ComputeFunction

MAX_NODES = 1_000  # more is a runaway or hostile file, not a protocol

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    min_samples: int | str | None = Field(
        default=None, description="valid samples a call needs (default: all n)"
    )

    @field_validator(
        "temperature",
        "max_tokens",
        "top_p",
        "seed",
        "n",
        "logprobs",
        "retries",
        "min_samples",
        mode="before",
    )
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        # YAML `true` would otherwise pass as the number 1.
        if isinstance(value, bool):
            raise ValueError("expected a number or an expression string, not true/false")
        return value


# The Python type each sampling value is coerced to once resolved.
SAMPLING_TYPES: dict[str, type] = {
    "temperature": float,
    "max_tokens": int,
    "top_p": float,
    "seed": int,
    "n": int,
    "logprobs": int,
    "retries": int,
    "min_samples": int,
}

# Allowed values, checked on literals at compile time: (lowest, highest, lowest excluded).
# seed takes any integer.
SAMPLING_RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "temperature": (0, None, False),
    "max_tokens": (1, None, False),
    "top_p": (0, 1, True),
    "n": (1, None, False),
    "logprobs": (0, None, False),
    "retries": (0, None, False),
    "min_samples": (1, None, False),
}


def sampling_problem(key: str, value: object) -> str | None:
    """Why a sampling value is out of range, or None (non-numbers are typed elsewhere)."""
    if key not in SAMPLING_RANGES or not isinstance(value, int | float):
        return None
    low, high, low_open = SAMPLING_RANGES[key]
    if low is not None and (value <= low if low_open else value < low):
        bound = f"greater than {low}" if low_open else f"at least {low}"
        return f"{key} must be {bound}, got {value}"
    if high is not None and value > high:
        return f"{key} must be at most {high}, got {value}"
    return None


class NodeBase(_Strict):
    """What every node has, whatever its kind; a kind's spec model adds `kind: Literal[...]`
    and its own fields (see orchestrator/kinds)."""

    foreach: str | None = None
    as_: str = Field(default="item", alias="as")
    when: str | None = None
    after: list[str] = Field(default_factory=list)
    description: str | None = None
    # Run once per run, before the rows, its value shared by every row (graph/once.py).
    once: bool = False
    # Run once per distinct value of this row field, its value shared by the rows that
    # have that value (graph/once.py, engine/groups.py).
    once_per: str | None = None


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
    # Params with no default: a run must be given each (`--param NAME=VALUE`), or it is
    # refused before any request (e.g. the folder of a trained model).
    required_params: list[str] = Field(default_factory=list)
    prompts: str = "../prompts"
    # Data files read from the prompts folder like templates (same boundary, sealed, part
    # of the graph's identity), each readable by every expression and template as
    # `files.NAME`: a few-shot set, a rubric table.
    files: dict[str, str] = Field(default_factory=dict)
    defaults: Sampling = Field(default_factory=Sampling)
    # Parsed with the union of the registered kinds' models (see `_parser`).
    nodes: dict[str, NodeBase]
    outputs: dict[str, str]
    aggregates: dict[str, Aggregate] = Field(default_factory=dict)
    # For the judge card only, never read by a run: the input whose text the judges judge
    # (its length is what length bias is measured against; default `output`) ...
    judged: str | None = None
    # ... and the LLM nodes that score the same thing as a jury (pairwise α, effective size).
    jury: list[str] = Field(default_factory=list)
    # For `orchestrator align` only, never read by a run: the changes its search tries
    # besides the graph as given (`prompt=NAME`, `system=NAME`, `params.NAME=VALUE`).
    variants: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _card_keys_name_what_exists(self) -> GraphSpec:
        inputs = [*self.inputs, *self.optional_inputs]
        if self.judged is not None and inputs and self.judged not in inputs:
            raise ValueError(
                f"judged: '{self.judged}' is not among the inputs ({', '.join(inputs)})"
            )
        if self.jury and len(set(self.jury)) < 2:
            raise ValueError("jury: a jury lists two different LLM nodes or more")
        if len(set(self.jury)) != len(self.jury):
            raise ValueError("jury: a node is listed twice")
        for name in self.jury:
            if getattr(self.nodes.get(name), "kind", None) != "llm":
                raise ValueError(f"jury: '{name}' is not an LLM node of this graph")
        return self

    @model_validator(mode="after")
    def _required_have_no_default(self) -> GraphSpec:
        both = [name for name in self.required_params if name in self.params]
        if both:
            raise ValueError(
                f"required_params {both} also have a default under params; a param is "
                "either required or has a default"
            )
        return self

    @field_validator("variants")
    @classmethod
    def _variant_shape(cls, value: list[str]) -> list[str]:
        for text in value:
            key, sep, rest = text.partition("=")
            key = key.strip()
            known = key in ("prompt", "system") or (
                key.startswith("params.") and IDENTIFIER.fullmatch(key.removeprefix("params."))
            )
            if not sep or not rest.strip() or not known:
                raise ValueError(
                    f"variant {text!r}: write prompt=TEMPLATE, system=TEMPLATE or params.NAME=VALUE"
                )
        return value

    @field_validator("files")
    @classmethod
    def _file_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, path in value.items():
            if not IDENTIFIER.fullmatch(name):
                raise ValueError(f"'{name}' is not a plain name to read the file by (files.NAME)")
            if not path.strip() or any(ord(c) < 32 for c in path):
                raise ValueError(f"files.{name}: expected a file path in the prompts folder")
        return value

    @field_validator("prompts")
    @classmethod
    def _plain_path(cls, value: str) -> str:
        # A NUL byte would make every later path operation raise.
        if any(ord(c) < 32 for c in value):
            raise ValueError("the prompts folder path contains control characters")
        return value


def _type_name(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


_PARSERS: dict[tuple[type[NodeBase], ...], type[GraphSpec]] = {}


class NodeKind(Protocol):
    """What the graph layer asks of a node kind (kinds/'s `NodeKind`, above it, which hands
    its kinds in): the tag, the spec model, the compile step, the executor and what a
    node of the kind needs of the run."""

    @property
    def name(self) -> str: ...

    @property
    def spec_model(self) -> type[NodeBase]: ...

    @property
    def compiled(self) -> type[Any]: ...

    def compile(self, cn: Any, scope: Any) -> None:
        """Fill in the compiled node."""

    async def execute(self, cn: Any, ctx: dict[str, Any], example: str, item: int, run: Any) -> Any:
        """Run the node once."""

    def endpoint_want(self, spec: Any) -> object | None:
        """The server a node talks to, or None."""

    def value_fields(self, spec: Any, graph: GraphSpec) -> dict[str, FieldSpec] | None:
        """The fields its value is known to have."""

    def functions(self, cn: Any) -> list[ComputeFunction]:
        """The Python functions it runs."""

    def link(self, cn: Any, nodes: Any, ck: Any) -> None:
        """Tie other compiled nodes to this one once all are compiled (a cascade's stages)."""


# The node kinds a graph is parsed and compiled with, by `kind:` tag, in the order errors
# list them: the kinds above hand their registry in, so nothing here imports them.
Kinds = Mapping[str, NodeKind]


def _parser(kinds: Kinds) -> type[GraphSpec]:
    """GraphSpec whose nodes are the union of `kinds`' models, picked by `kind:` (built once
    per set of kinds)."""
    models = tuple(kind.spec_model for kind in kinds.values())
    if models not in _PARSERS:
        union: Any = functools.reduce(operator.or_, models)
        node = Annotated[union, Field(discriminator="kind")]
        _PARSERS[models] = create_model(
            "GraphSpec", __base__=GraphSpec, __module__=__name__, nodes=(dict[str, node], ...)
        )
    return _PARSERS[models]


def node_kind(kinds: Kinds, node: NodeBase) -> NodeKind:
    """The kind among `kinds` whose spec model parsed `node`."""
    for kind in kinds.values():
        if type(node) is kind.spec_model:
            return kind
    raise KeyError(f"no kind among {', '.join(kinds)} parses {type(node).__name__}")


def _kind_choices(kinds: Kinds) -> str:
    names = [f"'{name}'" for name in kinds]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def _loc_to_place(loc: tuple[Any, ...], kinds: Kinds) -> tuple[str | None, str | None]:
    """Turn a pydantic error location into (node, field) for the message."""
    parts = [str(p) for p in loc]
    if len(parts) >= 2 and parts[0] == "nodes":
        # Drop the discriminator tag pydantic inserts after the node id.
        rest = parts[3:] if len(parts) > 2 and parts[2] in kinds else parts[2:]
        return parts[1], ".".join(rest) or None
    return None, ".".join(parts) or None


def _keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _allowed_keys(loc: tuple[Any, ...], kinds: Kinds) -> list[str]:
    """The keys the mapping holding `loc`'s last key may have: what "did you mean" offers."""
    parent = [str(p) for p in loc[:-1]]
    if not parent:
        return _keys(GraphSpec)
    if parent[0] == "nodes" and len(parent) == 3 and parent[2] in kinds:
        return _keys(kinds[parent[2]].spec_model)
    if parent[0] == "defaults" and len(parent) == 1:
        return _keys(Sampling)
    if parent[0] == "aggregates" and len(parent) == 2:
        return _keys(Aggregate)
    return _keys(FieldSpec)  # anything deeper is an output field's description


def _problem(file: str, err: Any, kinds: Kinds) -> Problem:
    """One pydantic error as a Problem, in the words of the graph file."""
    loc = tuple(err["loc"])
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if loc and loc[-1] == "[key]":
        if len(loc) == 3 and loc[0] == "nodes":
            return Problem(file, "a node id must be a string", node=str(loc[1]))
        field = ".".join(str(p) for p in loc[:-2]) or None
        return Problem(file, f"key {loc[-2]!r} must be a string", field=field)
    node, field = _loc_to_place(loc, kinds)
    message = err["msg"]
    if kind == "union_tag_invalid":
        field, message = "kind", f"unknown kind '{ctx.get('tag')}': use {_kind_choices(kinds)}"
    elif kind == "union_tag_not_found":
        field, message = "kind", f"no kind given: use {_kind_choices(kinds)}"
    elif kind == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _allowed_keys(loc, kinds), n=1)
        hint = f"did you mean '{close[0]}'?" if close else "misspelt, or not allowed here"
        message = f"unknown key ({hint})"
    elif kind == "missing":
        message = "required but missing"
    elif kind == "value_error" and "error" in ctx:
        message = str(ctx["error"])
    elif kind == "literal_error" and "input" in err:
        message = f"{message}, got {err['input']!r}"
    elif "input" in err and kind.endswith("_type"):
        message = f"{message}, got {_type_name(err['input'])}"
    return Problem(file, message, node=node, field=field)


def load_spec(path: Path, kinds: Kinds) -> GraphSpec:
    """Parse a graph file whose nodes are of `kinds`; raise GraphError naming the file, node
    and field of each problem."""
    return spec_from_raw(load_yaml(path), str(path), kinds)


def spec_from_raw(raw: Any, file: str, kinds: Kinds) -> GraphSpec:
    """Check a parsed graph (a YAML file's contents or a dict built in Python) whose nodes
    are of `kinds`; `file` is how problems name where it came from."""
    shape = "a graph file is a YAML mapping with name, nodes and outputs"
    if raw is None:
        raise GraphError([Problem(file, f"the file is empty; {shape}")])
    if not isinstance(raw, dict):
        raise GraphError([Problem(file, f"the top level is a {_type_name(raw)}; {shape}")])
    nodes = raw.get("nodes")
    if isinstance(nodes, dict) and len(nodes) > MAX_NODES:
        message = f"{len(nodes)} nodes; a graph may have at most {MAX_NODES}"
        raise GraphError([Problem(file, message, field="nodes")])
    parser = _parser(kinds)
    try:
        return parser.model_validate(raw)
    except ValidationError as exc:
        raise GraphError([_problem(file, err, kinds) for err in exc.errors()]) from exc
