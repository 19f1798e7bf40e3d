"""The one --out rule (store/outfolder.py) as another command would use it: its own folder
is recognised by the manifest it wrote first, another command's or a run's is not, and a
folder holding a file the command reads is refused even with --overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import RunFolderError
from orchestrator.store.folder import RUN_FOLDER
from orchestrator.store.outfolder import (
    check_out,
    claim_out,
    clear_out,
    command_output,
    not_ours,
)

CASCADE = command_output("cascade", {"graph.yaml", "prompts"})


def test_a_claimed_folder_is_the_commands_own_and_no_one_elses(tmp_path: Path) -> None:
    out = tmp_path / "out"
    check_out(out, CASCADE, overwrite=False)  # missing: fine, nothing created
    assert not out.exists()
    claim_out(out, CASCADE)
    (out / "graph.yaml").write_text("name: cascade\n")
    (out / "notes.txt").write_text("mine")
    assert not_ours(out, CASCADE) is None
    check_out(out, CASCADE, overwrite=True)
    clear_out(out, CASCADE)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # yours stays
    claim_out(out, CASCADE)
    # Another command's folder, and a run's, are not this one's: both refuse the other.
    other = command_output("align", {"graph.yaml"})
    with pytest.raises(RunFolderError, match=r"orchestrator cascade.*nothing was deleted"):
        check_out(out, other, overwrite=True)
    with pytest.raises(RunFolderError, match="not a run manifest"):
        check_out(out, RUN_FOLDER, overwrite=False)
    assert json.loads((out / "manifest.json").read_text()) == {"written_by": "orchestrator cascade"}


def test_without_its_manifest_a_folder_holding_its_names_may_be_yours(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "graph.yaml").write_text("name: mine\n")
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match=r"graph\.yaml may be yours"):
            check_out(out, CASCADE, overwrite=overwrite)
    assert (out / "graph.yaml").read_text() == "name: mine\n"


def test_a_folder_holding_what_the_command_reads_is_refused(tmp_path: Path) -> None:
    graph = tmp_path / "g" / "graph.yaml"
    graph.parent.mkdir()
    graph.write_text("name: g\n")
    for out in (graph.parent, tmp_path):
        with pytest.raises(RunFolderError, match="which this command reads"):
            check_out(out, CASCADE, overwrite=True, reads=[graph])
    check_out(tmp_path / "elsewhere", CASCADE, overwrite=False, reads=[graph])
