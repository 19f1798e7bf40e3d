"""What Ray costs: the same rows via `executor="ray"` (a local Ray with 2 CPUs, two actors)
vs `--workers 2` (two spawned processes), against the instant loopback server.

Both run the same worker code on the same cores at the same total `--concurrency`; what
differs is how rows and reports travel (Ray's object store and actor calls vs a pipe) and
what starts per run (actors vs processes). `ray.init` is paid once per Python process and
printed apart. Runs alternate, `--repeat` rounds; the ratio is taken within each round.

    python bench/ray_scale.py --rows 20000 --concurrency 64 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopback import Loopback
from workers import Measured, line, measure
from workload import write_judge_graph, write_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import ray

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    init_seconds = time.perf_counter() - started
    runs: dict[str, list[Measured]] = {"processes": [], "ray": []}
    try:
        with tempfile.TemporaryDirectory() as tmp, Loopback(latency=0.0) as server:
            folder = Path(tmp)
            data = write_rows(folder / "rows.jsonl", args.rows)
            graph = write_judge_graph(folder)
            for i in range(args.repeat):
                runs["processes"].append(
                    measure(graph, data, folder / f"p{i}", server, args.concurrency, workers=2)
                )
                runs["ray"].append(
                    measure(
                        graph,
                        data,
                        folder / f"r{i}",
                        server,
                        args.concurrency,
                        executor="ray",
                        workers=2,
                    )
                )
                local, on_ray = runs["processes"][-1], runs["ray"][-1]
                print(f"round {i + 1}: {line('processes', local)}")
                print(f"         {line('ray', on_ray)}")
                span = on_ray.span_rate / local.span_rate
                print(f"         ray / processes {on_ray.rate / local.rate:.2f} (span {span:.2f})")
    finally:
        ray.shutdown()
    pairs = list(zip(runs["processes"], runs["ray"], strict=True))
    wall = statistics.median(r.rate / p.rate for p, r in pairs)
    span = statistics.median(r.span_rate / p.span_rate for p, r in pairs)
    fixed = statistics.median((r.seconds - r.span) - (p.seconds - p.span) for p, r in pairs)
    print(f"{args.rows} rows, concurrency {args.concurrency} in total, 2 workers each way")
    print(
        f"ray / --workers 2: {wall:.2f} wall, {span:.2f} span (medians of per-round ratios); "
        f"Ray's extra fixed cost per run {fixed:+.1f} s; ray.init once: {init_seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
