"""An API key given by flag, by OPENAI_API_KEY or through a node's `api_key_env` never appears
in the run folder (traces.sqlite bytes included), the cache, the report, `orchestrator trace`
or any command's output, even when a hostile server echoes it back in its errors.
"""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, Responder, _error_body, _Handler, schema_responder
from helpers import is_canary, orchestrator_command, requests_per_call, write_graph

from orchestrator.store.folder import read_results

pytestmark = pytest.mark.reliability

REPO = Path(__file__).resolve().parents[2]
OUTPUT = {"score": {"type": "integer", "min": 1, "max": 10}}
GRAPH: dict[str, Any] = {
    "name": "judge",
    "inputs": ["text"],
    "defaults": {"temperature": 0.0, "max_tokens": 50, "retries": 1},
    "nodes": {"judge": {"kind": "llm", "prompt": "judge.jinja", "output": OUTPUT}},
    "outputs": {"score": "judge.score"},
}
TEMPLATES = {"judge.jinja": "Rate <<{{ text }}>>", "other.jinja": "Rate again <<{{ text }}>>"}
ROWS = 3


def secret(label: str) -> str:
    """A key no other test uses, so a hit can only come from this run."""
    return f"sk-test-SECRET-{label}-{uuid.uuid4().hex}"


# -- a server that sees (and can betray) the Authorization header ----------------------------

_current = threading.local()  # the header of the request this handler thread is serving


class _HeaderHandler(_Handler):
    """The fake server's handler, plus: record every Authorization header; refuse /models with
    HTTP 401 quoting the header when the server is told to."""

    server: Any

    def _note(self) -> str:
        header = self.headers.get("Authorization") or ""
        _current.header = header
        fake: KeyServer = self.server.fake
        with fake.lock:
            fake.headers.append((self.path, header))
        return header

    def do_GET(self) -> None:
        header = self._note()
        fake: KeyServer = self.server.fake
        if fake.refuse_models is None:
            super().do_GET()
            return
        message = "Unauthorized" if fake.refuse_models == "plain" else f"bad key: {header}"
        self._send(401, _error_body(401, message))

    def do_POST(self) -> None:
        self._note()
        super().do_POST()


class KeyServer(FakeServer):
    """FakeServer whose responders may read the request's Authorization header
    (`request_header()`); `headers` holds (path, header) for every request."""

    def __init__(self, responder: Responder | None = None, refuse_models: str | None = None):
        super().__init__(responder)
        self.refuse_models = refuse_models  # None, "plain" (401) or "echo" (401 quoting the key)
        self.headers: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def start(self, port: int = 0) -> KeyServer:
        super().start(port)
        assert self._httpd is not None
        self._httpd.RequestHandlerClass = _HeaderHandler  # before any request arrives
        return self

    def keys_seen(self, path_part: str = "/v1/") -> set[str]:
        """Keys sent to paths containing `path_part` (the API; vLLM's /version takes none)."""
        with self.lock:
            return {h.removeprefix("Bearer ") for p, h in self.headers if path_part in p}


def request_header() -> str:
    return getattr(_current, "header", "")


def scores(body: dict[str, Any]) -> Reply:
    if is_canary(body):
        return schema_responder(body)
    return Reply(content=json.dumps({"score": 4}))


def echo_on_chat(status: int) -> Responder:
    """Canary answered; every judge call refused with `status`, the message quoting the key
    (as some proxies do with "invalid key: …")."""

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        return Reply(status=status, content=f"key {request_header()} may not use this model")

    return respond


# -- running and searching -------------------------------------------------------------------


