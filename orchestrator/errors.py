"""Every error orchestrator raises on purpose, in one place, under one root.

Catch `OrchestratorError` to catch them all. The whole family, each with when it is raised
(`+ Base`: a second Python base kept so that code catching that base still catches it):

    OrchestratorError ......... the root; never raised itself
    ├── ConfigurationError .... settings that cannot work together: no server to talk to, an
    │   │                       unknown or missing param or provider, a missing extra
    │   └── ProviderCapabilityError  a provider asked for what it cannot do (a tokenizer
    │       │                   from one without); the library's error, never an SDK's
    │       └── TokenizerUnavailable  the server has no /tokenize or /detokenize (HTTP
    │                           404): truncation counts words instead
    ├── GraphError ............ a graph file that cannot be run; `.problems` lists every
    │                           problem found (file, node, field), not just the first
    ├── SchemaError ........... + ValueError. An output field spec that cannot become a JSON
    │                           schema (`.field` is its dotted path); compiling reports it as
    │                           one problem of a GraphError
    ├── UnsafeTemplateError ... + jinja2.TemplateError. A template or expression that reaches
    │                           for Python internals or leaves its folder
    ├── RenderLimitError ...... + jinja2.exceptions.SecurityError. A render over its time,
    │                           output or macro-depth limit. These two keep Jinja's types
    │                           because Jinja raises and catches them as its own: its
    │                           sandbox, `validate` and a node's render all catch
    │                           TemplateError, and a render failure fails its example
    ├── UntrustedFunction ..... + LookupError. A module:function an untrusted graph names
    │                           (`--trust` / `trust=True` allows it); nothing was imported
    ├── DatasetError .......... a dataset that cannot be read at all (a bad row only fails
    │                           that example)
    ├── LabelError ............ + ValueError. A human-labels file (`meta-eval`) that cannot
    │                           be used; the message names the file and line
    ├── CalibrationError ...... + ValueError. `calibrate` on a run whose node recorded no
    │                           confidence (neither logprobs nor n samples), or no trace
    ├── NoMaximumLikelihood ... + ValueError. `bradley_terry(prior=0)` on matches whose win
    │                           graph is not strongly connected (a player undefeated or
    │                           winless): no finite fit exists; `.players` names one side
    ├── NodeError ............. a node that could not produce a value: its example fails,
    │   │                       the run goes on (raise it from a compute function)
    │   └── NodeAbstained ..... a node with `abstain:` less sure than its threshold: its
    │                           example ends "abstained", the nodes after it do not run
    ├── RunFolderError ........ a run folder that cannot be used: another run's, locked by
    │   │                       a writer, of a newer layout, or one of the below
    │   ├── RunKeyMismatch .... it holds a run of another judge (graph, params, data,
    │   │                       model…); `.changes` says what differs
    │   ├── DamagedRunFile .... one of its files does not hold what a run writes (damaged,
    │   │                       or edited by hand); `.path` names it. Nothing is resumed
    │   │                       or reported from it
    │   ├── ReadOnlyRunFolder . a command had to write into a folder that cannot be written;
    │   │                       the message says how to write elsewhere
    │   └── StorageError ...... the disk failed a read or write of one of its files (disk
    │                           full, I/O error, file system gone); `.path` names the file,
    │                           `.disk_full` says which. Work written before is kept: fix
    │                           the cause and run again to resume
    ├── ServerUnavailable ..... a server that cannot be used at all (unreachable, does not
    │   │                       serve the model…); nothing ran
    │   └── ServerError ....... the same, raised by the client while it prepares the servers
    ├── ServerGone ............ a server stayed unreachable mid-run for longer than the run's
    │   │                       patience (`server_wait`); the run stops, finished work is kept
    │   └── ServerExited ...... the server this command started (the embedded one) exited:
    │                           it cannot come back, so the run stops at once; the message
    │                           has its exit code and the last lines of its log
    ├── LLMCallError .......... one LLM call out of tries; `.attempts` holds every try. Fails
    │                           its node (or is its value, with `on_error: record`)
    ├── RequestFailed ......... one try of one request failed; the retry policy decides what
    │   │                       comes next and the trace keeps it as an attempt. Never
    │   │                       escapes a call: a call out of tries is an LLMCallError
    │   ├── MalformedReply .... HTTP 200 whose body is not a usable completion; retried
    │   ├── ReplyTooLarge ..... a reply longer than the request's max_tokens allows; not
    │   │                       retried (the same server would answer the same)
    │   ├── DeadlineExceeded .. no complete reply within the request's deadline (`timeout`)
    │   ├── RetryAfterTooLong . the server asked to be retried later than `server_wait`
    │   ├── BatchUnsupported .. a request a batch file cannot carry (/tokenize, /detokenize):
    │   │                       the node that needs it fails; run that graph live
    │   └── FakeTransientError  a fault `FakeTransport` was told to inject (tests, dry runs)
    ├── BatchImportError ...... a batch output file that cannot be imported as it is;
    │                           `.problems` names each line, nothing was imported
    ├── WorkerLost ............ a worker (process or Ray actor) stopped answering mid-run;
    │                           what the others finished is kept for a resume
    ├── WorkerFailed .......... a worker could not start or hit an error of its own
    ├── ExportError ........... an OpenTelemetry backend refused the spans of `export
    │                           --otlp` or did not answer; the message names the endpoint
    └── EmbeddedServerError ... + RuntimeError. The embedded vLLM server could not be
        │                       prepared or started; the message says what to do
        ├── PortTaken ......... its port is held by another program or server; another
        │                       port would do
        └── StartCancelled .... the start was given up (the run stopped while vLLM
                                started); the server was stopped

Not errors, so not in the tree:

- `providers.batch.Deferred` is a BaseException, as asyncio's CancelledError is: the
  control-flow signal of a request that waits for the next batch file. No layer may take it
  for a failure (retried, recorded, written as a failed result), so it is no error at all.
- `graph.yamlfile._TooBig` is private to the YAML reader, which turns it into a Problem of
  a GraphError; it never leaves that module.

Where the store meets the file system (orchestrator/store/disk.py), an OSError or
sqlite3.Error becomes a StorageError or DamagedRunFile naming the file, so neither escapes
`orc.run` or a command. The response cache is the exception by design: it only saves
requests, so a cache file that cannot be used costs its replies (a warning), never the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateError
from jinja2.exceptions import SecurityError

if TYPE_CHECKING:
    from pathlib import Path

# Line breaks and other control characters (Unicode category Cc, plus the Unicode line and
# paragraph separators) that would split a problem over several lines or drive the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def visible(text: str) -> str:
    """`text` with every control character written as an escape, e.g. a newline as \\n."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def one_line(text: str) -> str:
    """A message on one line: line breaks become spaces, other control characters escapes."""
    return visible(re.sub(r"\s*\n\s*", " ", text.strip()))


