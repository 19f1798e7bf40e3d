"""Inspect AI vs `orchestrator run`: the same pointwise judge over the same rows, timed.

Both tools send the same N pointwise-judge requests (default 1,000) at the same concurrency
to one `bench/loopback.py` server that answers each after a fixed latency (default 50 ms).
Inspect runs in its own venv (`--setup` makes it) through its OpenAI-compatible provider,
`openai-api/loopback/loopback`, which reads LOOPBACK_BASE_URL and LOOPBACK_API_KEY. Its
samples carry exactly the system and user messages our graph renders (rendered here, once,
with `workload.rendered_requests`), with our sampling (temperature, max_tokens, n) and our
JSON schema as its `response_schema` (strict); solver `generate()`, and a scorer that parses
each reply as JSON and checks the schema's required keys, since our run validates every
reply too. Inspect's openai-api provider leaves keywords such as minimum/maximum (and the
titles) out of the schema it renders from `response_schema`, so by default the driver also
puts our exact `response_format` in `extra_body`, which the OpenAI SDK merges over the body:
the server then gets our schema byte for byte (`--inspect-schema`: only Inspect's rendering).
Everything else is Inspect's default, log file included; no retries or timeouts are changed
on either side. Both sides get the same concurrency: Inspect's max_connections
and max_samples (the latter already defaults to max_connections; set so nothing caps it
lower), our `--concurrency`.

Before timing, a check run sends a few hundred rows from each tool to a capturing server in
this process and prints how Inspect's first request body differs from ours for the same row,
and the peak number of requests each tool had in flight (`--no-check` skips it).

Timed, per round (`--repeat`, order alternating): Inspect as a subprocess (its wall time,
the time of its `eval()` call inside the driver, and the duration in its own log);
`python -m orchestrator run` as a subprocess with its defaults (so it sends one structured-
output canary request first: N + 1 requests); and `orchestrator run` in this process
(`workload.run_ours`, `--structured server`, no canary: N requests). The server's request
count is checked after every run. Medians are compared; the last line is the ratio of the
subprocess wall times, where both pay interpreter start-up. Goal: > 1 (ours faster).

    python bench/inspect_vs_ours.py --setup                 # once: build the Inspect venv
    python bench/inspect_vs_ours.py --rows 1000 --concurrency 64 --latency 0.05 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from loopback import MODEL, Loopback  # noqa: E402
from workload import (  # noqa: E402
    rendered_requests,
    run_command,
    run_ours,
    write_judge_graph,
    write_rows,
)

DEFAULT_VENV = Path(tempfile.gettempdir()) / "inspect-venv"
INSPECT_PACKAGES = ["inspect-ai", "openai"]
SERVICE = "loopback"  # openai-api/<service>/<model> reads <SERVICE>_BASE_URL, <SERVICE>_API_KEY

# Runs with the Inspect venv's python: one eval over the pre-rendered requests, then a JSON
# file with what it measured. argv: requests.json, concurrency, log dir, model, result file.
DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from datetime import datetime

    from inspect_ai import Task, eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import (
        ChatMessageSystem, ChatMessageUser, GenerateConfig, ResponseSchema,
    )
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, accuracy, scorer
    from inspect_ai.solver import generate
    from inspect_ai.util import JSONSchema

    requests_path, concurrency, log_dir, model, result_path, exact = sys.argv[1:7]
    bodies = json.load(open(requests_path))
    first = bodies[0]
    fmt = first["response_format"]["json_schema"]
    for body in bodies:  # one config for all samples: every row must share it
        assert {k: v for k, v in body.items() if k != "messages"} == {
            k: v for k, v in first.items() if k != "messages"
        }
    required = fmt["schema"]["required"]


    @scorer(metrics=[accuracy()])
    def reply_has_required_keys():
        async def score(state, target):
            try:
                reply = json.loads(state.output.completion)
            except ValueError:
                return Score(value=INCORRECT, explanation="reply is not JSON")
            ok = isinstance(reply, dict) and all(key in reply for key in required)
            return Score(value=CORRECT if ok else INCORRECT)

        return score


    samples = [
        Sample(
            id=i,
            input=[
                ChatMessageSystem(content=body["messages"][0]["content"]),
                ChatMessageUser(content=body["messages"][1]["content"]),
            ],
        )
        for i, body in enumerate(bodies)
    ]
    config = GenerateConfig(
        temperature=first["temperature"],
        max_tokens=first["max_tokens"],
        num_choices=first["n"],
        response_schema=ResponseSchema(
            name=fmt["name"],
            json_schema=JSONSchema.model_validate(fmt["schema"]),
            strict=fmt["strict"],
        ),
        # Inspect's openai-api provider drops keywords such as minimum/maximum when it
        # renders response_schema; with "exact", our response_format goes on the wire as is
        # (the SDK merges extra_body over the request body).
        extra_body={"response_format": first["response_format"]} if exact == "exact" else None,
    )
    task = Task(
        dataset=MemoryDataset(samples),
        solver=generate(),
        scorer=reply_has_required_keys(),
        config=config,
    )
    started = time.perf_counter()
    log = inspect_eval(
        task,
        model=model,
        max_connections=int(concurrency),
        max_samples=int(concurrency),
        log_dir=log_dir,
    )[0]
    seconds = time.perf_counter() - started
    stats = log.stats
    reported = None
    if stats.started_at and stats.completed_at:
        reported = (
            datetime.fromisoformat(stats.completed_at)
            - datetime.fromisoformat(stats.started_at)
        ).total_seconds()
    metrics = log.results.scores[0].metrics if log.results else {}
    with open(result_path, "w") as handle:
        json.dump({
            "status": log.status,
            "eval_seconds": seconds,
            "reported_seconds": reported,
            "samples": log.results.completed_samples if log.results else 0,
            "accuracy": metrics["accuracy"].value if "accuracy" in metrics else None,
            "log": log.location,
        }, handle)
    """
)


