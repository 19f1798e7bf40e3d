"""Node kinds: each owns its spec model, its compile step and its executor (see base.py).

The built-in kinds, `llm`, `compute` and `cascade` (cascade.py: one decision escalated
from one judge to the next), are registered here, when the package is first
imported, so they come first; graphs.py compiles graphs with every registered kind.
"""

from __future__ import annotations

from .base import (
    BUILTIN_KINDS,
    USER_KINDS,
    EndpointWant,
    KindRegistry,
    NodeKind,
    RunServices,
    evaluate,
    get_kind,
    kind_of,
    kinds,
    register_kind,
    unregister_kind,
)
from .cascade import CascadeKind
from .compute import CompiledCompute, ComputeKind
from .graphs import compile_dict, compile_graph, compile_source, endpoint_wants
from .llm import LLMKind

# This order is the order errors list them in.
for _builtin in (LLMKind(), ComputeKind(), CascadeKind()):
    BUILTIN_KINDS.add(_builtin)

__all__ = [
    "BUILTIN_KINDS",
    "USER_KINDS",
    "CompiledCompute",
    "EndpointWant",
    "KindRegistry",
    "NodeKind",
    "RunServices",
    "compile_dict",
    "compile_graph",
    "compile_source",
    "endpoint_wants",
    "evaluate",
    "get_kind",
    "kind_of",
    "kinds",
    "register_kind",
    "unregister_kind",
]