@dataclass
class Problem:
    """One thing wrong with a graph file, located as precisely as we can."""

    file: str
    message: str
    node: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        # One line per problem, whatever a hostile file put in its names or values.
        where = visible(self.file)
        if self.node is not None:
            where += f": node '{visible(self.node)}'"
            if self.field:
                where += f", field '{visible(self.field)}'"
        elif self.field:
            where += f": field '{visible(self.field)}'"
        return f"{where}: {one_line(self.message)}"


class OrchestratorError(Exception):
    """The root of every error orchestrator raises on purpose: catch this to catch them all.

    The module docstring draws the whole family and says when each is raised.
    """


# -- settings, graphs, data ------------------------------------------------------------


class ConfigurationError(OrchestratorError):
    """Settings that cannot work together (e.g. no server to talk to)."""


class ProviderCapabilityError(ConfigurationError):
    """A provider was asked for what it cannot do (e.g. tokenize without a Tokenizer)."""


class TokenizerUnavailable(ProviderCapabilityError):
    """The server has no /tokenize or /detokenize (it answered 404)."""


class GraphError(OrchestratorError):
    """A graph file that cannot be run; carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class SchemaError(OrchestratorError, ValueError):
    """A field spec that cannot become a schema; `field` is the dotted path to it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class UnsafeTemplateError(TemplateError, OrchestratorError):
    """A template or expression that reaches for Python internals or leaves its folder."""


class RenderLimitError(SecurityError, OrchestratorError):
    """A render that went over its time, output or macro-depth limit."""


class UntrustedFunction(OrchestratorError, LookupError):
    """A module path an untrusted graph may not import."""


class DatasetError(OrchestratorError):
    """A dataset file that cannot be read at all (a bad row only fails that example)."""


class LabelError(OrchestratorError, ValueError):
    """A labels file that cannot be used; the message names the file and line."""


class CalibrationError(OrchestratorError, ValueError):
    """A run `calibrate` cannot threshold: its node recorded no confidence to use."""


class NoMaximumLikelihood(OrchestratorError, ValueError):
    """Bradley–Terry without a prior on matches that no finite fit explains."""

    def __init__(self, message: str, players: list[str]) -> None:
        super().__init__(message)
        self.players = players


class NodeError(OrchestratorError):
    """A node that could not produce a value; fails its example, other examples go on."""

    def __init__(self, node: str, message: str) -> None:
        self.node = node
        self.message = message
        super().__init__(f"node '{node}': {message}")


class NodeAbstained(NodeError):
    """A node with `abstain:` less sure of its answer than its threshold: the example ends
    as "abstained" (finished, not failed), and the nodes after it do not run."""

    def __init__(
        self, node: str, confidence: float, threshold: float, reason: str | None = None
    ) -> None:
        self.confidence = confidence
        self.threshold = threshold
        # A cascade none of whose stages was sure enough says so in its own words.
        super().__init__(node, reason or abstain_reason(node, confidence, threshold))

    def __str__(self) -> str:
        return self.message


