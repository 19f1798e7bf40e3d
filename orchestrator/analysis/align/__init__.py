"""Aligning a judge to a few human labels: the pure parts `orc.align` is built from.

`labels` reads one truth per example and codes answers and labels as numbers, `split`
keeps a test set the search never sees and deals the rest into folds, `shots` draws
labelled examples as few-shot records, `variants` builds each configuration's graph dict,
`answers` reads the node's answers from a run, `scoring` measures agreement and compares
baseline and aligned on the test set, `search` scores configurations over folds and picks
one, `isotonic` maps the judge's score monotonically onto the people's scale, `writer`
leaves the aligned graph folder, and `record` holds the typed result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...faces import lazy
from . import isotonic

if TYPE_CHECKING:
    from .answers import node_answers, node_values
    from .labels import Coder, read_truth
    from .record import (
        METRICS,
        Alignment,
        Configuration,
        Estimate,
        Metric,
        Shot,
        Side,
        Trial,
        Variant,
    )
    from .scoring import compare
    from .search import choose, trial
    from .shots import check_counts, draw_shots, shot_record
    from .split import folds, split, strata
    from .variants import (
        ISOTONIC_FILE,
        check_variant,
        integer_range,
        parse_variant,
        variant_spec,
        variant_texts,
        with_isotonic,
    )
    from .writer import PAGE_FILE, open_folder, write_graph, write_record

lazy(__name__)

__all__ = [
    "ISOTONIC_FILE",
    "METRICS",
    "PAGE_FILE",
    "Alignment",
    "Coder",
    "Configuration",
    "Estimate",
    "Metric",
    "Shot",
    "Side",
    "Trial",
    "Variant",
    "check_counts",
    "check_variant",
    "choose",
    "compare",
    "draw_shots",
    "folds",
    "integer_range",
    "isotonic",
    "node_answers",
    "node_values",
    "open_folder",
    "parse_variant",
    "read_truth",
    "shot_record",
    "split",
    "strata",
    "trial",
    "variant_spec",
    "variant_texts",
    "with_isotonic",
    "write_graph",
    "write_record",
]
