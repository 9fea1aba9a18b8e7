"""A service that dies stops an evaluation within seconds, loses nothing, grades nothing wrong,
and a rerun resumes to the undisturbed run's result (websailor.breaker).

Three scripted services run as child processes on fixed ports: the policy (an OpenAI-compatible
server: it searches the question once, then answers, right on three questions of four), the LLM
judge (an OpenAI-compatible server comparing the response with the correct answer) and a real
tool server (``websailor serve tools`` over the embedded corpus). ``websailor eval`` runs
``--questions`` items ``--k`` times against them, once undisturbed; then, for each service in
turn, a fresh evaluation during which the service is killed (SIGKILL) once ``--kill-after``
rollouts were written (the judge: verdicts given). Reported per service: the exit status and
its line, the seconds from the kill to the exit (target: under 30 s with the defaults),
rollouts kept and how many of them ended in a model error (0: a cut rollout is not kept as
done), rollouts graded otherwise than undisturbed (0), and, after the service is restarted on
its port, whether the rerun of the same command exits 0 with every rollout's grade and the
Avg@k of the undisturbed run. The baseline, in the same run: the same kills with the breaker out
of reach (``--service-failures 1000000``: each call retried to its end, as before the breaker),
whose figures say what an outage cost then (``--no-baseline`` skips it).

A fourth victim, the **hung model server**, is stopped (SIGSTOP) instead: its connections stay
open and nothing more comes, mid-reply for the rollouts under way (the scripted servers stream
their replies in six chunks). It is found by the read timeout of streamed replies
(websailor.models.streaming; ``--read-timeout`` sets ``WEBSAILOR_READ_TIMEOUT`` for the
evaluations, default 60 s): target under three read timeouts. The attempts under way each wait
one out; with ``--concurrency 4`` below the breaker's threshold of 5 failures, the row is
completed by a retry's timeout, so two read timeouts (``--concurrency 8``, more rollouts at once
than the threshold: one; ``--victims`` picks the services to stop). Without streaming it took two request timeouts (1,200 s with the defaults).
It has no baseline run (every rollout would wait out five attempts of a read timeout).

    python benchmarks/service_faults.py [--questions 20] [--k 2] [--kill-after 8] [--no-baseline]
                                        [--read-timeout S] [--concurrency 4] [--victims NAME,...]

Prints a table and writes benchmarks/results/service_faults.json; exits 1 when a run with the
breaker misses a target. About 4 minutes with the breaker (2 of them the hung server at the
default read timeout), 7 more for the baseline. The scripted
servers also run alone, to try a run against them by hand::

    python benchmarks/service_faults.py serve policy|judge PORT QUESTIONS.jsonl DELAY_S

(``QUESTIONS.jsonl``: one ``{"id", "question", "answer"}`` per line; the model name is the role).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _common import wait_for_health, write_results

from websailor.models.streaming import READ_TIMEOUT_ENV, READ_TIMEOUT_S, read_timeout

ROOT = Path(__file__).resolve().parents[1]
WS = [sys.executable, "-m", "websailor.cli"]
#: The questions the scripted policy is asked (facts only the gold answer needs: the policy is scripted).
FACTS = [
    ("Which river flows through Cairo?", "Nile"),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
    ("What is the capital of Australia?", "Canberra"),
    ("Who wrote the novel Moby-Dick?", "Herman Melville"),
    ("Which element has the chemical symbol Fe?", "Iron"),
    ("In which city is the Colosseum?", "Rome"),
    ("Who developed the theory of general relativity?", "Albert Einstein"),
    ("What is the largest planet of the Solar System?", "Jupiter"),
    ("Which ocean lies between Africa and Australia?", "Indian Ocean"),
    ("Who composed The Magic Flute?", "Wolfgang Amadeus Mozart"),
    ("What is the capital of Canada?", "Ottawa"),
    ("Which mountain is the highest above sea level?", "Mount Everest"),
    ("Who was the first person to walk on the Moon?", "Neil Armstrong"),
    ("Which language has the most native speakers?", "Mandarin Chinese"),
    ("What is the longest river of South America?", "Amazon"),
    ("Who wrote Pride and Prejudice?", "Jane Austen"),
    ("Which country has the city of Kyoto?", "Japan"),
    ("What gas do plants take in for photosynthesis?", "Carbon dioxide"),
    ("Who discovered penicillin?", "Alexander Fleming"),
    ("Which desert covers most of northern Africa?", "Sahara"),
    ("What is the capital of Kenya?", "Nairobi"),
    ("Who painted The Starry Night?", "Vincent van Gogh"),
    ("Which metal is liquid at room temperature?", "Mercury"),
    ("Who wrote One Hundred Years of Solitude?", "Gabriel Garcia Marquez"),
]
SERVICES = ("model server", "judge", "tool server")
VICTIMS = (*SERVICES, "hung model server")
#: A victim that is a service stopped (SIGSTOP) rather than killed: its connections stay open and
#: nothing more comes, as from a stuck GPU or a stopped process.
HUNG = {"hung model server": "model server"}


# -- the scripted services (this file run as `serve policy|judge PORT QUESTIONS DELAY`) -------
def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


def _policy_reply(messages: list[dict], gold: dict[str, tuple[int, str]]) -> str:
    question = next(m["content"] for m in messages if m["role"] == "user")
    index, answer = gold.get(question.strip(), (3, "unknown"))
    if not any("<tool_response>" in str(m.get("content")) for m in messages if m["role"] != "system"):
        call = {"name": "search", "arguments": {"query": [question]}}
        return f"<think>I search first.</think>\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
    return f"<answer>{answer if index % 4 != 3 else 'I could not tell'}</answer>"


def _judge_reply(messages: list[dict]) -> str:
    prompt = messages[-1]["content"]
    response = re.search(r"\[response\]: (.*?)\n\n\[correct_answer\]", prompt, re.S)
    correct = re.search(r"\[correct_answer\]: (.*?)\n\n", prompt, re.S)
    same = bool(response and correct) and _norm(response.group(1)) == _norm(correct.group(1).split(" (also")[0])
    verdict = {"extracted_final_answer": response.group(1) if response else "None", "reasoning": "compared",
               "correct": "yes" if same else "no", "confidence": 100}  # fmt: skip
    return json.dumps(verdict)


def serve(role: str, port: int, questions: Path, delay_s: float) -> None:
    """Serve the scripted ``role`` (``policy`` or ``judge``) on ``port`` until killed."""
    rows = [json.loads(line) for line in questions.read_text().splitlines()]
    gold = {r["question"]: (i, r["answer"]) for i, r in enumerate(rows)}
    answered = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self._send({"object": "list", "data": [{"id": role, "object": "model", "max_model_len": 32768}]})
            else:
                self._send({"answered": answered[0]})

        def _stream(self, text: str, usage: dict) -> None:
            """The reply in six chunks over ``delay_s``, as a server streams it."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            step = -(-len(text) // 6)
            pieces = [{"delta": {"content": text[i : i + step]}} for i in range(0, len(text), step)]
            pieces[-1]["finish_reason"] = "stop"
            for piece in pieces:
                time.sleep(delay_s / len(pieces))
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": role,
                         "choices": [{"index": 0, **piece}]}  # fmt: skip
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            last = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": role, "choices": [],
                    "usage": usage}  # fmt: skip
            self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            messages = body["messages"]
            text = _policy_reply(messages, gold) if role == "policy" else _judge_reply(messages)
            usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
            if body.get("stream"):
                self._stream(text, usage)
                answered[0] += 1
                return
            time.sleep(delay_s)
            answered[0] += 1
            message = {"role": "assistant", "content": text}
            self._send({"id": "x", "object": "chat.completion", "created": 0, "model": role,
                        "choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": usage})  # fmt: skip

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


