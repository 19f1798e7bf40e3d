"""The embedded default judge: vLLM's CPU build serving a tiny model on this machine
(`server.py`), and that model, converted once from a GGUF (`model.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .server import (
        DEFAULT_PORT,
        EmbeddedServer,
        EmbeddedServerError,
        PortTaken,
        check_port_free,
        find_running,
        free_port,
        served_models,
        server_url,
        start_server,
    )

lazy(__name__)

__all__ = [
    "DEFAULT_PORT",
    "EmbeddedServer",
    "EmbeddedServerError",
    "PortTaken",
    "check_port_free",
    "find_running",
    "free_port",
    "served_models",
    "server_url",
    "start_server",
]
