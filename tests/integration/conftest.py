"""Integration fixtures: one real embedded vLLM server shared by the whole test session."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from orchestrator.local.server import (
    DEFAULT_MODEL_NAME,
    DEFAULT_PORT,
    PortTaken,
    find_running,
    free_port,
    start_server,
)


@dataclass(frozen=True)
class ServerInfo:
    """What the tests need to reach a server: its OpenAI base URL and model name."""

    base_url: str
    model: str


def _progress(message: str) -> None:
    """Show start-up progress even under pytest's capture: the first start takes minutes."""
    print(f"[embedded server] {message}", file=sys.__stderr__, flush=True)


@pytest.fixture(scope="session")
def embedded_server() -> Iterator[ServerInfo]:
    """Reuse the shared embedded server (`orchestrator serve`) on the default port, or
    start one for the session (on another port if the default one is taken: a server that
    another command started for itself is never borrowed, it stops under us)."""
    running = find_running(DEFAULT_PORT)
    if running is not None:
        yield ServerInfo(base_url=running, model=DEFAULT_MODEL_NAME)
        return
    if importlib.util.find_spec("vllm") is None:
        message = "vllm is not installed; `make test` installs it (the project's local extra)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the integration tests: {message}", pytrace=False)
        pytest.skip(message)
    # Something else may hold the default port; the tests do not care which port they use.
    try:
        server = start_server(port=DEFAULT_PORT, log=_progress)
    except PortTaken as exc:
        _progress(f"{exc}; starting the session's server on another port")
        server = start_server(port=free_port(), log=_progress)
    try:
        yield ServerInfo(base_url=server.base_url, model=server.model)
    finally:
        server.stop()
