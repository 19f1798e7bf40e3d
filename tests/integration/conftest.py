"""Integration fixtures: one real embedded vLLM server shared by the whole test session."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from orchestrator.embedded import (
    DEFAULT_MODEL_NAME,
    DEFAULT_PORT,
    find_running,
    port_is_free,
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def embedded_server() -> Iterator[ServerInfo]:
    """Reuse an embedded server already on the default port, or start one for the session."""
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
    port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else _free_port()
    server = start_server(port=port, log=_progress)
    try:
        yield ServerInfo(base_url=server.base_url, model=server.model)
    finally:
        server.stop()
