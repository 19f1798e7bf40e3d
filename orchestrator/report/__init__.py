"""The trace explorer: an HTML report of a run folder that a person can audit.

`build_report` writes one self-contained RUN_DIR/report.html (no network); `serve_report`
serves the same page on localhost and reads each example's trace on demand;
`write_compare_page` writes the page of an `orc.compare` result; `make_review_server`
serves `orchestrator review`'s page, where people label a run's decisions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .align_page import write_page
    from .build import REPORT, build_report
    from .compare_page import write_compare_page
    from .review import ReviewServer, default_labels, make_review_server
    from .serve import make_server, serve_report, serve_until_interrupted, serving_line

lazy(__name__)

__all__ = [
    "REPORT",
    "ReviewServer",
    "build_report",
    "default_labels",
    "make_review_server",
    "make_server",
    "serve_report",
    "serve_until_interrupted",
    "serving_line",
    "write_compare_page",
    "write_page",
]
