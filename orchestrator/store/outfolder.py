"""The folder a command writes its output into (`--out`): it may be missing, empty, or one
the same command wrote before, recognised by that command's manifest in it; anything else is
refused, and `--overwrite` deletes only the names the command writes there. A run folder
(folder.py) and the aligned graph folder of `orchestrator align` follow this one rule, and
so can any other command that writes a folder: describe it with `command_output`, check
with `check_out` (then `clear_out` on overwrite), and mark it with `claim_out`. A command
that writes one file (`label-plan --out`) checks it with `check_out_file` and writes it
with `write_out_file`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import RunFolderError
from .disk import on_disk

__all__ = [
    "OUT_MANIFEST",
    "OutputKind",
    "check_out",
    "check_out_file",
    "claim_out",
    "clear_out",
    "not_ours",
    "write_out_file",
]

# The file that says whose a folder is: a run's manifest, or the stamp of a command.
OUT_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class OutputKind:
    """How a command recognises the folder it writes, and what in it is its own."""

    what: str  # the folder as messages name it: "a run folder"
    writer: str  # who writes it: "a run", "orchestrator align"
    manifest_kind: str  # what its manifest is called in messages: "a run manifest"
    # Why a parsed manifest is not the writer's (None when it is).
    manifest_problem: Callable[[Any], str | None]
    owns: frozenset[str]  # every name the writer puts there: what --overwrite deletes
    # Names a folder may hold before the manifest is written (a run killed while starting):
    # such a folder is the writer's too.
    bare: frozenset[str] = frozenset()
    stamp: dict[str, Any] | None = None  # the manifest `claim_out` writes (None: its own)
    manifest: str = OUT_MANIFEST


def command_output(command: str, owns: Iterable[str]) -> OutputKind:
    """The output folder of `orchestrator COMMAND`, which writes the names `owns` and marks
    the folder as its own with a manifest.json naming it before it writes anything else."""
    writer = f"orchestrator {command}"

    def problem(manifest: Any) -> str | None:
        found = manifest.get("written_by") if isinstance(manifest, dict) else None
        if found == writer:
            return None
        return f"is from `{found}`" if isinstance(found, str) else "names no command"

    return OutputKind(
        what=f"a folder `{writer}` wrote",
        writer=writer,
        manifest_kind=f"the manifest of `{writer}`",
        manifest_problem=problem,
        owns=frozenset({*owns, OUT_MANIFEST}),
        stamp={"written_by": writer},
    )


def not_ours(path: Path, kind: OutputKind) -> str | None:
    """Why the existing folder `path` is not `kind`'s, naming the file (None when it is one,
    or is empty): its manifest must be the writer's, or, with none, it may hold only names
    the writer writes before its manifest."""
    manifest = path / kind.manifest
    if manifest.is_file():
        try:
            problem = kind.manifest_problem(orjson.loads(manifest.read_bytes()))
        except orjson.JSONDecodeError as exc:
            problem = f"is not JSON ({exc})"
        except OSError as exc:
            problem = f"cannot be read ({exc.strerror})"
        return (
            None if problem is None else f"{manifest} {problem}, so it is not {kind.manifest_kind}"
        )
    for entry in sorted(path.iterdir()):
        if entry.name in kind.bare:
            continue
        if entry.name in kind.owns:
            return f"{entry} may be yours: the folder has no {kind.manifest} from {kind.writer}"
        return f"{entry} is not a file {kind.writer} writes, and there is no {kind.manifest}"
    return None


def _inside(inner: Path, outer: Path) -> bool:
    return inner.resolve().is_relative_to(outer.resolve())


def check_out(
    path: Path,
    kind: OutputKind,
    overwrite: bool,
    *,
    option: str = "--out",
    reads: Iterable[Path] = (),
) -> None:
    """RunFolderError unless the command may write into `path`: missing, an empty folder,
    or `kind`'s; and none of `reads` (the files the command reads: its graph, labels) may
    be inside it, or writing would replace what is being read. Nothing is written."""
    with on_disk(path, writing=False):
        for read in reads:
            if _inside(read, path):
                raise RunFolderError(
                    f"{option} {path} holds {read}, which this command reads: writing there "
                    f"could replace it, so nothing was written; choose another {option}."
                )
        if path.exists() and not path.is_dir():
            raise RunFolderError(
                f"{option} {path} is a file, not a folder; choose a folder path instead."
            )
        problem = not_ours(path, kind) if path.is_dir() else None
    if problem is None:
        return
    if overwrite:
        raise RunFolderError(
            f"--overwrite replaces only {kind.what} or an empty folder: {problem}, so "
            f"nothing was deleted. Choose another {option}."
        )
    raise RunFolderError(
        f"{path} is not empty and is not {kind.what} ({problem}); choose another {option}."
    )


def clear_out(path: Path, kind: OutputKind, keep: Iterable[str] = ()) -> None:
    """Delete what `kind`'s writer put in `path` (but `keep`); anything else (a user's
    notes) stays. Only for a folder `check_out` passed."""
    kept = set(keep)
    with on_disk(path):
        for entry in path.iterdir():
            if entry.name in kept or entry.name not in kind.owns:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def claim_out(path: Path, kind: OutputKind) -> None:
    """Create `path` and write `kind`'s manifest in it, before anything else is written,
    so an interrupted command's folder is recognised as its own next time."""
    if kind.stamp is None:
        raise ValueError(f"{kind.writer} writes its own {kind.manifest}")
    with on_disk(path):
        path.mkdir(parents=True, exist_ok=True)
        blob = orjson.dumps(kind.stamp, option=orjson.OPT_INDENT_2)
        (path / kind.manifest).write_bytes(blob + b"\n")


def check_out_file(
    path: Path,
    overwrite: bool,
    ours: Callable[[Path], bool],
    *,
    what: str,
    option: str = "--out",
    reads: Iterable[Path] = (),
) -> None:
    """The same rule for a command that writes one file: RunFolderError unless `path` is
    missing, or (with `overwrite`) a file `ours` recognises as `what` this command wrote;
    a file the command reads is never its output. Nothing is written."""
    with on_disk(path, writing=False):
        for read in reads:
            if path.exists() and read.exists() and path.resolve() == read.resolve():
                raise RunFolderError(
                    f"{option} {path} is a file this command reads; choose another {option}."
                )
        if path.is_dir():
            raise RunFolderError(f"{option} {path} is a folder; choose a file path instead.")
        if not path.exists():
            return
        mine = ours(path)
    if not overwrite:
        raise RunFolderError(
            f"{path} exists; choose another {option}"
            + (f" (or --overwrite to replace {what})." if mine else ".")
        )
    if not mine:
        raise RunFolderError(
            f"--overwrite replaces only {what}: {path} is not one, so nothing was replaced. "
            f"Choose another {option}."
        )


def write_out_file(path: Path, blob: bytes) -> None:
    """Write `path` whole or not at all (a tmp file beside it, renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    with on_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