def write_case(root: Path, graph: dict[str, Any] | None = None) -> tuple[Path, Path]:
    graph_path = write_graph(root / "g", graph or GRAPH, TEMPLATES)
    data = root / "rows.jsonl"
    rows = [{"id": f"e{i}", "text": f"text {i}"} for i in range(ROWS)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return graph_path, data


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`orchestrator ARGS` with no inherited OPENAI_API_KEY: each test says where the key is."""
    return orchestrator_command(*args, env=env, unset=("OPENAI_API_KEY",))


def run_args(graph: Path, data: Path, root: Path, base_url: str, *extra: str) -> list[str]:
    out, cache = root / "run", root / "cache.sqlite"
    return ["run", str(graph), "--data", str(data), "--out", str(out), "--base-url", base_url,
            "--cache", str(cache), *extra]  # fmt: skip


def files_under(root: Path) -> Iterator[Path]:
    return (p for p in sorted(root.rglob("*")) if p.is_file())


def leaks(keys: list[str], root: Path, outputs: list[str]) -> list[str]:
    """Where any key (or its random part alone) shows up: files under root, command output."""
    needles = [k.encode() for k in keys] + [k.rsplit("-", 1)[1].encode() for k in keys]
    found = [
        str(path.relative_to(root))
        for path in files_under(root)
        if any(n in path.read_bytes() for n in needles)
    ]
    for index, text in enumerate(outputs):
        flat = text.replace("\n", "").encode()  # a wrapped line must not hide a key
        if any(n in flat for n in needles):
            found.append(f"output #{index}")
    return found


def assert_no_leak(keys: list[str], root: Path, outputs: list[str]) -> None:
    found = leaks(keys, root, outputs)
    assert found == [], "key found in: " + ", ".join(found)


def audit(root: Path) -> list[str]:
    """Outputs of the commands that show a run folder: report, trace (text and jsonl)."""
    out = root / "run"
    shown = [command("report", str(out)), command("trace", str(out))]
    shown.append(command("trace", str(out), "--format", "jsonl"))
    for done in shown:
        assert done.returncode == 0, done.stderr
    assert (out / "report.html").is_file()
    return [d.stdout + d.stderr for d in shown]


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["flag", "env"])
def test_key_by_flag_or_env_is_sent_but_never_written(
    tmp_path: Path, given: str, figure: Any
) -> None:
    key = secret(given)
    graph, data = write_case(tmp_path)
    # The SDK's debug log is on too: it is a log a user may switch on and paste.
    env = {"OPENAI_LOG": "debug", **({"OPENAI_API_KEY": key} if given == "env" else {})}
    extra = ["--api-key", key] if given == "flag" else []
    with KeyServer(scores) as server:
        done = command(*run_args(graph, data, tmp_path, server.base_url, *extra), env=env)
        per_call = requests_per_call(server.requests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DEBUG" in done.stderr  # the SDK did log
    assert server.keys_seen() == {key}  # the key was used for every request…
    got = read_results(tmp_path / "run")
    assert len(got) == ROWS
    outputs = [done.stdout + done.stderr, *audit(tmp_path)]
    found = leaks([key], tmp_path, outputs)
    assert found == [], "key found in: " + ", ".join(found)  # …and written nowhere
    figure(
        f"API key by {'--api-key' if given == 'flag' else 'OPENAI_API_KEY'}",
        "a unique key; every file of the run folder and cache, the report, `trace` output and "
        "the run's output with the SDK's debug log searched for it",
        runs=1,
        lost=ROWS - len(got),
        max_requests=max(per_call.values()),
        note=f"key found in {len(found)} places",
    )


def test_node_api_key_env_goes_to_its_own_server_and_nowhere_else(tmp_path: Path) -> None:
    default_key, node_key = secret("default"), secret("node")
    with KeyServer(scores) as main, KeyServer(scores) as other:
        graph = {
            **GRAPH,
            "nodes": {
                "judge": GRAPH["nodes"]["judge"],
                "second": {
                    "kind": "llm",
                    "prompt": "other.jinja",
                    "output": OUTPUT,
                    "base_url": other.base_url,
                    "api_key_env": "JUDGE_TWO_KEY",
                },
            },
            "outputs": {"score": "judge.score", "again": "second.score"},
        }
        graph_path, data = write_case(tmp_path, graph)
        done = command(
            *run_args(graph_path, data, tmp_path, main.base_url, "--api-key", default_key),
            "--allow-server",  # the graph names a server of its own: the user allows it
            other.base_url,
            env={"JUDGE_TWO_KEY": node_key},
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert main.keys_seen() == {default_key} and other.keys_seen() == {node_key}
    assert {r["again"] for r in read_results(tmp_path / "run")} == {4}
    outputs = [done.stdout + done.stderr, *audit(tmp_path)]
    assert_no_leak([default_key, node_key], tmp_path, outputs)


def _graph_with_its_own_server(url: str) -> dict[str, Any]:
    """The judge, plus a node that names its own server and asks for the user's key."""
    second = {"kind": "llm", "prompt": "other.jinja", "output": OUTPUT, "base_url": url}
    second["api_key_env"] = "OPENAI_API_KEY"
    return {
        **GRAPH,
        "nodes": {"judge": GRAPH["nodes"]["judge"], "second": second},
        "outputs": {"score": "judge.score", "again": "second.score"},
    }


def test_graphs_own_server_gets_nothing_unless_the_user_allows_it(tmp_path: Path) -> None:
    """Issue 24: a graph naming `base_url` + `api_key_env: OPENAI_API_KEY` sent the user's
    key to the graph's server. Now nothing reaches that server until `--allow-server`."""
    key = secret("user")
    with KeyServer(scores) as mine, KeyServer(scores) as theirs:
        graph_path, data = write_case(tmp_path, _graph_with_its_own_server(theirs.base_url))
        args = run_args(graph_path, data, tmp_path, mine.base_url)
        refused = command(*args, env={"OPENAI_API_KEY": key})
        assert theirs.headers == [] and theirs.requests == []
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"--allow-server {theirs.base_url}" in refused.stderr, refused.stderr
        assert "node 'second'" in refused.stderr
        allowed = command(*args, "--allow-server", theirs.base_url, env={"OPENAI_API_KEY": key})
        urls = (mine.base_url, theirs.base_url)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert theirs.keys_seen() == {key} and mine.keys_seen() == {key}
    told = next(line for line in allowed.stderr.splitlines() if "Servers this run talks to" in line)
    assert all(url in told for url in urls), told
    assert_no_leak([key], tmp_path, [refused.stdout + refused.stderr])


def test_graph_cannot_choose_which_variable_becomes_the_key(tmp_path: Path) -> None:
    """Issue 35: a node with `api_key_env: AWS_SECRET_ACCESS_KEY` and no server of its own
    sent the user's AWS secret as the key to the user's server. Now `validate` and `run`
    refuse it, naming the field, and nothing is sent."""
    aws, key = secret("aws"), secret("user")
    graph = {**GRAPH, "nodes": {"judge": {**GRAPH["nodes"]["judge"]}}}
    graph["nodes"]["judge"]["api_key_env"] = "AWS_SECRET_ACCESS_KEY"
    graph_path, data = write_case(tmp_path, graph)
    env = {"AWS_SECRET_ACCESS_KEY": aws, "OPENAI_API_KEY": key}
    checked = command("validate", str(graph_path), env=env)
    with KeyServer(scores) as server:
        refused = command(*run_args(graph_path, data, tmp_path, server.base_url), env=env)
        assert server.headers == [] and server.requests == []
    for done in (checked, refused):
        assert done.returncode == 1, done.stdout + done.stderr
        assert "node 'judge'" in done.stderr and "field 'api_key_env'" in done.stderr
        assert "Traceback" not in done.stderr
    assert_no_leak([aws, key], tmp_path, [checked.stdout + checked.stderr, refused.stderr])


@pytest.mark.parametrize("named", ["literal", "param"])
def test_the_runs_own_server_always_gets_the_users_key(tmp_path: Path, named: str) -> None:
    """A node whose own `base_url` is the run's server (written out, or a `--param` the user
    gave) with `api_key_env` naming another secret: the run's server gets the user's key."""
    aws, key = secret("aws"), secret("user")
    with KeyServer(scores) as server:
        judge = {**GRAPH["nodes"]["judge"], "api_key_env": "AWS_SECRET_ACCESS_KEY"}
        judge["base_url"] = server.base_url if named == "literal" else "params.url"
        graph = {**GRAPH, "nodes": {"judge": judge}}
        if named == "param":
            graph["params"] = {"url": None}
        graph_path, data = write_case(tmp_path, graph)
        extra = ["--param", f"url={server.base_url}"] if named == "param" else []
        env = {"AWS_SECRET_ACCESS_KEY": aws}
        done = command(
            *run_args(graph_path, data, tmp_path, server.base_url, "--api-key", key, *extra),
            env=env,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert server.keys_seen() == {key}
    assert "api_key_env AWS_SECRET_ACCESS_KEY is not read" in done.stderr
    assert_no_leak([aws], tmp_path, [done.stdout + done.stderr])


def test_plain_401_stops_the_run_with_a_message_and_no_key(tmp_path: Path) -> None:
    key = secret("refused")
    graph, data = write_case(tmp_path)
    with KeyServer(scores, refuse_models="plain") as server:
        done = command(*run_args(graph, data, tmp_path, server.base_url, "--api-key", key))
        assert server.keys_seen("/models") == {key}
        assert [b for b in server.requests if not is_canary(b)] == []
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert "HTTP 401" in done.stderr and "cannot list models" in done.stderr
    assert_no_leak([key], tmp_path, [done.stdout + done.stderr])


def test_server_echoing_the_key_in_a_401_does_not_leak_it(tmp_path: Path) -> None:
    key = secret("echo401")
    graph, data = write_case(tmp_path)
    with KeyServer(scores, refuse_models="echo") as server:
        done = command(*run_args(graph, data, tmp_path, server.base_url, "--api-key", key))
    assert done.returncode == 1
    assert "HTTP 401" in done.stderr and "Traceback" not in done.stderr
    assert_no_leak([key], tmp_path, [done.stdout + done.stderr])


@pytest.mark.parametrize("status", [400, 401])
def test_server_echoing_the_key_on_each_call_does_not_leak_it(tmp_path: Path, status: int) -> None:
    key = secret(f"echo{status}")
    graph, data = write_case(tmp_path)
    with KeyServer(echo_on_chat(status)) as server:
        done = command(
            *run_args(graph, data, tmp_path, server.base_url), env={"OPENAI_API_KEY": key}
        )
    assert done.returncode == 2  # every example failed, each with its reason
    got = read_results(tmp_path / "run")
    assert len(got) == ROWS and all(f"HTTP {status}" in r["error"] for r in got)
    outputs = [done.stdout + done.stderr, *audit(tmp_path)]
    assert_no_leak([key], tmp_path, outputs)


def test_an_unexpected_crash_prints_no_key(tmp_path: Path) -> None:
    """A traceback is the last place a key could hide (a frame's locals, which Typer can
    print): --out naming a file makes the run fail in a way nothing catches."""
    key = secret("crash")
    graph, data = write_case(tmp_path)
    (tmp_path / "run").write_text("not a folder", encoding="utf-8")
    with KeyServer(scores) as server:
        done = command(*run_args(graph, data, tmp_path, server.base_url, "--api-key", key))
    assert done.returncode != 0
    assert_no_leak([key], tmp_path, [done.stdout + done.stderr])
