"""Environment failures kept out of grades and rewards, measured end to end: the web providers'
imitation (``websailor.tools.web.fault_server``) faults a share of its requests, a real tool
server (``websailor serve tools --env web``) runs the web tools over it, and the agent reaches
them through ``--tools-url``.

* **eval** (0%, 10%, 30% faulted requests): a deterministic reader policy (search the question,
  visit the first result, answer with the founder the page names; it answers right whenever
  the environment held) runs ``evaluate`` on questions the imitation's pages answer. Reported:
  rollouts, rollouts ungraded for the environment, Avg@k without them (what eval reports) and
  with them counted (``max_env_failures`` unbounded: what the outage would have cost), the
  wall time, and a second run of the same command (which reruns the outage's rollouts). Two
  execution-layer policies: ``bare`` (no retries, no backup provider: each faulted request
  degrades its operation) and ``layer`` (the defaults: retries and SearXNG as the backup).
* **rl** (``--rl``, 10% and 30%): ``train rl`` for ``--rl-steps`` steps with ``--model`` (a
  model that calls tools: the SFT model of the ladder experiment) against the same tool server
  (``bare`` policy), reporting rollouts, rollouts with environment failures, groups skipped,
  steps completed, and whether any rollout with an environment failure entered the loss (read
  from ``rollouts.jsonl``).
* **start-up**: seconds to a clear error of ``connect_tools`` against a dead port and a silent
  socket (accepts, never replies), and of an ``openai:`` model's health check likewise.

    python benchmarks/env_faults.py [--questions 40] [--k 2] [--rl --model hf:DIR --rl-steps 2]

Prints JSON and writes it to benchmarks/results/env_faults.json.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from _common import start_imitation, wait_for_health, write_results

from websailor.agent.loop import Agent, AgentConfig
from websailor.eval.harness import EvalConfig, evaluate
from websailor.eval.report import summarize
from websailor.eval.scoring import read_trajectories, score_trajectories
from websailor.judge import Gold, load_judge
from websailor.models.base import ChatModel, Generation
from websailor.questions import Question

LINK = re.compile(r"\]\((https?://[^)\s]+/page/[^)\s]+)\)")
FOUNDER = re.compile(r"founded in \d{4} by ([A-Z][a-z]+ [A-Z][a-z]+)")


class ReaderPolicy(ChatModel):
    """Search the question, visit the first result, answer with the founder the page names
    (``unknown`` when an observation did not show what it needs): right exactly when the
    environment held."""

    name = "reader-policy"
    max_context = 131072

    def generate(self, conversations, params):
        return [self._reply(m) for m in conversations]

    def _reply(self, messages) -> Generation:
        turn = sum(m["role"] == "assistant" for m in messages)
        seen = messages[-1]["content"] if turn else ""
        if turn == 0:
            text = self._call("search", {"query": [messages[1]["content"]]})
        elif turn == 1 and (link := LINK.search(seen)):
            text = self._call("visit", {"url": link.group(1), "goal": "who founded it"})
        else:
            found = FOUNDER.search(seen)
            text = f"<answer>{found.group(1) if found else 'unknown'}</answer>"
        return Generation(text, 100 * (turn + 1), len(text.split()))

    @staticmethod
    def _call(name: str, arguments: dict) -> str:
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def web_config(path: Path, imitation: str, policy: str) -> Path:
    """The tool server's web settings: every provider at the imitation; ``bare``: no retries and
    no backup provider, ``layer``: the defaults with SearXNG as the backup."""
    cfg = {
        "serper_api_key": "test-key",
        "serper_base_url": imitation,
        "jina_base_url": f"{imitation}/jina",
        "direct_fetch": False,
        "cache": False,
        "policies": {t: {"timeout_s": 2.0, "backoff_s": 0.05, "backoff_max_s": 0.2} for t in ("search", "visit")},
    }
    if policy == "bare":
        for t in ("search", "visit"):
            cfg["policies"][t]["retries"] = 0
    else:
        cfg["searxng_base_url"] = f"{imitation}/searxng"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


class Stack:
    """The imitation and a tool server over it, in child processes."""

    def __init__(self, tmp: Path, rate: float, policy: str, seed: int) -> None:
        self.imitation, imitation_url = start_imitation(rate, seed, kinds="500,truncated,badjson")
        cfg = web_config(tmp / f"web-{policy}-{rate}.yaml", imitation_url, policy)
        port = free_port()
        self.log = (tmp / f"server-{policy}-{rate}.log").open("w")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "websailor", "serve", "tools", "--env", "web", "--web-config", str(cfg)]
            + ["--tools", "search,visit", "--port", str(port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{port}"
        wait_for_health(self.url, self.server)

    def close(self) -> None:
        for proc in (self.server, self.imitation):
            proc.terminate()
            proc.wait(timeout=30)
        self.log.close()


def questions(n: int) -> list[Question]:
    return [Question(f"t{i}", f"Who founded Topic {i} town?", Gold.parse("Ada Example")) for i in range(n)]


def eval_run(tmp: Path, rate: float, policy: str, n: int, k: int, seed: int) -> dict:
    from websailor.server.client import connect_tools

    stack = Stack(tmp, rate, policy, seed)
    try:
        tools, env = connect_tools(stack.url)
        agent = Agent(ReaderPolicy(), tools, AgentConfig(max_calls=4), env=env)
        out = tmp / f"eval-{policy}-{rate}"
        items = questions(n)
        t0 = time.perf_counter()
        s = evaluate(items, agent, load_judge("em"), out, EvalConfig(rollouts=k, concurrency=4), progress=False)
        wall = time.perf_counter() - t0
        records = read_trajectories([out / "trajectories.jsonl"])
        counted = summarize(score_trajectories(records, load_judge("em"), progress=False, max_env_failures=10**6))
        t1 = time.perf_counter()
        again = evaluate(items, agent, load_judge("em"), out, EvalConfig(rollouts=k, concurrency=4), progress=False)
        rerun_s = time.perf_counter() - t1
        lines = len((out / "trajectories.jsonl").read_text().splitlines())
    finally:
        stack.close()
    env_s = s.get("env_failures", {})
    return {
        "policy": policy,
        "fault_rate": rate,
        "rollouts": s["trajectories"],
        "ungraded_env": env_s.get("ungraded", 0),
        "env_failed_calls": env_s.get("calls", 0),
        "env_failure_kinds": env_s.get("kinds", {}),
        "avg_at_k_without": s["avg_at_k"],
        "avg_at_k_ci95_without": s["avg_at_k_ci95"],
        "avg_at_k_counted_wrong": counted["avg_at_k"],
        "wall_s": round(wall, 2),
        "second_run": {
            "rerun": lines - s["trajectories"],
            "ungraded_env": again.get("env_failures", {}).get("ungraded", 0),
            "avg_at_k": again["avg_at_k"],
            "wall_s": round(rerun_s, 2),
        },
    }


def rl_run(tmp: Path, rate: float, model: str, steps: int, seed: int) -> dict:
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import load_settings, train_rl

    data = tmp / "rl_questions.jsonl"
    data.write_text(
        "".join(json.dumps({"id": q.id, "question": q.question, "answer": "Ada Example"}) + "\n" for q in questions(16))
    )
    stack = Stack(tmp, rate, "bare", seed)
    out = tmp / f"rl-{rate}"
    settings = load_settings(
        None,
        algo="v2",
        group_size=2,
        batch_size=4,
        max_steps=steps,
        max_calls=4,
        max_tokens_per_turn=160,
        concurrency=4,
        learning_rate=1e-6,
        save_steps=1000,
        seed=seed,
    )
    t0 = time.perf_counter()
    try:
        summary = train_rl(data, model, out, settings, env=EnvSpec(tools_url=stack.url), progress=False)
        error = None
    except Exception as e:  # the run may stop for an outage: that is a figure too
        summary, error = {}, f"{type(e).__name__}: {e}"
    finally:
        stack.close()
    wall = time.perf_counter() - t0
    rollouts = (
        [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
        if (out / "rollouts.jsonl").exists()
        else []
    )
    log = (
        [json.loads(x) for x in (out / "rl_log.jsonl").read_text().splitlines()]
        if (out / "rl_log.jsonl").exists()
        else []
    )
    failed = [r for r in rollouts if r.get("env_failures")]
    return {
        "fault_rate": rate,
        "steps_completed": len(log),
        "rollouts": len(rollouts),
        "tool_calls": sum(r["num_tool_calls"] for r in rollouts),
        "rollouts_env_failed": len(failed),
        "env_failed_in_loss": sum(bool(r["in_loss"]) for r in failed),
        "env_failed_with_reward": sum(r["reward"] is not None for r in failed),
        "groups_skipped": sum(x.get("groups/skipped", 0) for x in log),
        "groups_env_failed": sum(x.get("groups/env_failed", 0) for x in log),
        "wall_s": round(wall, 1),
        "error": error,
        "steps_in_summary": summary.get("steps"),
    }


def silent_socket() -> tuple[socket.socket, str, threading.Event]:
    """A socket that accepts connections and never replies."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def startup_checks() -> dict:
    from websailor.errors import WebsailorError
    from websailor.server.client import connect_tools

    def timed_error(fn) -> dict:
        t0 = time.perf_counter()
        try:
            fn()
            message = "no error"
        except WebsailorError as e:
            message = str(e)
        return {"seconds": round(time.perf_counter() - t0, 2), "message": message}

    dead = f"http://127.0.0.1:{free_port()}"
    sock, silent, stop = silent_socket()
    out = {
        "tool_server_dead_port": timed_error(lambda: connect_tools(dead)),
        "tool_server_silent": timed_error(lambda: connect_tools(silent)),
    }
    try:
        from websailor.models import load_model

        out["model_dead_port"] = timed_error(lambda: load_model(f"openai:m@{dead}/v1", check=True))
        out["model_silent"] = timed_error(lambda: load_model(f"openai:m@{silent}/v1", check=True))
    finally:
        stop.set()
        sock.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--rates", default="0,0.1,0.3")
    ap.add_argument("--rl", action="store_true", help="also run train rl at 10%% and 30%%")
    ap.add_argument("--model", default="smollm2", help="the RL policy (a model that calls tools)")
    ap.add_argument("--rl-steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    result: dict = {"startup": startup_checks(), "eval": [], "rl": []}
    with tempfile.TemporaryDirectory() as tmp:
        for policy in ("bare", "layer"):
            for rate in rates:
                row = eval_run(Path(tmp), rate, policy, args.questions, args.k, args.seed)
                print(json.dumps(row), file=sys.stderr, flush=True)
                result["eval"].append(row)
        if args.rl:
            for rate in (r for r in rates if r > 0):
                row = rl_run(Path(tmp), rate, args.model, args.rl_steps, args.seed)
                print(json.dumps(row), file=sys.stderr, flush=True)
                result["rl"].append(row)
    write_results("env_faults", result, args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
