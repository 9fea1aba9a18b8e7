"""The tool execution layer under injected faults: 10,000 search calls against the
local provider imitation (in its own process), 10% of requests faulted (429 with Retry-After,
500, hang, slow drip, truncated body, invalid JSON, 50 MB body, non-UTF-8 bytes, redirect
loop), with Serper as the primary provider and SearXNG as the backup.

``--clients`` threads call the executor at once, as rollout workers do. Checks that no call is
lost or duplicated: every call returns exactly one outcome, and every successful outcome holds
the results of its own query (the imitation echoes the query). The same calls without faults
run first, in the same process, as the baseline.

    python benchmarks/web_faults.py [--calls 10000] [--rate 0.1] [--clients 64]

Prints JSON: per run, calls, calls per second, p50 and p99 latency of a call (ms), retries,
failovers, degraded calls, errors by kind, lost / duplicated / mismatched counts and the
requests the imitation served by route and fault; and the faulted run's throughput against
the baseline's; writes the same JSON to benchmarks/results/web_faults.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
from _common import write_results

from websailor.tools.web.cache import ResultCache
from websailor.tools.web.executor import ToolExecutor, ToolPolicy
from websailor.tools.web.providers import SearxngSearch, SerperSearch


def start_imitation(rate: float, seed: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "websailor.tools.web.fault_server",
            "--rate",
            str(rate),
            "--seed",
            str(seed),
            "--retry-after",
            "0.2",
            "--drip-interval",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


def run(calls: int, rate: float, clients: int, seed: int, tag: str, cache_dir: Path) -> dict:
    policy = ToolPolicy(
        concurrency=clients,
        qps=0,
        timeout_s=2.0,
        retries=3,
        backoff_s=0.05,
        backoff_max_s=0.5,
        retry_after_max_s=1.0,
        breaker_failures=50,
        breaker_reset_s=1.0,
        max_bytes=1_000_000,
    )
    proc, url = start_imitation(rate, seed)
    try:
        providers = [SerperSearch("test-key", url), SearxngSearch(f"{url}/searxng")]
        queries = [f"{tag} query {i}" for i in range(calls)]
        latencies = np.zeros(calls)
        with ToolExecutor({"search": policy}, cache=ResultCache(cache_dir / f"{tag}.sqlite")) as executor:

            def one(i: int):
                t = time.perf_counter()
                out = executor.call("search", {"q": queries[i]}, providers)
                latencies[i] = time.perf_counter() - t
                return out

            t0 = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                outcomes = list(pool.map(one, range(calls)))
            seconds = time.perf_counter() - t0
            stats = executor.metrics.summary()["search"]
        served = httpx.get(f"{url}/_served").json()
    finally:
        proc.terminate()
        proc.wait()
    mismatched = sum(
        o.ok and not all(h["title"].endswith(f"for {q}") for h in o.value) for q, o in zip(queries, outcomes)
    )
    answered = [q for q, o in zip(queries, outcomes) if o.ok]
    return {
        "calls": calls,
        "fault_rate": rate,
        "clients": clients,
        "seconds": round(seconds, 2),
        "calls_per_s": round(calls / seconds, 1),
        "p50_ms": round(float(np.percentile(latencies, 50)) * 1000, 1),
        "p99_ms": round(float(np.percentile(latencies, 99)) * 1000, 1),
        "succeeded": len(answered),
        "degraded": stats["degraded"],
        "retries": stats["retries"],
        "failovers": stats["failovers"],
        "errors_by_kind": stats["request_errors"],
        "lost": calls - len(outcomes),
        "duplicated": len(answered) - len(set(answered)),
        "mismatched": mismatched,
        "faults_served": {k: v for k, v in served.items() if not k.endswith("/ok")},
        "requests_served": sum(served.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=0.1, help="share of provider requests faulted")
    ap.add_argument("--clients", type=int, default=64, help="threads calling the executor at once")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = run(args.calls, 0.0, args.clients, args.seed, "baseline", Path(tmp))
        faulted = run(args.calls, args.rate, args.clients, args.seed, "faulted", Path(tmp))
    result = {
        "baseline": base,
        "faulted": faulted,
        "throughput_ratio_faulted_vs_baseline": round(faulted["calls_per_s"] / base["calls_per_s"], 3),
    }
    print(json.dumps(result, indent=2))
    write_results("web_faults", result, args)
    ok = all(r["lost"] == 0 and r["duplicated"] == 0 and r["mismatched"] == 0 for r in (base, faulted))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
