"""Commands that send no request do not import the OpenAI SDK: it takes about half a second
to import (of about 1.6 s for `orchestrator validate` before it was deferred), and every
command, test subprocess and worker start would pay it."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


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
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert found.stdout.split() == ["False", "True"], found.stderr