def setup(venv: Path) -> None:
    """Make the Inspect venv (never the project's .venv) and refuse a torch/CUDA pull."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", *INSPECT_PACKAGES], check=True)
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], check=True, capture_output=True, text=True
    )
    names = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed.stdout)}
    heavy = sorted(n for n in names if n == "torch" or n.startswith("nvidia"))
    if heavy:
        raise SystemExit(f"the Inspect venv pulled in {heavy}: not wanted here")
    print(f"Inspect venv ready: {venv} (inspect-ai {names.get('inspect-ai', '?')})")


def inspect_version(venv: Path) -> str:
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no Inspect venv at {venv}: run with --setup first")
    done = subprocess.run(
        [str(python), "-c", "import inspect_ai; print(inspect_ai.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@dataclass
class InspectRun:
    wall: float  # the whole subprocess: interpreter, imports, eval, log
    eval_seconds: float  # the eval() call inside the driver
    reported: float | None  # completed_at - started_at in Inspect's log (whole seconds)
    samples: int
    accuracy: float | None
    log: str


def run_inspect(
    venv: Path,
    requests_path: Path,
    base_url: str,
    concurrency: int,
    log_dir: Path,
    exact_schema: bool,
) -> InspectRun:
    """One Inspect eval in its venv against `base_url`; fails loudly on any error."""
    result_path = log_dir / "driver-result.json"
    env = {
        **os.environ,
        f"{SERVICE.upper()}_BASE_URL": base_url,
        f"{SERVICE.upper()}_API_KEY": "EMPTY",
    }
    command = [
        str(venv / "bin" / "python"),
        "-c",
        DRIVER,
        str(requests_path),
        str(concurrency),
        str(log_dir),
        f"openai-api/{SERVICE}/{MODEL}",
        str(result_path),
        "exact" if exact_schema else "inspect",
    ]
    started = time.perf_counter()
    done = subprocess.run(
        command, env=env, cwd=log_dir.parent, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0 or not result_path.exists():
        raise SystemExit(
            f"Inspect failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
            f"{done.stderr[-3000:]}"
        )
    out = json.loads(result_path.read_text())
    if out["status"] != "success":
        raise SystemExit(f"Inspect eval ended with status {out['status']}: {out['log']}")
    return InspectRun(
        wall=wall,
        eval_seconds=out["eval_seconds"],
        reported=out["reported_seconds"],
        samples=out["samples"],
        accuracy=out["accuracy"],
        log=out["log"],
    )


def run_ours_cli(
    graph: Path, data: Path, out: Path, base_url: str, concurrency: int
) -> tuple[float, dict[str, Any]]:
    """`python -m orchestrator run` with its defaults (a fresh cache file so nothing hits)."""
    cache = out.parent / f"{out.name}-cache.sqlite"
    command = run_command(graph, data, out, base_url, concurrency, cache)
    env = {**os.environ, "OPENAI_API_KEY": "EMPTY"}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"orchestrator run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
            f"{done.stderr[-3000:]}"
        )
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    if counts["examples_failed"]:
        raise SystemExit(f"orchestrator run had {counts['examples_failed']} failed examples")
    return wall, counts


# --------------------------------------------------------------------------------------------
# The check: what each tool actually sends, and how many requests it keeps in flight
# --------------------------------------------------------------------------------------------


_ABSENT = "<absent>"


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, one line per leaf (`path: a-value | b-value`)."""
    if isinstance(a, dict) and isinstance(b, dict):
        lines: list[str] = []
        for key in [*a, *(k for k in b if k not in a)]:
            lines += differences(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{path}.{key}")
        return lines
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            line
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for line in differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path.lstrip('.')}: {a!r} | {b!r}"]


