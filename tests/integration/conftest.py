"""Integration fixtures: one real embedded vLLM server shared by the whole test session."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from vllm_fixture import ServerDidNotStart, start_for_tests, terminal_say

from orchestrator.local.server import (
    DEFAULT_MODEL_NAME,
    DEFAULT_PORT,
    PortTaken,
    find_running,
    free_port,
)


@dataclass(frozen=True)
class ServerInfo:
    """What the tests need to reach a server: its OpenAI base URL and model name."""

    base_url: str
    model: str


@pytest.fixture(scope="session")
def embedded_server(request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    """Reuse the shared embedded server (`orchestrator serve`) on the default port, or
    start one for the session (on another port if the default one is taken: a server that
    another command started for itself is never borrowed, it stops under us). A start says
    its phases, and every 10 s that it is still waiting, on pytest's output even under `-q`;
    one that fails shows the server log's last lines (tests/vllm_fixture.py)."""
    say = terminal_say(request.config)
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
    failed: str | None = None
    try:
        try:
            server = start_for_tests(DEFAULT_PORT, say)
        except PortTaken as exc:
            say(f"[embedded server] {exc}; starting the session's server on another port")
            server = start_for_tests(free_port(), say)
    except ServerDidNotStart as exc:
        failed = str(exc)
    if failed is not None:  # failed outside the handler: the error is printed once
        pytest.fail(failed, pytrace=False)
    try:
        yield ServerInfo(base_url=server.base_url, model=server.model)
    finally:
        server.stop()
