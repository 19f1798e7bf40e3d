"""The package as a user installs it: a built wheel, imported from outside the checkout.

A source checkout finds graphs/ beside the package, so the CLI tests cannot tell whether the
shipped protocols reach an installed wheel; this test builds one and runs it from elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest
from fakeserver import FakeServer, schema_responder

ROOT = Path(__file__).parent.parent
logger = logging.getLogger(__name__)
# pip's words when it could not reach the index: the one reason to skip rather than fail.
NETWORK_TROUBLE = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "Read timed out",
    "ConnectTimeoutError",
    "ProxyError",
    "There was a problem confirming the ssl certificate",
)


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """orchestrator's wheel, built once for this module's tests."""
    work = tmp_path_factory.mktemp("wheel")
    # Build isolation fetches hatchling from PyPI; ~10 s on this machine.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = work.glob("orchestrator_judge-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(built_wheel: Path) -> Path:
    """A folder holding orchestrator as installed from its wheel (no dependencies: those
    come from this interpreter's environment)."""
    wheel, work = built_wheel, built_wheel.parent
    names = zipfile.ZipFile(wheel).namelist()
    assert "orchestrator/_shipped/graphs/expert.yaml" in names
    assert "orchestrator/_shipped/examples/pointwise.jsonl" in names
    for template in (ROOT / "prompts").rglob("*.jinja"):
        assert f"orchestrator/_shipped/prompts/{template.relative_to(ROOT / 'prompts')}" in names
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


def _run(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The wheel's folder first on the path: the editable checkout must not answer instead.
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_installed_wheel_imports_itself_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    probe = _run(
        installed,
        tmp_path,
        "-c",
        "import orchestrator, orchestrator.shipped as s; "
        "print(orchestrator.__file__); print(s.shipped_root())",
    )
    assert probe.returncode == 0, probe.stderr
    module_file, root = probe.stdout.split()
    assert Path(module_file).is_relative_to(installed)
    assert Path(root) == installed / "orchestrator" / "_shipped"


def test_installed_wheel_validates_and_runs_shipped_protocols_by_name(
    installed: Path, tmp_path: Path
) -> None:
    listed = sorted(p.stem for p in (ROOT / "graphs").glob("*.yaml"))
    # One command for all of them (each interpreter costs 1.5-2 CPU-s of imports).
    checked = _run(installed, tmp_path, "-m", "orchestrator", "validate", *listed)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    said = " ".join(checked.stdout.split())  # the console wraps long lines
    for name in listed:
        assert re.search(rf"(^| )✓ {name}: graph '[\w-]+' is valid", said), name
    shipped = installed / "orchestrator" / "_shipped" / "examples" / "pointwise.jsonl"
    with FakeServer(schema_responder) as server:
        ran = _run(
            installed,
            tmp_path,
            "-m",
            "orchestrator",
            "run",
            "pointwise",
            "--data",
            str(shipped),
            "--out",
            "runs/pointwise",
            "--base-url",
            server.base_url,
            "--no-cache",
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = (tmp_path / "runs/pointwise/results.jsonl").read_text().splitlines()
    rows = shipped.read_text().splitlines()
    assert len(lines) == len([r for r in rows if r.strip()])
    assert all(json.loads(line)["status"] == "ok" for line in lines)
    # The run folder's snapshot holds the installed graph, so it reports without a checkout.
    assert (tmp_path / "runs/pointwise/snapshot").is_dir()


def test_the_wheel_installs_with_its_dependencies_into_a_new_venv_and_runs(
    built_wheel: Path, tmp_path: Path
) -> None:
    """What a user does: a new virtual environment (nothing from this one), pip install the
    wheel, run a shipped protocol and its shipped data by name."""
    started = time.monotonic()
    env_dir = tmp_path / "venv"
    # No pip inside the venv: this interpreter's pip installs into it (--python), which
    # saves running ensurepip; --no-compile skips byte-compiling every dependency.
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = ["install", "-q", "--no-compile", str(built_wheel)]
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *install],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if pip.returncode != 0 and any(word in pip.stdout + pip.stderr for word in NETWORK_TROUBLE):
        pytest.skip(f"pip could not reach the package index: {pip.stderr.strip()[-300:]}")
    assert pip.returncode == 0, pip.stdout + pip.stderr
    installed_at = time.monotonic()
    work = tmp_path / "work"
    work.mkdir()
    orchestrator = str(env_dir / "bin" / "orchestrator")
    listed = subprocess.run(
        [orchestrator, "examples"], cwd=work, env=env, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    # The shipped folder inside the new venv, named once, and a short --data per graph.
    assert f"(to copy from): {env_dir}" in listed.stdout
    assert "orchestrator run pointwise --data pointwise.jsonl\n" in listed.stdout
    command = [orchestrator, "run", "pointwise", "--data", "pointwise.jsonl", "--out", "out"]
    with FakeServer(schema_responder) as server:
        ran = subprocess.run(
            [*command, "--base-url", server.base_url, "--no-cache"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "using the shipped example" in ran.stderr
    results = (work / "out" / "results.jsonl").read_text().splitlines()
    assert len(results) == len((ROOT / "examples/pointwise.jsonl").read_text().splitlines())
    assert all(json.loads(line)["status"] == "ok" for line in results)
    logger.info(
        "fresh venv: install %.0f s, examples and run %.0f s",
        installed_at - started,
        time.monotonic() - installed_at,
    )


def test_install_doc_names_every_extra_and_only_those() -> None:
    """docs/install.md's table of extras follows pyproject.toml."""
    import tomllib

    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    doc = (ROOT / "docs" / "install.md").read_text()
    table = doc.split("## What each extra brings", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([a-z]+)` \|", table, re.M))
    assert named == extras
