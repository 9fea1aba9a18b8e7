"""Multi-turn rollouts: a vLLM server, the generation engine and static ``generate``, on one
workload.

Each backend serves the embedded SmolLM2-135M-Instruct (CPU):

- ``static``: :class:`websailor.models.hf_static.StaticTransformersModel`, one left-padded
  ``generate`` per micro-batch of concurrent calls; every turn re-encodes the whole
  conversation (its replies carry no token ids, each turn is re-rendered from text);
- ``engine``: :class:`websailor.models.hf.TransformersModel`, the key/value engine with prefix
  reuse across the turns of a conversation and continuous batching of concurrent rollouts;
- ``vllm``: a vLLM server (:class:`websailor.models.vllm_launch.VLLMServer`: the dtype this
  machine computes faster, prefix caching; vLLM's CPU build from ``make vllm``; ``vllm_bf16``
  and ``vllm_fp32`` force one dtype, to measure both in one run) reached through the ``vllm:`` backend
  (:class:`websailor.models.vllm_server.VLLMServerModel`: token-id prompts, sampled ids back).
  Its start-up is timed apart, prefix reuse is read from the server's ``/metrics``
  (``vllm:prefix_cache_queries`` and ``_hits``), and its peak memory is the sum of the peak
  resident memory of the server's processes (API server, engine core, worker).

The workload is shaped like SFT trajectories: 4 turns that really call the local tools (the
embedded Wikipedia corpus): search, visit the first hit, search again, answer; the tool
responses make the context grow to about 2,000-3,000 tokens by the last turn. The base model
does not call tools reliably, so a *scripted policy runs on top of the real model*: each turn
the real backend generates a reply to the whole conversation (the cost is the model's: prefill
of the context and decoding of up to ``--reply-tokens`` tokens at temperature 1.0, top-p 1.0,
with the agent's real stop strings), then the wrapper replaces the reply's *text* with the
scripted tool call or answer of that turn and keeps the generated ``token_ids`` and
``logprobs`` as sampled. So the recorded text is scripted while the cost is the model's. The
engine continues the next turn from those ids (as in real use, which keeps its prefix reuse
realistic); the static backend re-renders the scripted text, usually shorter than the
generated reply, which if anything shortens its prompts (both prompt sizes are printed).

16 questions x 4 rollouts, 8 at a time (``--quick``: 4 x 2). Each backend runs in its own
child process, so that each has its own peak resident memory (``ru_maxrss``), one after the
other in the same run.

    OMP_NUM_THREADS=2 python benchmarks/rollout_throughput.py --quick
    python benchmarks/rollout_throughput.py --backends engine --reply-tokens 64

``--quick`` took about 10 minutes on the two-core development machine with
``OMP_NUM_THREADS=1`` (static 7 minutes, engine 2.5; the full run is 8 times as many rollouts).

Prints, per backend: rollouts per minute, generated tokens per second, prompt tokens computed
and seen per rollout (static: computed = seen, it re-encodes every turn; its left padding is
not counted), the mean and largest prompt of each turn, peak resident memory and wall time;
then the ratio engine / static of rollouts per minute, and the machine's load average at start
and end. Writes the same figures to benchmarks/results/rollout_throughput.json (``--json PATH``
elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import write_results  # noqa: E402

from websailor.models.base import ChatModel, Generation, Message, SamplingParams  # noqa: E402

BACKENDS = ("static", "engine", "vllm", "vllm_bf16", "vllm_fp32")
#: the vLLM backends and the dtype each starts its server with (``vllm``: this machine's choice)
VLLM_DTYPES = {"vllm": "auto", "vllm_bf16": "bfloat16", "vllm_fp32": "float32"}
#: The engine's statistics that count tokens (``KVEngine.stats``).
COUNTERS = ("prompt_tokens", "reused_tokens", "computed_tokens", "generated_tokens")

#: (question, first search query, second search query, final answer): short factual questions
#: about vital-article topics.
QUESTIONS = [
    ("In which year did the French Revolution begin?", "French Revolution", "Storming of the Bastille", "1789"),
    ("Who developed the theory of general relativity?", "general relativity", "Albert Einstein", "Albert Einstein"),
    ("What is the capital city of Australia?", "Australia capital city", "Canberra", "Canberra"),
    ("Which planet is the largest in the Solar System?", "largest planet Solar System", "Jupiter", "Jupiter"),
    ("Who painted the Mona Lisa?", "Mona Lisa", "Leonardo da Vinci", "Leonardo da Vinci"),
    ("What is the chemical symbol of gold?", "gold chemical element", "gold symbol Au", "Au"),
    ("Which river is the longest in Africa?", "longest river in Africa", "Nile", "Nile"),
    ("Who wrote the play Hamlet?", "Hamlet play", "William Shakespeare", "William Shakespeare"),
    ("What is the largest ocean on Earth?", "largest ocean", "Pacific Ocean", "Pacific Ocean"),
    ("Who was the first President of the United States?", "first President of the United States", "George Washington", "George Washington"),
    ("Which element has atomic number 1?", "atomic number 1 element", "Hydrogen", "Hydrogen"),
    ("Who formulated the laws of motion and universal gravitation?", "laws of motion universal gravitation", "Isaac Newton", "Isaac Newton"),
    ("On which continent is the Sahara?", "Sahara desert", "Africa continent", "Africa"),
    ("In which year did World War II end?", "World War II", "Surrender of Japan", "1945"),
    ("Which empire built Machu Picchu?", "Machu Picchu", "Inca Empire", "Inca Empire"),
    ("What is the tallest mountain on Earth above sea level?", "highest mountain above sea level", "Mount Everest", "Mount Everest"),
]  # fmt: skip

_URL = re.compile(r"\]\((https?://[^)\s]+)\)")


def rss_mb(field: str = "VmRSS") -> float:
    """A memory figure of this process from /proc/self/status, in MB (0 where unreadable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class ScriptedPolicy(ChatModel):
    """The real backend generates every turn; the reply's text is then replaced by the
    scripted action of that turn (search, visit the first hit, search, answer), its sampled
    ids, log-probabilities, token counts and finish reason kept. Records the prompt size of
    each turn (index 0 = turn 1)."""

    def __init__(self, inner: ChatModel, script: dict[str, tuple[str, str, str]]) -> None:
        self.inner = inner
        self.script = script  # question -> (first query, second query, answer)
        self.name = inner.name
        self.max_context = inner.max_context
        self.turn_tokens = inner.turn_tokens
        self.question_timeout_s = inner.question_timeout_s
        self.turn_prompts: list[list[int]] = [[] for _ in range(4)]
        self._lock = threading.Lock()

    def generate(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        return [self.chat(c, params) for c in conversations]

    def chat(self, messages: list[Message], params: SamplingParams) -> Generation:
        gen = self.inner.chat(messages, params)  # one call per rollout thread: the backend batches them
        turn = sum(m["role"] == "assistant" for m in messages)
        with self._lock:
            self.turn_prompts[min(turn, 3)].append(gen.prompt_tokens)
        gen.text = self.action(messages, turn)
        return gen

    def action(self, messages: list[Message], turn: int) -> str:
        from websailor.corpus.urls import title_to_url

        question = next(m["content"] for m in messages if m["role"] == "user")
        first, second, answer = self.script[question]
        if turn == 0:
            return search_call(f"I should search for {first}.", first)
        if turn == 1:
            found = _URL.search(messages[-1]["content"])
            url = found.group(1) if found else title_to_url(first)
            args = {"url": [url], "goal": question}
            return f"<think>The first result looks relevant; I will read it.</think>\n{tool_call('visit', args)}"
        if turn == 2:
            return search_call(f"I should check this against {second}.", second)
        return f"<think>The pages agree.</think>\n<answer>{answer}</answer>"

    def close(self) -> None:
        self.inner.close()


def tool_call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def search_call(thought: str, query: str) -> str:
    return f"<think>{thought}</think>\n{tool_call('search', {'query': [query]})}"


def process_tree_peak_mb(pid: int) -> float:
    """The summed peak resident memory (``VmHWM``) of ``pid`` and its descendants, in MB."""
    import psutil

    total = 0.0
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0.0
    for proc in procs:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def prefix_cache_counts(base_url: str) -> dict[str, float]:
    """vLLM's prefix-cache counters (tokens queried and hit) from its Prometheus ``/metrics``."""
    import httpx

    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    out = {"queries": 0.0, "hits": 0.0}
    for line in text.splitlines():
        for key in out:
            if line.startswith(f"vllm:prefix_cache_{key}_total") or line.startswith(f"vllm:prefix_cache_{key}{{"):
                out[key] += float(line.rsplit(" ", 1)[1])
    return out


def load_backend(kind: str, path: Path) -> ChatModel:
    if kind == "static":
        from websailor.models.hf_static import StaticTransformersModel

        return StaticTransformersModel(path, name="smollm2-static", max_batch=8)
    from websailor.models.hf import TransformersModel

    return TransformersModel(path, name="smollm2-engine", max_batch=8)


def run_backend(kind: str, a: argparse.Namespace) -> dict:
    """One backend's rollouts, in this process; returns its figures."""
    from websailor.agent.loop import Agent, AgentConfig
    from websailor.models.embedded import ensure_smollm2
    from websailor.tools.environment import EnvSpec, open_environment

    env = open_environment(EnvSpec())
    server = None
    if kind in VLLM_DTYPES:
        from websailor.models import load_model
        from websailor.models.vllm_launch import VLLMServer

        server = VLLMServer(ensure_smollm2(), port=0, max_model_len=8192, dtype=VLLM_DTYPES[kind]).start()
        print(f"[{kind}] the server runs in {server.dtype}", flush=True)
        server.wait_ready(900, progress=True)
        model = load_model(server.spec, check=True)
    else:
        model = load_backend(kind, ensure_smollm2())
    model.chat([{"role": "user", "content": "Hello."}], SamplingParams(max_tokens=4, stop=[]))  # warm up
    rss_loaded = rss_mb()
    engine = getattr(model, "engine", None)
    before = dict(engine.stats) if engine is not None else {}
    cache_before = prefix_cache_counts(server.base_url) if server is not None else {}
    items = QUESTIONS[: a.questions]
    policy = ScriptedPolicy(model, {q: (f, s, ans) for q, f, s, ans in items})
    cfg = AgentConfig(
        max_calls=4,
        max_tokens_per_turn=a.reply_tokens,
        sampling=SamplingParams(temperature=1.0, top_p=1.0),
    )
    agent = Agent(policy, env.tools, cfg)
    jobs = [(i, q, r) for i, (q, *_) in enumerate(items) for r in range(a.rollouts)]
    trajs = []
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.concurrency) as pool:
        futs = [pool.submit(agent.run, q, id=f"q{i}", rollout=r) for i, q, r in jobs]
        for fut in as_completed(futs):
            trajs.append(fut.result())
            el = time.perf_counter() - t0
            t = trajs[-1]
            print(
                f"[{kind}] {len(trajs)}/{len(jobs)} rollouts in {el:.0f} s ({len(trajs) / el * 60:.2f}/min); "
                f"{t.id}/{t.rollout}: {t.termination}, {t.num_tool_calls} tool calls, "
                f"{t.tokens['prompt']} prompt + {t.tokens['completion']} generated tokens",
                flush=True,
            )
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    extra: dict = {}
    if server is not None:
        cache = prefix_cache_counts(server.base_url)
        queried, hit = cache["queries"] - cache_before["queries"], cache["hits"] - cache_before["hits"]
        extra = {
            "dtype": server.dtype,
            "startup_s": round(server.startup_s or 0.0, 1),
            "server_peak_rss_mb": round(process_tree_peak_mb(server.proc.pid), 1),
            "prefix_cache_hit_share": round(hit / queried, 3) if queried else None,
        }
        server.stop()
    model.close()
    env.close()
    n = len(trajs)
    seen = sum(t.tokens["prompt"] for t in trajs)
    generated = sum(t.tokens["completion"] for t in trajs)
    if engine is not None:
        # counters since the warm-up; other entries (a peak, for example) as they are
        stats = {k: v - before[k] if k in COUNTERS else v for k, v in engine.stats.items()}
        computed = stats["computed_tokens"]
    elif extra.get("prefix_cache_hit_share") is not None:
        stats, computed = {}, round(seen * (1 - extra["prefix_cache_hit_share"]))
    else:
        stats, computed = {}, seen
    res = {
        "rollouts": n,
        "wall_s": round(wall, 1),
        "rollouts_per_min": round(n / wall * 60, 3),
        "generated_tokens_per_s": round(generated / wall, 2),
        "generated_tokens": generated,
        "model_calls": sum(t.num_model_calls for t in trajs),
        "tool_calls": sum(t.num_tool_calls for t in trajs),
        "answered": sum(t.termination == "answer" for t in trajs),
        "terminations": {k: sum(t.termination == k for t in trajs) for k in sorted({t.termination for t in trajs})},
        "prompt_tokens_seen_per_rollout": round(seen / n, 1),
        "prompt_tokens_computed_per_rollout": round(computed / n, 1),
        "context_tokens_per_turn": [
            {"turn": i + 1, "calls": len(p), "mean": round(sum(p) / len(p), 1), "max": max(p)}
            for i, p in enumerate(policy.turn_prompts)
            if p
        ],
        "model_s_per_rollout": round(sum(t.timings["model_s"] for t in trajs) / n, 2),
        "tools_s_per_rollout": round(sum(t.timings["tools_s"] for t in trajs) / n, 3),
        "rss_after_load_mb": round(rss_loaded, 1),
        "peak_rss_mb": round(peak, 1),
    }
    if stats:
        res["engine_stats"] = stats
    res.update(extra)
    if "startup_s" in extra:  # end to end, the server's start-up included
        res["rollouts_per_min_with_startup"] = round(n / (wall + extra["startup_s"]) * 60, 3)
    return res


def run_child(kind: str, a: argparse.Namespace) -> dict:
    """Run one backend in a fresh Python process (its own peak memory); its progress lines
    go to this process's output."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, __file__, "--child", kind, "--child-out", str(out)]
        cmd += ["--questions", str(a.questions), "--rollouts", str(a.rollouts)]
        cmd += ["--concurrency", str(a.concurrency), "--reply-tokens", str(a.reply_tokens)]
        proc = subprocess.run(cmd)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"the {kind} backend's run failed (exit status {proc.returncode})")
        return json.loads(out.read_text())


def show(kind: str, r: dict) -> None:
    print(
        f"\n{kind}: {r['rollouts']} rollouts in {r['wall_s']:.0f} s ({r['answered']} answered, {r['tool_calls']} tool calls)"
    )
    print(f"  rollouts per minute          {r['rollouts_per_min']:.2f}")
    print(f"  generated tokens per second  {r['generated_tokens_per_s']:.1f}")
    print(
        f"  prompt tokens per rollout    {r['prompt_tokens_computed_per_rollout']:.0f} computed "
        f"of {r['prompt_tokens_seen_per_rollout']:.0f} seen"
    )
    if "engine_stats" in r:
        st = r["engine_stats"]
        share = st["reused_tokens"] / st["prompt_tokens"] if st["prompt_tokens"] else 0.0
        print(f"  prompt tokens reused         {st['reused_tokens']} of {st['prompt_tokens']} ({share:.0%})")
    turns = ", ".join(f"turn {c['turn']} {c['mean']:.0f} / {c['max']}" for c in r["context_tokens_per_turn"])
    print(f"  context tokens, mean / max   {turns}")
    print(f"  peak resident memory         {r['peak_rss_mb']:.0f} MB ({r['rss_after_load_mb']:.0f} MB after loading)")
    if "startup_s" in r:
        share = r["prefix_cache_hit_share"]
        print(
            f"  server start-up              {r['startup_s']:.0f} s (rollouts/min with it: {r['rollouts_per_min_with_startup']:.2f})"
        )
        print(f"  server peak memory           {r['server_peak_rss_mb']:.0f} MB (its processes summed)")
        print(f"  prefix cache hits            {share:.0%} of prompt tokens" if share is not None else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="4 questions x 2 rollouts")
    p.add_argument("--questions", type=int, default=None, help=f"questions (at most {len(QUESTIONS)}; default 16)")
    p.add_argument("--rollouts", type=int, default=None, help="rollouts per question (default 4)")
    p.add_argument("--concurrency", type=int, default=8, help="rollouts run at once")
    p.add_argument("--reply-tokens", type=int, default=96, help="tokens generated per turn, at most")
    p.add_argument("--backends", default="static,engine,vllm", help="comma-separated: static, engine, vllm")
    p.add_argument("--json", type=Path, help="write the figures to this .json file instead of benchmarks/results/")
    p.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    p.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    a.questions = min(len(QUESTIONS), a.questions or (4 if a.quick else 16))
    a.rollouts = a.rollouts or (2 if a.quick else 4)
    if a.child:
        a.child_out.write_text(json.dumps(run_backend(a.child, a)))
        return
    kinds = [k.strip() for k in a.backends.split(",") if k.strip()]
    if not kinds or any(k not in BACKENDS for k in kinds):
        p.error(f"--backends: choose among {', '.join(BACKENDS)}")

    from websailor.models.embedded import ensure_smollm2
    from websailor.tools.environment import EnvSpec, open_environment

    ensure_smollm2()  # converted once, outside the measured processes
    open_environment(EnvSpec()).close()  # the embedded corpus, built on first use
    load_start = os.getloadavg()
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(
        f"{a.questions} questions x {a.rollouts} rollouts, {a.concurrency} at once, up to {a.reply_tokens} tokens a turn; "
        f"OMP_NUM_THREADS={threads}; load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}",
        flush=True,
    )
    res: dict = {
        "workload": {
            "questions": a.questions,
            "rollouts_per_question": a.rollouts,
            "concurrency": a.concurrency,
            "reply_tokens": a.reply_tokens,
            "turns": 4,
            "omp_num_threads": threads,
        }
    }
    for kind in kinds:
        res[kind] = run_child(kind, a)
    load_end = os.getloadavg()
    res["load_average"] = {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]}
    for kind in kinds:
        show(kind, res[kind])
    if "static" in res and "engine" in res:
        ratio = res["engine"]["rollouts_per_min"] / res["static"]["rollouts_per_min"]
        res["engine_over_static_rollouts_per_min"] = round(ratio, 2)
        print(f"\nengine / static, rollouts per minute: {ratio:.2f}x")
    if "engine" in res and "vllm" in res:
        ratio = res["vllm"]["rollouts_per_min"] / res["engine"]["rollouts_per_min"]
        tok = res["vllm"]["generated_tokens_per_s"] / res["engine"]["generated_tokens_per_s"]
        e2e = res["vllm"]["rollouts_per_min_with_startup"] / res["engine"]["rollouts_per_min"]
        res["vllm_over_engine"] = {
            "rollouts_per_min": round(ratio, 2),
            "generated_tokens_per_s": round(tok, 2),
            "rollouts_per_min_with_startup": round(e2e, 2),
        }
        print(
            f"vllm / engine: rollouts per minute {ratio:.2f}x, generated tokens/s {tok:.2f}x, "
            f"with the server's start-up {e2e:.2f}x"
        )
    if "vllm_bf16" in res and "vllm_fp32" in res:
        fp32, bf16 = res["vllm_fp32"], res["vllm_bf16"]
        ratio = fp32["rollouts_per_min"] / bf16["rollouts_per_min"]
        tok = fp32["generated_tokens_per_s"] / bf16["generated_tokens_per_s"]
        res["vllm_fp32_over_bf16"] = {"rollouts_per_min": round(ratio, 2), "generated_tokens_per_s": round(tok, 2)}
        print(
            f"vLLM in fp32 / in bf16 on this machine: rollouts per minute {ratio:.2f}x, generated tokens/s {tok:.2f}x"
        )
    last = [c["max"] for k in kinds for c in res[k]["context_tokens_per_turn"] if c["turn"] == 4]
    if last and max(last) < 2000:
        print(f"note: the last turn's context reached only {max(last)} tokens (the workload aims at 2,000-3,000)")
    print(f"load average at start {load_start[0]:.2f}, at end {load_end[0]:.2f} (1 min)")
    if a.json:
        write_results(a.json.name.removesuffix(".json"), res, a, results_dir=a.json.parent)
    else:
        write_results("rollout_throughput", res, a)


if __name__ == "__main__":
    main()
