"""Commands that send no request do not import the OpenAI SDK, and compiling a graph does not
import numpy: the SDK took about half a second to import (of about 1.6 s for `orchestrator
validate` before it was deferred), numpy 0.16-0.33 s (`-X importtime`), and every command,
test subprocess and worker start would pay them."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def printed(code: str) -> list[str]:
    """What `code` prints, run in a fresh interpreter (a test's own has imported it all)."""
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    return found.stdout.split()


def test_the_cli_and_a_compiled_graph_leave_the_sdk_unimported() -> None:
    code = (
        "import sys, orchestrator.cli\n"
        "from orchestrator.kinds.graphs import compile_graph\n"
        f"compile_graph({str(REPO / 'graphs' / 'pointwise.yaml')!r})\n"
        "print('openai' in sys.modules)\n"
        "from orchestrator.providers.registry import make_provider\n"
        "make_provider('openai')\n"
        "print('openai' in sys.modules)\n"
    )
    assert printed(code) == ["False", "True"]


def test_compiling_every_shipped_graph_leaves_numpy_unimported() -> None:
    """Compiling loads every compute module (the function registry), so one of them that
    imports numpy at its top puts numpy into every command; a function that uses it
    imports it when it runs. The last line shows the check can see numpy at all."""
    graphs = sorted(str(path) for path in (REPO / "graphs").glob("*.yaml"))
    code = (
        "import sys, orchestrator.cli\n"
        "from orchestrator.kinds.graphs import compile_graph\n"
        f"for path in {graphs!r}:\n"
        "    compile_graph(path)\n"
        "print('numpy' in sys.modules)\n"
        "from orchestrator.stats import fleiss_kappa\n"
        "print('numpy' in sys.modules)\n"
    )
    assert printed(code) == ["False", "True"]
