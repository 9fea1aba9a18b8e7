"""Context summaries over a long research run: the context the model sees at each call, with
summaries off and on, on the embedded corpus.

The research itself is a fixed crawl, so that every setting does the same work: the policy
visits ``--pages`` pages of the vital-articles corpus in turn (real ``visit`` observations), then
writes a short report; it ignores the nudge, as a model that keeps researching would. The
summaries are written by a real model (``--model``: the embedded SmolLM2 by default, or a
``vllm:``/``openai:`` spec), and every context is counted with that model's tokenizer or
server. Without summaries the run is nudged near the context limit and ends there; with them it
goes on, its context bounded. Figures per setting: the context at each call, its peak and mean,
calls made, how the run ended, summaries written (and failed) and their seconds.

    python benchmarks/report_context.py
    python benchmarks/report_context.py --pages 40 --shares 0.5,0.7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from _common import write_results  # noqa: E402

from websailor.agent import Agent, AgentConfig  # noqa: E402
from websailor.agent.summarize import SUMMARY_REQUEST  # noqa: E402
from websailor.corpus import Corpus  # noqa: E402
from websailor.corpus.urls import title_to_url  # noqa: E402
from websailor.models import load_model  # noqa: E402
from websailor.models.base import ChatModel, Generation  # noqa: E402
from websailor.tools.local import build_local_tools  # noqa: E402


class Crawler(ChatModel):
    """Visits ``urls`` one a turn, then reports; summary requests go to ``writer``. Prompt
    tokens of its own turns are counted with ``count`` (the writer's tokenizer)."""

    def __init__(self, urls: list[str], writer: ChatModel, count) -> None:
        self.urls, self.writer, self.count = urls, writer, count
        self.name, self.max_context, self.turn_tokens = writer.name, writer.max_context, writer.turn_tokens
        self.contexts: list[int] = []
        self.summary_s = 0.0

    def generate(self, conversations, params):
        out = []
        for messages in conversations:
            if messages[-1]["content"] == SUMMARY_REQUEST:
                t0 = time.perf_counter()
                gen = self.writer.chat(messages, params)
                self.summary_s += time.perf_counter() - t0
                out.append(gen)
                continue
            prompt = self.count(messages)
            self.contexts.append(prompt)
            step = len(self.contexts) - 1  # the crawl's own turns so far (summaries do not count)
            if step < len(self.urls):
                reply = ('<think>Next page.</think>\n<tool_call>\n{"name": "visit", "arguments": {"url": "'
                         + self.urls[step] + '", "goal": "facts for the report"}}\n</tool_call>')  # fmt: skip
            else:
                reply = (
                    "<think>Done.</think>\n<answer># Report\n\nWhat the pages say [1].\n\n## References\n[1] "
                    + self.urls[0]
                    + "</answer>"
                )
            out.append(Generation(reply, prompt, len(reply) // 4))
        return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="the model that writes the summaries (and counts tokens)")
    p.add_argument("--pages", type=int, default=30, help="pages the crawl visits before it reports")
    p.add_argument("--shares", default="0.5,0.7", help="summary thresholds to compare with none, comma-separated")
    p.add_argument("--seed-page", default="Nile", help="the crawl visits this page's links, in order")
    p.add_argument("--results-dir", type=Path, default=None)
    args = p.parse_args(argv)
    shares = [float(x) for x in args.shares.split(",") if x.strip()]
    if args.pages < 2 or not all(0 < s < 0.85 for s in shares):
        p.error("--pages must be at least 2 and each share in (0, 0.85)")
    corpus = Corpus.open()
    titles, frontier = [args.seed_page], [args.seed_page]  # the seed's links, then theirs, in order
    while frontier and len(titles) < args.pages:
        for m in corpus.links(frontier.pop(0)):
            if m.target not in titles and corpus.get(m.target) is not None:
                titles.append(m.target)
                frontier.append(m.target)
    urls = [title_to_url(t) for t in titles[: args.pages]]
    writer = load_model(args.model, check=True)
    tokenizer = getattr(writer, "tokenizer", None)
    if tokenizer is not None:

        def count(msgs: list[dict]) -> int:
            text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    else:  # a served model: about 4 characters a token

        def count(msgs: list[dict]) -> int:
            return sum(len(m["content"]) for m in msgs) // 4

    tools = build_local_tools(corpus)
    figures: dict = {"model": writer.name, "context_limit": writer.max_context, "pages": len(urls), "runs": {}}
    for share in [None, *shares]:
        crawler = Crawler(urls, writer, count)
        cfg = AgentConfig(
            task="report", summarize_at=share, max_calls=len(urls) + 5, max_tokens_per_turn=writer.turn_tokens
        )
        t0 = time.perf_counter()
        traj = Agent(crawler, tools, cfg).run("Write a report on the Nile and the places it touches.", "bench")
        name = "off" if share is None else f"at {share}"
        done = [s for s in traj.summaries if s["text"]]
        run = {
            "termination": traj.termination,
            "calls": traj.num_model_calls,
            "pages_visited": traj.num_tool_calls,
            "peak_context": max(crawler.contexts),
            "mean_context": round(sum(crawler.contexts) / len(crawler.contexts)),
            "contexts": crawler.contexts,
            "summaries": len(done),
            "summaries_failed": len(traj.summaries) - len(done),
            "summary_tokens": [s["completion_tokens"] for s in done],
            "summary_s": round(crawler.summary_s, 1),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        figures["runs"][name] = run
        print(
            f"summaries {name:>7}: {run['termination']:>7} after {run['calls']} calls, {run['pages_visited']} pages; "
            f"context peak {run['peak_context']}, mean {run['mean_context']} of {writer.max_context}; "
            f"{run['summaries']} summaries ({run['summaries_failed']} failed, {run['summary_s']} s)"
        )
    writer.close()
    kw = {"results_dir": args.results_dir} if args.results_dir else {}
    write_results("report_context", figures, args, **kw)


if __name__ == "__main__":
    main(sys.argv[1:])
