"""What a node kind is (spec model, compile step, executor) and the registry of kinds.

The engine schedules nodes without knowing their kinds; spec parsing, checks, servers and
run identity ask a node's kind. A new kind is one module defining a `NodeKind` plus one
`register_kind(...)` call.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, get_args

from ..errors import NodeError
from ..graph import NodeBase
from ..servers import EndpointWant

if TYPE_CHECKING:
    from ..calls import LLMClient, Runtime
    from ..compute import ComputeFunction
    from ..graph import Checker, CompiledNode, Expression, FieldSpec, GraphSpec, NodeScope
    from ..servers import Endpoint
    from ..store import TraceRecorder

SpecT = TypeVar("SpecT", bound=NodeBase)
NodeT = TypeVar("NodeT", bound="CompiledNode")

_NAME = re.compile(r"[a-z][a-z0-9_]*")


def evaluate(expr: Expression, ctx: dict[str, Any], node: str, where: str) -> Any:
    """An expression's value for one call; its failure is the node's error, naming where."""
    try:
        return expr(ctx)
    except Exception as exc:  # template runtime errors come in many types
        raise NodeError(node, f"{where} `{expr.source}` failed: {exc}") from exc


class Reasks(Protocol):
    """A retest's re-asks as an executor reads them (engine/settings.py's `Resample`)."""

    @property
    def temperature(self) -> float | None: ...

    def covers(self, node: str) -> bool:
        """Whether `node` is asked again."""

    def first_sample(self, node: str, n: int) -> int:
        """The sample index `node`'s call of n samples starts at."""


class RunFacts(Protocol):
    """What an executor reads of the run's settings (the engine's `RunSettings`, above
    the kinds)."""

    @property
    def resample(self) -> Reasks | None: ...


@dataclass(slots=True)
class RunServices:
    """What an executor may use of the run it is part of: one per engine (so per run)."""

    client: LLMClient
    trace: TraceRecorder
    endpoints: dict[str, Endpoint]  # node name -> the endpoint it talks to
    runtime: Runtime
    settings: RunFacts  # how the run goes (engine/settings.py's RunSettings)
    memo: dict[Any, Any] = field(default_factory=dict)  # per-run caches of kinds

    @property
    def resample(self) -> Reasks | None:
        """A retest's re-asks: fresh sample indices per node (None: an ordinary run)."""
        return self.settings.resample


class NodeKind(ABC, Generic[SpecT, NodeT]):
    """One kind of node: the `kind:` tag, its spec model, its compile step, its executor.

    `spec_model` must declare `kind: Literal["<name>"]` (the tag parsing dispatches on);
    `compiled` is the `CompiledNode` subclass its compile step fills in.
    """

    name: str
    spec_model: type[SpecT]
    compiled: type[NodeT]

    @abstractmethod
    def compile(self, cn: NodeT, scope: NodeScope) -> None:
        """Fill in `cn`'s own parts from `cn.spec`; report problems through `scope`."""

    @abstractmethod
    async def execute(
        self, cn: NodeT, ctx: dict[str, Any], example: str, item: int, run: RunServices
    ) -> Any:
        """Run the node once (one `foreach` element, or WHOLE), record it in `run.trace`,
        return its value; raise NodeError to fail the example."""

    def endpoint_want(self, spec: SpecT) -> EndpointWant | None:
        """The server this node talks to, or None when it needs no endpoint of its own."""
        return None

    def value_fields(self, spec: SpecT, graph: GraphSpec) -> dict[str, FieldSpec] | None:
        """The fields its value is known (before any call) to have, for `node.field` typo
        checks; None when not known. Only asked of nodes without `foreach`."""
        return None

    def functions(self, cn: NodeT) -> list[ComputeFunction]:
        """Python functions it runs: user code among them is part of the run's identity."""
        return []

    def link(self, cn: NodeT, nodes: Mapping[str, CompiledNode], ck: Checker) -> None:
        """Once every node is compiled, before the order is found: tie other nodes to this
        one (a cascade makes each later stage wait for, and run only past, the ones before
        it); report problems through `ck`. Most kinds tie nothing."""


class KindRegistry:
    """Node kinds by `kind:` tag: a registry's own, over those of the one it extends (the
    user's over the built-ins), in registration order, built-ins first."""

    def __init__(self, base: KindRegistry | None = None) -> None:
        self._base = base
        self._own: dict[str, NodeKind[Any, Any]] = {}

    def add(self, kind: NodeKind[Any, Any], *, replace: bool = False) -> NodeKind[Any, Any]:
        """Make `kind:` <kind.name> a node kind graphs compiled with this registry may use."""
        name = kind.name
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"a kind name is lower-case letters, digits and _, got {name!r}")
        if not (isinstance(kind.spec_model, type) and issubclass(kind.spec_model, NodeBase)):
            # The engine reads foreach, as, when and after off every node.
            raise TypeError(
                f"the spec model of kind '{name}' must subclass orchestrator.graph.spec.NodeBase"
            )
        tag = kind.spec_model.model_fields.get("kind")
        if tag is None or get_args(tag.annotation) != (name,):
            raise TypeError(
                f"{kind.spec_model.__name__} must declare `kind: Literal[{name!r}]` "
                "(graph files pick the node's model by it)"
            )
        if name in self.kinds() and not replace:
            raise ValueError(f"node kind '{name}' is already registered")
        self._own.pop(name, None)
        self._own[name] = kind
        return kind

    def remove(self, name: str) -> None:
        """Forget a kind of this registry's own (a test's own kind, after the test)."""
        self._own.pop(name, None)

    def kinds(self) -> dict[str, NodeKind[Any, Any]]:
        """Every kind by name: the base's, then this registry's own (which win)."""
        below = self._base.kinds() if self._base is not None else {}
        return {**below, **self._own}


# The kinds that ship (orchestrator.kinds adds `llm` and `compute` when imported), and the
# user's, over them: `register_kind` adds to the user's, never to the built-ins.
BUILTIN_KINDS = KindRegistry()
USER_KINDS = KindRegistry(BUILTIN_KINDS)


def register_kind(kind: NodeKind[Any, Any], *, replace: bool = False) -> NodeKind[Any, Any]:
    """Make `kind:` <kind.name> a node kind graphs may use (the user's registry); returns
    the kind."""
    return USER_KINDS.add(kind, replace=replace)


def unregister_kind(name: str) -> None:
    """Forget a kind the user registered (a test's own kind, after the test)."""
    USER_KINDS.remove(name)


def kinds() -> dict[str, NodeKind[Any, Any]]:
    """Every kind by name, built-ins first, then the user's: the registry graphs are
    parsed and compiled with (see graphs.py)."""
    return USER_KINDS.kinds()


def get_kind(name: str) -> NodeKind[Any, Any]:
    """The kind registered under `name`; KeyError naming the registered ones if none."""
    known = kinds()
    found = known.get(name)
    if found is None:
        raise KeyError(f"no node kind '{name}' (registered: {', '.join(known)})")
    return found


def kind_of(spec: NodeBase) -> NodeKind[Any, Any]:
    """The kind whose spec model parsed `spec`."""
    for kind in kinds().values():
        if type(spec) is kind.spec_model:
            return kind
    raise KeyError(f"no node kind parses {type(spec).__name__}")