def abstain_reason(node: str, confidence: float, threshold: float) -> str:
    """The plain reason an example's line and its node's trace record give for abstaining
    (two decimals, more where two would show the confidence equal to the threshold)."""
    digits = 2
    while digits < 6 and f"{confidence:.{digits}f}" == f"{threshold:.{digits}f}":
        digits += 1
    return (
        f"abstained: confidence {confidence:.{digits}f} below {threshold:.{digits}f} at node {node}"
    )


# -- run folders -----------------------------------------------------------------------


class RunFolderError(OrchestratorError):
    """A run folder that cannot be used: another run's, locked by a writer, or damaged."""


class RunKeyMismatch(RunFolderError):
    """The folder holds a run of another judge (graph, params, data, model…): resuming it
    would mix two judges' results. `changes` says what differs."""

    def __init__(self, message: str, changes: list[str]) -> None:
        super().__init__(message)
        self.changes = changes


class DamagedRunFile(RunFolderError):
    """A file of a run folder that does not hold what a run writes (damaged, or edited
    by hand): `path` names it. Nothing is resumed or reported from it."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class ReadOnlyRunFolder(RunFolderError):
    """A command had to write inside a run folder that cannot be written (a read-only mount,
    no rights); the message says how to write elsewhere."""


class StorageError(RunFolderError):
    """The disk failed a read or write of a run folder's file (full, an I/O error, a file
    system gone). `path` names the file, `problem` says what failed (without the advice),
    `disk_full` whether the disk was full. What was written before is kept."""

    def __init__(self, problem: str, advice: str, path: str | Path, disk_full: bool = False):
        super().__init__(f"{problem}; {advice}")
        self.problem = problem
        self.path = str(path)
        self.disk_full = disk_full


# -- servers and calls -----------------------------------------------------------------


class ServerUnavailable(OrchestratorError):
    """The server cannot be used at all (unreachable, refuses the model…); nothing ran."""


class ServerError(ServerUnavailable):
    """The server cannot be used at all (unreachable, refuses the model…)."""


class ServerGone(OrchestratorError):
    """The server stayed unreachable for longer than the run's patience; the run stops and
    keeps what finished."""


class ServerExited(ServerGone):
    """The server process this command started exited mid-run: waiting for it is pointless,
    so the run stops at once and keeps what finished; a re-run starts a new one."""


class LLMCallError(OrchestratorError):
    """A call that exhausted its budget; carries every attempt for the trace."""

    # The store's `Attempt` records (typed there: the store sits above this module).
    def __init__(self, message: str, attempts: list[Any]) -> None:
        self.attempts = attempts
        super().__init__(message)


class RequestFailed(OrchestratorError):
    """One try of one request failed; the retry policy decides what comes next. Never
    escapes a call (a call out of tries raises LLMCallError)."""


class MalformedReply(RequestFailed):
    """HTTP 200 whose body is not a usable completion (e.g. no choices); retried like a 5xx."""


class ReplyTooLarge(RequestFailed):
    """A reply larger than the request's max_tokens allows: the server does not keep to it
    (its `usage` may say anything). Not retried: the same server would answer the same."""


class DeadlineExceeded(RequestFailed):
    """No complete reply within the request's deadline (`--timeout`): connect, wait and the
    whole body together, so a server that drips its reply cannot hold a call forever."""


class RetryAfterTooLong(RequestFailed):
    """The server asked to be retried later than the run is willing to wait."""


class BatchUnsupported(RequestFailed):
    """A call a batch file cannot carry (vLLM's /tokenize, /detokenize)."""


class FakeTransientError(RequestFailed):
    """A fault the fake transport raises; transient (retried), an outage never."""

    def __init__(self, message: str = "fake transient fault", retry_after: float | None = None):
        self.retry_after = retry_after
        super().__init__(message)


# -- batch files, workers, the embedded server -----------------------------------------


SHOWN_PROBLEMS = 20  # problems listed in one BatchImportError; the rest are counted


class BatchImportError(OrchestratorError):
    """An output file that cannot be imported as it is; `problems` names each line."""

    def __init__(self, output: Path, problems: list[str], hint: str) -> None:
        self.problems = problems
        shown = problems[:SHOWN_PROBLEMS]
        more = len(problems) - len(shown)
        text = "\n".join(f"  {p}" for p in shown) + (f"\n  … and {more} more" if more else "")
        super().__init__(f"{output}: {len(problems)} problem(s), nothing imported:\n{text}\n{hint}")


class WorkerLost(OrchestratorError):
    """A worker stopped answering (killed, crashed, its machine gone): the run stops, and
    what the other workers finished is kept for a resume."""


class WorkerFailed(OrchestratorError):
    """A worker could not start or run (its error is in the message); the run stops."""


class ExportError(OrchestratorError):
    """An OpenTelemetry backend refused a run's spans or did not answer (`export --otlp`)."""


class EmbeddedServerError(OrchestratorError, RuntimeError):
    """The embedded server could not be prepared or started; the message says what to do."""


class PortTaken(EmbeddedServerError):
    """The port is held by another program or by another process's embedded server; another
    port would do."""


class StartCancelled(EmbeddedServerError):
    """The run stopped while its server was starting: the start was given up and the
    server stopped, rather than waited for."""
