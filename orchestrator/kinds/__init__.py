"""Node kinds: each owns its spec model, its compile step and its executor (see base.py).

The built-in kinds, `llm` and `compute`, are registered here, when the package is first
imported, so they come first; graphs.py compiles graphs with every registered kind.
"""

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
from .compute import ComputeKind
from .llm import LLMKind

for _builtin in (LLMKind(), ComputeKind()):  # this order is the order errors list them in
    BUILTIN_KINDS.add(_builtin)

__all__ = [
    "BUILTIN_KINDS",
    "USER_KINDS",
    "EndpointWant",
    "KindRegistry",
    "NodeKind",
    "RunServices",
    "evaluate",
    "get_kind",
    "kind_of",
    "kinds",
    "register_kind",
    "unregister_kind",
]
