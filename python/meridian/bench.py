"""``meridian bench py-tasks``'s Python side: N no-op functions through
``client.map`` on a Meridian cluster, then through Dask's ``client.map`` on a Dask
LocalCluster of the same cores, in one run. Prints one JSON object.

    python3 -m meridian.bench --dir CLUSTER_DIR --tasks 20000 --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import meridian


def noop(x):
    return x


def time_map(map_fn, gather_fn, n: int) -> tuple[float, list]:
    """Seconds to map and gather n no-op calls, and the futures."""
    start = time.perf_counter()
    futures = map_fn(noop, range(n))
    results = gather_fn(futures)
    seconds = time.perf_counter() - start
    if results != list(range(n)):
        raise SystemExit(f"bench: wrong results from {map_fn}")
    return seconds, futures


def call_milliseconds(client: meridian.Client, calls: int, warm: bool) -> list[float]:
    """Milliseconds from f.remote(x) to its result, one call at a time (a task each)."""
    f = meridian.remote(noop, warm=warm)
    client.submit(f, -1).result()  # warm-up: the agent's interpreter starts
    ms = []
    for i in range(calls):
        start = time.perf_counter()
        if client.submit(f, i).result() != i:
            raise SystemExit("bench: a wrong result from one call")
        ms.append((time.perf_counter() - start) * 1000)
    return ms


def percentiles(ms: list[float]) -> dict:
    s = sorted(ms)
    return {"calls": len(s), "p50_ms": s[len(s) // 2], "p99_ms": s[min(len(s) - 1, len(s) * 99 // 100)],
            "min_ms": s[0], "max_ms": s[-1]}


def bench_meridian(cluster_dir: str, n: int, repeat: int, ungrouped: int, single: int) -> dict:
    client = meridian.connect(dir=cluster_dir)
    time_map(client.map, client.gather, 10)  # warm-up: the first interpreter start
    timed = [time_map(client.map, client.gather, n) for _ in range(repeat)]
    runs = [seconds for seconds, _ in timed]
    tasks = len(client.job(timed[-1][1][0].job_id).tasks())
    # One call a task (no grouping): each task starts an interpreter of its own.
    one, _ = time_map(lambda f, it: client.map(f, it, chunk_size=1), client.gather, ungrouped)
    # One call at a time, forked from the agent's warm interpreter and, the baseline,
    # each in an interpreter of its own.
    warm = percentiles(call_milliseconds(client, single, True))
    cold = percentiles(call_milliseconds(client, single, False))
    return {"seconds": runs, "best_seconds": min(runs), "tasks_per_second": n / min(runs), "job_tasks": tasks,
            "one_call_per_task": {"calls": ungrouped, "seconds": one, "tasks_per_second": ungrouped / one},
            "single_call_warm": warm, "single_call_cold": cold}


def bench_dask(workers: int, n: int, repeat: int) -> dict:
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        time_map(lambda f, it: client.map(f, it, pure=False), client.gather, 10)
        runs = [time_map(lambda f, it: client.map(f, it, pure=False), client.gather, n)[0] for _ in range(repeat)]
    return {"seconds": runs, "best_seconds": min(runs), "tasks_per_second": n / min(runs), "job_tasks": n}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True, help="the Meridian cluster's directory")
    p.add_argument("--tasks", type=int, default=20_000)
    p.add_argument("--workers", type=int, default=2, help="Dask worker processes (one thread each)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--ungrouped", type=int, default=200, help="calls timed with one call a task")
    p.add_argument("--single", type=int, default=50, help="calls timed one at a time, warm and cold")
    a = p.parse_args()
    if min(a.tasks, a.repeat, a.workers, a.ungrouped, a.single) < 1:
        raise SystemExit("bench: --tasks, --repeat, --workers, --ungrouped and --single must be at least 1")
    m = bench_meridian(a.dir, a.tasks, a.repeat, a.ungrouped, a.single)
    d = bench_dask(a.workers, a.tasks, a.repeat)
    json.dump({"tasks": a.tasks, "meridian": m, "dask": d, "ratio": m["tasks_per_second"] / d["tasks_per_second"],
               "single_call_p50_ms": m["single_call_warm"]["p50_ms"],
               "single_call_cold_p50_ms": m["single_call_cold"]["p50_ms"],
               "warm_ratio": m["single_call_cold"]["p50_ms"] / m["single_call_warm"]["p50_ms"]},
              sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