def check(
    venv: Path,
    folder: Path,
    rows: int,
    concurrency: int,
    latency: float,
    graph: Path,
    exact_schema: bool,
) -> None:
    """Print how Inspect's request differs from ours for one row, and each side's peak."""
    data = write_rows(folder / "check-rows.jsonl", rows)
    requests = rendered_requests(graph, data)
    requests_path = folder / "check-requests.json"
    requests_path.write_bytes(orjson.dumps(requests))
    log_dir = folder / "check-inspect-logs"
    log_dir.mkdir()
    with Loopback(latency, capture=True) as server:
        run_inspect(venv, requests_path, server.base_url, concurrency, log_dir, exact_schema)
        theirs, their_peak = server.take()
        run_ours(graph, data, folder / "check-ours", server.base_url, concurrency)
        ours, our_peak = server.take()
    by_messages = {orjson.dumps(body["messages"]): body for body in ours}
    first = theirs[0]
    mine = by_messages.get(orjson.dumps(first["messages"]))
    print(f"check ({rows} rows, {latency * 1000:.0f} ms server):")
    print(f"  chat requests seen: Inspect {len(theirs)}, ours {len(ours)}")
    print(f"  peak requests in flight: Inspect {their_peak}, ours {our_peak}")
    if mine is None:
        print("  Inspect's first request has messages that none of ours has")
        return
    same = "identical" if first["messages"] == mine["messages"] else "DIFFERENT"
    print(f"  messages (system + user) of the same row: {same}")
    diff = differences(first, mine)
    print(
        "  other request fields that differ (Inspect | ours):"
        if diff
        else "  no other fields differ"
    )
    for line in diff:
        print(f"    {line}")


# --------------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------------

