"""The viewer on large eval runs: first-page time and server memory for 1,000 and 100,000
trajectories.

For each size, writes an eval folder into a temporary directory (``trajectories.jsonl`` of
realistic records: a system prompt, the question, four assistant turns with thoughts and tool
calls, three observations of about 1 KB, a few KB a record; k = 4 rollouts per question; and
the ``scores.jsonl`` of an exact-match grading), starts ``websailor view``'s app with uvicorn in
a child process, and requests over HTTP:

* the first page of ``/eval/run`` cold (the index is being built: the page shows the part read
  so far and says so), the time until the whole file is read, then the first page warm;
* a text search over every question (``?q=...``), a late page, and one question's view;

and reports each time and the server's resident memory (RSS, and its peak ``VmHWM``).

    python benchmarks/view_scale.py [--sizes 1000 100000]

Prints JSON and writes it to benchmarks/results/view_scale.json.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_results  # noqa: E402

WORDS = (
    "river city capital founded century museum population north south river bank bridge empire "
    "dynasty treaty election painter novel physicist discovered element mountain island harbour "
    "railway festival cathedral university library archive census province border delta"
).split()

_SERVER = """
import sys, uvicorn
from websailor.server.app import bind_socket
from websailor.view import create_view_app
sock = bind_socket("127.0.0.1", 0)
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(create_view_app(sys.argv[1]), log_level="warning")).run(sockets=[sock])
"""


def _text(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def _record(rng: random.Random, qid: int, rollout: int, system: str) -> dict:
    from websailor.agent.trajectory import ToolCallRecord, Trajectory

    question = f"Question {qid}: which {_text(rng, 80)}?"
    gold = rng.choice(WORDS).title()
    correct = rng.random() < 0.4
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    calls = []
    for _ in range(3):
        query = _text(rng, 30)
        messages.append(
            {
                "role": "assistant",
                "content": f"<think>{_text(rng, 300)}</think>\n<tool_call>\n"
                + json.dumps({"name": "search", "arguments": {"query": [query]}})
                + "\n</tool_call>",
                "finish_reason": "stop",
            }
        )
        messages.append({"role": "user", "content": f"<tool_response>\n{_text(rng, 1000)}\n</tool_response>"})
        calls.append(ToolCallRecord("search", {"query": [query]}, round(rng.random(), 3)))
    prediction = gold if correct else rng.choice(WORDS).title()
    messages.append({"role": "assistant", "content": f"<think>{_text(rng, 120)}</think><answer>{prediction}</answer>"})
    traj = Trajectory(
        id=f"q{qid}",
        rollout=rollout,
        question=question,
        answer={"answer": gold, "aliases": [], "parts": None},
        prediction=prediction,
        termination="answer",
        messages=messages,
        num_model_calls=4,
        num_tool_calls=3,
        tool_calls=calls,
        tokens={"prompt": 4000, "completion": 400},
        timings={"total_s": 10.0, "model_s": 8.0, "tools_s": 2.0},
        model="bench",
        env="local",
    )
    return traj.to_dict()


def write_run(out: Path, n: int, k: int = 4, seed: int = 0) -> int:
    """An eval folder of ``n`` trajectories (``n / k`` questions) with their scores; returns
    the trajectory file's size in bytes."""
    from websailor.eval.scoring import Score, case_key

    rng = random.Random(seed)
    system = _text(rng, 1500)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "trajectories.jsonl").open("w") as ft, (out / "scores.jsonl").open("w") as fs:
        for i in range(n):
            rec = _record(rng, i // k, i % k, system)
            ft.write(json.dumps(rec, ensure_ascii=True) + "\n")
            correct = rec["prediction"] == rec["answer"]["answer"]
            s = Score(
                rec["id"], rec["rollout"], "em", correct, float(correct), rec["prediction"], None, None, None,
                "answer", 3, 4, 4000, 400, 10.0, "bench", "local", case_key(rec), 4, 4,
            )  # fmt: skip
            fs.write(json.dumps(asdict(s)) + "\n")
    return (out / "trajectories.jsonl").stat().st_size


def _memory(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    get = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines() if line.startswith("Vm")}
    return {"rss_mb": round(get["VmRSS"] / 1024, 1), "peak_rss_mb": round(get["VmHWM"] / 1024, 1)}


def measure(root: Path) -> dict:
    """Start the viewer over ``root`` in a child process and time its pages."""
    import httpx

    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(root)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        port = int(proc.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=120) as c:
            deadline = time.monotonic() + 30
            while True:
                try:
                    c.get("/static/view.css")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the viewer did not start"
                    time.sleep(0.05)
            idle = _memory(proc.pid)
            figures: dict = {"idle_rss_mb": idle["rss_mb"]}
            t0 = time.perf_counter()
            r = c.get("/eval/run")
            figures["first_page_cold_s"] = round(time.perf_counter() - t0, 3)
            figures["first_page_partial"] = 'id="reading"' in r.text
            while 'id="reading"' in r.text:  # the page reloads itself until the file is read
                time.sleep(0.5)
                r = c.get("/eval/run")
            figures["whole_file_read_s"] = round(time.perf_counter() - t0, 3)
            for name, path in (
                ("first_page_warm_s", "/eval/run"),
                ("search_s", "/eval/run?q=harbour+railway"),
                ("late_page_s", "/eval/run?page=400"),
                ("question_s", "/eval/run?question=q7"),
                ("trajectories_page_s", "/trajectories/run/trajectories.jsonl"),
            ):
                t0 = time.perf_counter()
                r = c.get(path)
                figures[name] = round(time.perf_counter() - t0, 3)
                assert r.status_code == 200, (path, r.status_code, r.text[:500])
            figures.update(_memory(proc.pid))
            return figures
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 100000])
    args = ap.parse_args()
    out = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="view-scale-") as tmp:
            t0 = time.perf_counter()
            size = write_run(Path(tmp) / "run", n)
            written = time.perf_counter() - t0
            figures = {"trajectories": n, "file_mb": round(size / 2**20, 1), "write_s": round(written, 1)}
            figures.update(measure(Path(tmp)))
            out[str(n)] = figures
            print(json.dumps({n: figures}), flush=True)
    write_results("view_scale", out, args)


if __name__ == "__main__":
    main()
