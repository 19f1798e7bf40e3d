"""`python -m orchestrator` is the same as the `orchestrator` command."""

from .cli import main

main()