LABELS = {
    "inspect_wall": "Inspect eval, subprocess wall (start-up + eval + log)",
    "inspect_eval": "Inspect eval() call inside the driver",
    "inspect_reported": "Inspect's own duration (log stats, 1 s resolution)",
    "ours_cli": "orchestrator run, subprocess wall (python -m orchestrator)",
    "ours": "orchestrator run, in-process (workload.run_ours)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05, help="server seconds per reply")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--setup", action="store_true", help="build the Inspect venv and exit")
    parser.add_argument("--no-check", action="store_true", help="skip the request/peak check")
    parser.add_argument("--check-rows", type=int, default=256)
    parser.add_argument(
        "--inspect-schema",
        action="store_true",
        help="send only what Inspect renders from response_schema (it drops minimum/maximum "
        "and titles) instead of our exact response_format via extra_body",
    )
    args = parser.parse_args()

    if args.setup:
        setup(args.venv)
        return
    version = inspect_version(args.venv)
    print(
        f"inspect-ai {version} vs orchestrator: {args.rows} rows, concurrency "
        f"{args.concurrency}, {args.latency * 1000:.0f} ms loopback server, {args.repeat} rounds"
    )

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        graph = write_judge_graph(folder)
        if not args.no_check:
            check(
                args.venv,
                folder,
                args.check_rows,
                args.concurrency,
                args.latency,
                graph,
                not args.inspect_schema,
            )
        data = write_rows(folder / "rows.jsonl", args.rows)
        requests_path = folder / "requests.json"
        requests_path.write_bytes(orjson.dumps(rendered_requests(graph, data)))
        runs: dict[str, list[float]] = {name: [] for name in LABELS}
        with Loopback(latency=args.latency) as server:
            for i in range(args.repeat):
                order = ["inspect", "ours_cli", "ours"]
                for side in order if i % 2 == 0 else order[::-1]:
                    before = server.requests()
                    if side == "inspect":
                        log_dir = folder / f"inspect-logs{i}"
                        log_dir.mkdir()
                        got = run_inspect(
                            args.venv,
                            requests_path,
                            server.base_url,
                            args.concurrency,
                            log_dir,
                            not args.inspect_schema,
                        )
                        expected, detail = (
                            args.rows,
                            (
                                f"Inspect {got.wall:.2f} s wall, eval() {got.eval_seconds:.2f} s, "
                                f"log {got.reported} s, {got.samples} samples, "
                                f"accuracy {got.accuracy}, log {Path(got.log).name} "
                                f"({Path(got.log).stat().st_size / 1e6:.1f} MB)"
                            ),
                        )
                        if got.samples != args.rows or got.accuracy != 1.0:
                            raise SystemExit(f"Inspect scored {got.samples} samples: {detail}")
                        runs["inspect_wall"].append(got.wall)
                        runs["inspect_eval"].append(got.eval_seconds)
                        if got.reported is not None:
                            runs["inspect_reported"].append(got.reported)
                    elif side == "ours_cli":
                        wall, counts = run_ours_cli(
                            graph, data, folder / f"cli{i}", server.base_url, args.concurrency
                        )
                        expected = args.rows + 1  # default --structured auto: one canary first
                        detail = (
                            f"orchestrator CLI {wall:.2f} s wall, {counts['requests']} requests, "
                            f"{counts['cache_hits']} cache hits (+1 canary)"
                        )
                        runs["ours_cli"].append(wall)
                    else:
                        timing = run_ours(
                            graph, data, folder / f"run{i}", server.base_url, args.concurrency
                        )
                        expected = args.rows  # --structured server: no canary
                        detail = f"orchestrator in-process {timing.seconds:.2f} s"
                        runs["ours"].append(timing.seconds)
                    sent = server.requests() - before
                    if sent != expected:
                        raise SystemExit(f"{side}: expected {expected} requests, server saw {sent}")
                    print(f"round {i + 1}: {detail}; server saw {sent} chat requests")

    medians = {name: statistics.median(v) for name, v in runs.items() if v}
    floor = math.ceil(args.rows / args.concurrency) * args.latency
    print(
        f"{args.rows} rows, concurrency {args.concurrency}, {args.latency * 1000:.0f} ms per "
        f"reply (floor {floor:.2f} s); medians of {args.repeat}"
    )
    schema = (
        "as Inspect renders response_schema"
        if args.inspect_schema
        else "ours exactly, via extra_body (response_schema also set)"
    )
    print(
        f"Inspect: JSON schema {schema}; max_connections = max_samples = {args.concurrency}; "
        "all else default (its display, .eval log, retries, timeouts; nothing turned off)"
    )
    for name, label in LABELS.items():
        if name in medians:
            print(f"{label:<62}{medians[name]:8.2f} s")
    print(
        "ratio Inspect eval() / orchestrator in-process: "
        f"{medians['inspect_eval'] / medians['ours']:.2f}"
    )
    print(
        "ratio Inspect/orchestrator wall time (both subprocesses): "
        f"{medians['inspect_wall'] / medians['ours_cli']:.2f} (goal > 1)"
    )


if __name__ == "__main__":
    main()