# -- the measurement ------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Services:
    """The three services on fixed ports, each killable and restartable on its port."""

    def __init__(self, questions: Path, work: Path) -> None:
        self.questions, self.work = questions, work
        self.ports = {name: _free_port() for name in SERVICES}
        self.procs: dict[str, subprocess.Popen] = {}

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def start(self, name: str) -> None:
        port = str(self.ports[name])
        if name == "tool server":
            cmd = [*WS, "serve", "tools", "--port", port]
        else:
            role, delay = ("policy", "0.3") if name == "model server" else ("judge", "0.3")
            cmd = [sys.executable, __file__, "serve", role, port, str(self.questions), delay]
        log = open(self.work / f"{name.replace(' ', '_')}.log", "a")  # noqa: SIM115 - the child's
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        health = "/health" if name == "tool server" else "/v1/models"
        _wait(self.url(name) + health, self.procs[name])

    def kill(self, victim: str) -> None:
        """SIGKILL the victim's service, or SIGSTOP it when the victim is a hung one (:data:`HUNG`)."""
        proc = self.procs[HUNG.get(victim, victim)]
        if victim in HUNG:
            proc.send_signal(signal.SIGSTOP)
            return
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def restart(self, victim: str) -> None:
        """The victim's service again, on its port (a stopped one is killed first)."""
        name = HUNG.get(victim, victim)
        if self.procs[name].poll() is None:
            self.procs[name].kill()
            self.procs[name].wait(10)
        self.start(name)

    def answered(self, name: str) -> int:
        import httpx

        return int(httpx.get(self.url(name) + "/count", timeout=5).json()["answered"])

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _wait(url: str, proc: subprocess.Popen) -> None:
    if url.endswith("/health"):
        wait_for_health(url[: -len("/health")], proc)
        return
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the scripted server exited with status {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within 60 s")


def _eval_cmd(
    services: Services, bench: Path, out: Path, a: argparse.Namespace, extra: tuple[str, ...] = ()
) -> list[str]:
    return [*_eval_args(services, bench, out, a.k, a.concurrency), *extra]


def _eval_args(services: Services, bench: Path, out: Path, k: int, concurrency: int = 4) -> list[str]:
    return [
        *WS, "eval", "--bench", str(bench), "--out", str(out), "--rollouts", str(k), "--concurrency", str(concurrency),
        "--max-calls", "4", "--model", f"openai:policy@{services.url('model server')}/v1",
        "--judge", f"llm:openai:judge@{services.url('judge')}/v1", "--tools-url", services.url("tool server"),
    ]  # fmt: skip


def _home(out: Path) -> dict[str, str]:
    """The environment of an evaluation into ``out``: its own WEBSAILOR_HOME, so that the judge's
    verdict cache of one evaluation (kept for its rerun, as a user's is) answers no other."""
    return {**os.environ, "WEBSAILOR_HOME": str(out.parent / f"home_{out.name}")}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _grades(out: Path) -> dict[tuple[str, int], bool | None]:
    return {(s["id"], s["rollout"]): s["correct"] for s in _lines(out / "scores.jsonl")}


def _disturbed(
    services: Services, victim: str, bench: Path, out: Path, a: argparse.Namespace, base: dict, extra: tuple = ()
) -> dict:
    """One evaluation (with the options ``extra``) during which ``victim`` is killed, then its
    rerun once it is back."""
    traj = out / "trajectories.jsonl"
    env = _home(out)
    verdicts = services.answered("judge")
    proc = subprocess.Popen(_eval_cmd(services, bench, out, a, extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env)  # fmt: skip
    while proc.poll() is None:
        if victim == "judge":
            done = services.answered("judge") - verdicts
        else:
            done = traj.read_text().count("\n") if traj.exists() else 0
        if done >= a.kill_after:
            break
        time.sleep(0.05)
    if proc.poll() is not None:
        raise RuntimeError(f"the evaluation ended before {victim} was killed: {proc.stderr.read()[-2000:]}")
    killed = time.perf_counter()
    services.kill(victim)
    _, stderr = proc.communicate(timeout=600)
    exit_s = time.perf_counter() - killed
    kept = _lines(traj)
    graded = _grades(out)
    wrong = sum(graded[key] != base["grades"][key] for key in graded if graded[key] is not None)
    line = next((x for x in stderr.splitlines() if x.startswith("error:")), "")
    services.restart(victim)
    rerun = subprocess.run(_eval_cmd(services, bench, out, a, extra), capture_output=True, text=True, cwd=ROOT, env=env)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return {
        "exit_status": proc.returncode,
        "error_line": line,
        "seconds_from_kill_to_exit": round(exit_s, 2),
        "rollouts_kept": len(kept),
        "kept_with_model_error": sum(r["termination"] == "model_error" for r in kept),
        "kept_with_environment_failures": sum(bool(r.get("env_failures")) for r in kept),
        "ungraded_before_the_stop": sum(v is None for v in graded.values()),
        "graded_before_the_stop": sum(v is not None for v in graded.values()),
        "graded_wrong": wrong,
        "rerun_exit_status": rerun.returncode,
        "rerun_avg_at_k": summary.get("avg_at_k"),
        "rerun_equals_undisturbed": _grades(out) == base["grades"] and summary.get("avg_at_k") == base["avg_at_k"],
    }


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        role, port, questions, delay = sys.argv[2:6]
        serve(role, int(port), Path(questions), float(delay))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=20, help=f"questions (at most {len(FACTS)})")
    p.add_argument("--k", type=int, default=2, help="rollouts per question")
    p.add_argument("--kill-after", type=int, default=8, help="rollouts written (judge: verdicts) before the kill")
    p.add_argument("--no-baseline", action="store_true", help="skip the runs without the breaker (minutes each)")
    p.add_argument("--read-timeout", type=float, default=None,
                   help=f"{READ_TIMEOUT_ENV} of the evaluations (default: unset, {READ_TIMEOUT_S:g} s)")  # fmt: skip
    p.add_argument("--concurrency", type=int, default=4, help="rollouts at once (the breaker's threshold is 5)")
    p.add_argument("--victims", default=",".join(VICTIMS), help=f"comma-separated, of: {', '.join(VICTIMS)}")
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "service_faults", help="scratch folder (emptied)")
    a = p.parse_args()
    if not 1 <= a.questions <= len(FACTS) or a.k < 1 or not 1 <= a.kill_after < a.questions * a.k:
        raise SystemExit(f"--questions 1 to {len(FACTS)}, --k at least 1, --kill-after 1 to questions x k - 1")
    if a.concurrency < 1:
        raise SystemExit(f"--concurrency {a.concurrency}: give at least 1")
    victims = tuple(v.strip() for v in a.victims.split(",") if v.strip())
    unknown = [v for v in victims if v not in VICTIMS]
    if not victims or unknown:
        raise SystemExit(f"--victims {a.victims!r}: name one or more of {', '.join(VICTIMS)}")
    if a.read_timeout is not None:
        os.environ[READ_TIMEOUT_ENV] = str(a.read_timeout)
    read_s = read_timeout()  # the evaluations' (the environment's when not given)
    shutil.rmtree(a.work, ignore_errors=True)
    a.work.mkdir(parents=True)
    bench = a.work / "questions.jsonl"
    rows = [{"id": f"q{i}", "question": q, "answer": ans} for i, (q, ans) in enumerate(FACTS[: a.questions])]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    services = Services(bench, a.work)
    try:
        for name in SERVICES:
            services.start(name)
        t0 = time.perf_counter()
        clean = a.work / "undisturbed"
        r = subprocess.run(_eval_cmd(services, bench, clean, a), capture_output=True, text=True, cwd=ROOT,
                           env=_home(clean))  # fmt: skip
        if r.returncode != 0:
            raise SystemExit(f"the undisturbed evaluation failed ({r.returncode}): {r.stderr[-2000:]}")
        summary = json.loads((a.work / "undisturbed" / "summary.json").read_text())
        base = {"grades": _grades(a.work / "undisturbed"), "avg_at_k": summary["avg_at_k"],
                "wall_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
        figures = {
            "rollouts": a.questions * a.k,
            "undisturbed": {"avg_at_k": base["avg_at_k"], "wall_s": base["wall_s"]},
        }
        runs = {"breaker": ()} | ({} if a.no_baseline else {"no_breaker": ("--service-failures", "1000000")})
        for run, extra in runs.items():
            figures[run] = {
                victim: _disturbed(
                    services, victim, bench, a.work / f"{run}_{victim.replace(' ', '_')}", a, base, extra
                )
                for victim in victims
                if run == "breaker" or victim not in HUNG  # without the breaker: 5 attempts x 60 s a rollout
            }
    finally:
        services.stop()
    print(f"{a.questions} questions x {a.k}: undisturbed Avg@{a.k} {base['avg_at_k']:.3f} in {base['wall_s']} s")
    print(f"{'run':<11}{'killed':<19}{'exit':>5}{'to exit s':>11}{'kept':>6}{'kept err':>9}{'kept env':>9}"
          f"{'ungraded':>9}{'wrong':>7}{'rerun':>7}{'equal':>7}")  # fmt: skip
    for run in runs:
        for victim, f in figures[run].items():
            print(f"{run:<11}{victim:<19}{f['exit_status']:>5}{f['seconds_from_kill_to_exit']:>11}"
                  f"{f['rollouts_kept']:>6}{f['kept_with_model_error']:>9}{f['kept_with_environment_failures']:>9}"
                  f"{f['ungraded_before_the_stop']:>9}{f['graded_wrong']:>7}{f['rerun_exit_status']:>7}"
                  f"{str(f['rerun_equals_undisturbed']):>7}")  # fmt: skip
            if f["error_line"]:
                print(f"  {f['error_line'][:200]}")
    if "no_breaker" in runs:
        figures["exit_time_ratio_no_breaker_over_breaker"] = {
            v: round(figures["no_breaker"][v]["seconds_from_kill_to_exit"]
                     / max(figures["breaker"][v]["seconds_from_kill_to_exit"], 0.01), 1)
            for v in figures["no_breaker"]
        }  # fmt: skip
        print("seconds to exit without the breaker over with it:", figures["exit_time_ratio_no_breaker_over_breaker"])
    figures["read_timeout_s"] = read_s
    figures["concurrency"] = a.concurrency
    figures["targets_s"] = targets = {v: 3 * read_s if v in HUNG else 30.0 for v in victims}
    write_results("service_faults", figures, a)
    ok = all(
        (f := figures["breaker"][v])["exit_status"] == 4 and f["seconds_from_kill_to_exit"] < targets[v]
        and f["kept_with_model_error"] == 0 and f["graded_wrong"] == 0 and f["rerun_equals_undisturbed"]
        for v in victims
    )  # fmt: skip
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
