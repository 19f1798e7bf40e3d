"""The command line: one adapter over the library. `app.py` holds the Typer app and what the
verbs share; each module registers a group of verbs on it (in the order `--help` lists)."""

from __future__ import annotations

from .app import app, main

# isort: split
from . import run  # noqa: F401 - validate, run, demo

# isort: split
from . import inspect  # noqa: F401 - trace, serve, report, distill, meta-eval, cache

# isort: split
from . import functions  # noqa: F401 - functions

# isort: split
from . import compare  # noqa: F401 - compare

# isort: split
from . import diff  # noqa: F401 - diff

# isort: split
from . import power  # noqa: F401 - power

# isort: split
from . import export  # noqa: F401 - export, ratings

# isort: split
from . import batch  # noqa: F401 - batch export, batch import

# isort: split
from . import examples  # noqa: F401 - examples

# isort: split
from . import card  # noqa: F401 - judge-card

# isort: split
from . import calibrate  # noqa: F401 - calibrate

# isort: split
from . import align  # noqa: F401 - align

# isort: split
from . import (
    estimate,  # noqa: F401 - estimate, label-plan
    replay,  # noqa: F401 - replay, stress
    review,  # noqa: F401 - review
)

__all__ = ["app", "main"]
