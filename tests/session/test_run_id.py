"""Run ids are read back as text by every tool that guesses types (a CI run met one that
pandas read as the float `inf`)."""

from __future__ import annotations

import io

import pytest

from orchestrator.session.session import new_run_id

pd = pytest.importorskip("pandas")


def test_run_ids_never_read_back_as_numbers() -> None:
    ids = [new_run_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids) and all(len(i) == 12 for i in ids)
    for run_id in ids:
        with pytest.raises(ValueError):
            float(run_id)
    # The CSV round trip that failed: a column of ids stays a column of the same strings.
    back = pd.read_csv(io.StringIO("run_id\n" + "\n".join(ids) + "\n"))
    assert list(back["run_id"]) == ids
