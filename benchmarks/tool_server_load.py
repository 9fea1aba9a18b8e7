"""Tool server under load: many concurrent rollout workers against one ``websailor`` tool server.

Starts the server (``websailor.server.app.serve_tools`` over the local tools) in a child
process, waits for ``/health``, then runs ``--clients`` concurrent asyncio httpx clients, each
looping for ``--seconds`` over a realistic call mix drawn from the corpus itself:

* 70% ``search`` with 1-3 queries (a page title, a page's short description, or a title plus a
  word of another title),
* 30% ``visit`` of a real page URL with a goal.

Prints JSON: calls, calls per second, HTTP errors (transport failures and non-200 replies),
error observations, p50/p95/p99 latency (ms, client side, queueing included) and the CPU
seconds used by the server and by the clients (they share the machine's cores); writes the
same JSON to benchmarks/results/tool_server_load.json (and to ``--out`` when given).

Each client has its own ``httpx.AsyncClient``: one ``AsyncClient`` pooling 200 connections
spent about 12 ms of CPU per request (the load generator, not the server, was the bottleneck).

    python benchmarks/tool_server_load.py --clients 200 --seconds 60
    python benchmarks/tool_server_load.py --clients 1 --seconds 10      # single-client baseline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from _common import wait_for_health, write_results

from websailor.corpus import Corpus
from websailor.corpus.store import Document
from websailor.server.app import bind_socket

_SERVER = """
import sys
from websailor.corpus import Corpus
from websailor.server.app import serve_tools
from websailor.tools.local import build_local_tools
corpus = None if sys.argv[1] == "-" else sys.argv[1]
serve_tools(build_local_tools(Corpus.open(corpus)), "local", port=int(sys.argv[2]), max_workers=int(sys.argv[3]))
"""

GOALS = [
    "When was {t} founded, born or first described?",
    "What is {t} best known for?",
    "Where is {t} located or where did it take place?",
    "Who was involved with {t}?",
    "Give the key dates and numbers about {t}.",
]


@dataclass
class Tally:
    """What the clients saw."""

    latencies_s: list[float] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=lambda: {"search": 0, "visit": 0})
    http_errors: int = 0
    error_observations: int = 0
    error_samples: list[str] = field(default_factory=list)


class Workload:
    """Random tool calls over real pages of the corpus (seeded per client)."""

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs
        self.words = sorted({w for d in docs for w in d.title.split() if len(w) > 3 and w.isalpha()})

    def query(self, rng: random.Random) -> str:
        doc = rng.choice(self.docs)
        kind = rng.random()
        if kind < 0.4 or not doc.description:
            return doc.title
        if kind < 0.7:
            return doc.description
        return f"{doc.title} {rng.choice(self.words)}"

    def call(self, rng: random.Random) -> tuple[str, dict]:
        """One ``(tool, arguments)``."""
        if rng.random() < 0.7:
            return "search", {"query": [self.query(rng) for _ in range(rng.randint(1, 3))]}
        doc = rng.choice(self.docs)
        return "visit", {"url": doc.url, "goal": rng.choice(GOALS).format(t=doc.title)}


def sample_docs(corpus_dir: str | None, n: int, seed: int) -> list[Document]:
    """``n`` random pages of the corpus."""
    docs = list(Corpus.open(corpus_dir).iter_documents())
    return random.Random(seed).sample(docs, min(n, len(docs)))


def start_server(corpus_dir: str | None, port: int, max_workers: int) -> tuple[subprocess.Popen, str]:
    """The tool server in a child process; returns it and its URL once ``/health`` answers.

    Raises:
        RuntimeError: the server exited or did not answer within 120 s.
    """
    if port == 0:
        sock = bind_socket("127.0.0.1", 0)
        port = sock.getsockname()[1]
        sock.close()
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty server must never block on it
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, corpus_dir or "-", str(port), str(max_workers)], stderr=log, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, proc)
    except RuntimeError:
        log.seek(0)
        raise RuntimeError(f"the tool server at {url} did not start: {log.read()[-2000:]}") from None
    return proc, url


async def client(http: httpx.AsyncClient, work: Workload, seed: int, deadline: float, tally: Tally) -> None:
    """One worker: call, wait for the answer, call again, until ``deadline``."""
    rng = random.Random(seed)
    while time.perf_counter() < deadline:
        name, arguments = work.call(rng)
        t = time.perf_counter()
        try:
            r = await http.post(f"/tools/{name}", json={"arguments": arguments})
        except httpx.HTTPError as e:
            tally.http_errors += 1
            tally.error_samples.append(f"{type(e).__name__}: {e}"[:200])
            continue
        tally.latencies_s.append(time.perf_counter() - t)
        tally.calls[name] += 1
        if r.status_code != 200:
            tally.http_errors += 1
            tally.error_samples.append(f"HTTP {r.status_code}: {r.text[:200]}")
        elif r.json().get("error") is not None:
            tally.error_observations += 1
            tally.error_samples.append(r.json()["error"][:200])


async def load(url: str, work: Workload, clients: int, seconds: float, seed: int) -> tuple[Tally, float]:
    """Run the clients, each with its own ``AsyncClient`` and keep-alive connection (one
    shared pool of hundreds of connections costs httpx milliseconds of CPU per request);
    returns what they saw and the elapsed seconds."""
    tally = Tally()
    https = [httpx.AsyncClient(base_url=url, timeout=120, trust_env=False) for _ in range(clients)]
    try:
        t0 = time.perf_counter()
        deadline = t0 + seconds
        await asyncio.gather(*(client(http, work, seed * 100_003 + i, deadline, tally) for i, http in enumerate(https)))
        return tally, time.perf_counter() - t0
    finally:
        await asyncio.gather(*(http.aclose() for http in https))


def report(tally: Tally, elapsed_s: float, clients: int) -> dict:
    """The figures as a JSON-able dict."""
    ms = np.asarray(tally.latencies_s) * 1000 if tally.latencies_s else np.zeros(1)
    calls = sum(tally.calls.values())
    return {
        "clients": clients,
        "seconds": round(elapsed_s, 2),
        "calls": calls,
        "calls_by_tool": tally.calls,
        "calls_per_s": round(calls / elapsed_s, 1),
        "http_errors": tally.http_errors,
        "error_observations": tally.error_observations,
        "latency_ms": {f"p{q}": round(float(np.percentile(ms, q)), 2) for q in (50, 95, 99)}
        | {"mean": round(float(ms.mean()), 2), "max": round(float(ms.max()), 2)},
        "error_samples": sorted(set(tally.error_samples))[:5],
        "cpus": os.cpu_count(),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=200, help="concurrent clients (default 200)")
    ap.add_argument("--seconds", type=float, default=60.0, help="duration of the load (default 60)")
    ap.add_argument("--corpus", default=None, help="corpus directory (default: the embedded corpus)")
    ap.add_argument("--port", type=int, default=0, help="server port (default 0: a free one)")
    ap.add_argument("--max-workers", type=int, default=32, help="server threads running tool calls (default 32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    work = Workload(sample_docs(args.corpus, 2000, args.seed))
    proc, url = start_server(args.corpus, args.port, args.max_workers)
    try:
        server_cpu0, client_cpu0 = cpu_seconds(proc.pid), time.process_time()
        tally, elapsed = asyncio.run(load(url, work, args.clients, args.seconds, args.seed))
        cpu = {
            "server": round(cpu_seconds(proc.pid) - server_cpu0, 1),
            "clients": round(time.process_time() - client_cpu0, 1),
        }
        result = report(tally, elapsed, args.clients) | {"max_workers": args.max_workers, "cpu_s": cpu}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    write_results("tool_server_load", result, args)


if __name__ == "__main__":
    main()
