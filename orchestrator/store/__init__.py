"""Where a run is kept and read back: typed records, the run store protocol and the in-memory
store, the run folder with its lock and run key, the decision trace, the one reader, and the
response cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .cache import BUSY_SECONDS, ResponseCache, cache_key, default_cache_path, open_cache
    from .disk import on_disk
    from .flight import CURRENT, InFlight, note_try, timed_out
    from .folder import (
        INPUTS,
        LAYOUT_VERSION,
        MANIFEST,
        RESULTS,
        SNAPSHOT,
        SNAPSHOT_GRAPH,
        TRACES,
        RunFolder,
        damaged_line,
        iter_results,
        not_a_run_folder,
        read_only,
        write_json,
    )
    from .lock import RunLock, holder_alive
    from .outfolder import (
        check_out,
        check_out_file,
        claim_out,
        clear_out,
        command_output,
        write_out_file,
    )
    from .protocol import MemoryStore, RunStore
    from .reader import RunReader, TraceReader
    from .records import (
        ABSTAIN_NOTE,
        WORK_COUNTERS,
        AbstainCheck,
        Attempt,
        Counts,
        EncodedLine,
        EventEntry,
        GraphSnapshot,
        LimitChange,
        Manifest,
        ManifestDataset,
        ManifestGraph,
        ManifestPackage,
        ManifestParameters,
        NodeRun,
        NodeServer,
        OutageEntry,
        ReplicaEntry,
        ReplicaOutage,
        ResultLine,
        RunPart,
        ServerEntry,
        Summary,
        Tally,
        TraceRun,
        WorkerEntry,
        duration_text,
        plural,
        summed_work,
        unstorable,
    )
    from .runkey import RunKey, json_value, server_components, static_components
    from .trace import WHOLE, NodeRecord, TraceBatch, TraceRecorder, TraceStore, loads

lazy(__name__)

__all__ = [
    "ABSTAIN_NOTE",
    "BUSY_SECONDS",
    "CURRENT",
    "INPUTS",
    "LAYOUT_VERSION",
    "MANIFEST",
    "RESULTS",
    "SNAPSHOT",
    "SNAPSHOT_GRAPH",
    "TRACES",
    "WHOLE",
    "WORK_COUNTERS",
    "AbstainCheck",
    "Attempt",
    "Counts",
    "EncodedLine",
    "EventEntry",
    "GraphSnapshot",
    "InFlight",
    "LimitChange",
    "Manifest",
    "ManifestDataset",
    "ManifestGraph",
    "ManifestPackage",
    "ManifestParameters",
    "MemoryStore",
    "NodeRecord",
    "NodeRun",
    "NodeServer",
    "OutageEntry",
    "ReplicaEntry",
    "ReplicaOutage",
    "ResponseCache",
    "ResultLine",
    "RunFolder",
    "RunKey",
    "RunLock",
    "RunPart",
    "RunReader",
    "RunStore",
    "ServerEntry",
    "Summary",
    "Tally",
    "TraceBatch",
    "TraceReader",
    "TraceRecorder",
    "TraceRun",
    "TraceStore",
    "WorkerEntry",
    "cache_key",
    "check_out",
    "check_out_file",
    "claim_out",
    "clear_out",
    "command_output",
    "damaged_line",
    "default_cache_path",
    "duration_text",
    "holder_alive",
    "iter_results",
    "json_value",
    "loads",
    "not_a_run_folder",
    "note_try",
    "on_disk",
    "open_cache",
    "plural",
    "read_only",
    "server_components",
    "static_components",
    "summed_work",
    "timed_out",
    "unstorable",
    "write_json",
    "write_out_file",
]
