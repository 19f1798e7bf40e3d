"""The built-in providers by name: what `--provider NAME` (the CLI), `provider=` (the API)
and a graph node's `provider:` may name. Only these names: a graph file can choose among
providers the package ships, never load one (loading code named by a file would run it).

The fake provider is for tests and is given as an object (`transport=orc.FakeTransport()`);
the batch provider is what `orchestrator batch` runs its rounds with. Neither is named here.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigurationError
from .base import Provider

DEFAULT_PROVIDER = "openai"


def _openai() -> Provider:
    # Imported when a run makes one: the SDK takes half a second to import, which
    # `validate`, `report` and the other commands that send nothing should not pay.
    from .openai_compat import OpenAITransport

    return OpenAITransport()


# name -> a factory of a fresh provider (a run holds one instance of each it uses)
BUILT_IN: dict[str, Callable[[], Provider]] = {
    "openai": _openai,  # OpenAI-compatible servers: vLLM, and any /v1 chat API
}


def unknown_provider(name: object) -> str | None:
    """Why `name` names no built-in provider (None when it does)."""
    if isinstance(name, str) and name in BUILT_IN:
        return None
    known = ", ".join(sorted(BUILT_IN))
    return f"unknown provider {name!r}; the built-in providers are: {known}"


def make_provider(name: str) -> Provider:
    """A new instance of the built-in provider `name`; ConfigurationError for another."""
    problem = unknown_provider(name)
    if problem is not None:
        raise ConfigurationError(problem)
    return BUILT_IN[name]()
