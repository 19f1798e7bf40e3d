"""The judge card: how far a run's judges can be trusted (reliability, score distribution,
length, position and self-preference bias, agreement with people, juries), each finding
tested and the family corrected with Holm (`build.judge_card` assembles it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...faces import lazy

if TYPE_CHECKING:
    from .build import judge_card
    from .cells import cluster_line, flag_lines, sections
    from .record import JudgeCard
    from .stability import Retest, Stability, llm_nodes, measure, output_flips

lazy(__name__)

__all__ = [
    "JudgeCard",
    "Retest",
    "Stability",
    "cluster_line",
    "flag_lines",
    "judge_card",
    "llm_nodes",
    "measure",
    "output_flips",
    "sections",
]
