"""Screenshots of every view of ``websailor view``, for docs/viewer.md.

Serves the viewer over a folder of runs and shoots, with headless Chromium through Playwright
(Debian's ``chromium``; the flags of ``tests/browser.py``), at 1280x800:

- the runs index;
- each run's page (every link of the index);
- the first deeper link of each run's page (a question, a step, an item): the first link to
  the run's own URL with a query string (``?question=``, ``?step=``, ``?item=``), so the script
  shoots the views as they are written.

``--root PATH`` shoots real runs; without it the script builds a small realistic set in a
temporary folder with the library, over the embedded corpus (built by ``websailor corpus build``
or ``make demo``; the script says so when it is missing), and deletes it afterwards unless
``--keep-runs DIR`` names where to leave it (to open it with ``websailor view DIR``):

- ``qa.jsonl``: 12 items of levels 1 and 3 synthesized from the corpus's knowledge graph (``synthesize``);
- ``eval-search`` and ``eval-visit``: ``evaluate`` of two scripted policies over the local
  ``search`` and ``visit`` on those items and 12 easy look-up questions (a search result's lead
  sentence with its title masked), k = 3 (both answer with the first search result's
  title; the second searches the quoted words of a look-up or the names of a synthesized question
  only, visits the result first, and answers with the first title the question does not name);
- ``rl-run/rl_log.jsonl``: a 12-step RL step log (the figures of ``websailor train rl``).

Usage: ``python benchmarks/view_screenshots.py [--root PATH | --keep-runs DIR] [--out docs/screenshots]``
(the default ``--out`` replaces the screenshots docs/viewer.md shows).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import tempfile
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # browser.py: Chromium's flags

from browser import CHROMIUM_ARGS, chromium_path  # noqa: E402

from websailor.models.base import ChatModel, Generation  # noqa: E402

LINK = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")


class ReadingPolicy(ChatModel):
    """Search the question and answer with the first result's title; with ``visit=True``,
    search the quoted words only and visit the first result before answering. Deterministic."""

    max_context = 131072

    def __init__(self, visit: bool) -> None:
        self.visit = visit
        self.name = "reader-visit" if visit else "reader-search"

    def generate(self, conversations, params):
        return [self._reply(m) for m in conversations]

    def _reply(self, messages) -> Generation:
        turn = sum(m["role"] == "assistant" for m in messages)
        seen = messages[-1]["content"] if turn else ""
        links = LINK.findall(seen)
        if turn == 0:
            question = messages[-1]["content"]
            if self.visit and ":" in question:  # a look-up: the quoted words only
                question = question.split(":", 1)[-1].strip(' "?')
            elif self.visit:  # the names in the question (its capitalised words after the first)
                question = " ".join(w.strip(",.?") for w in question.split()[1:] if w[:1].isupper()) or question
            text = "<think>I start with a search for the question's words.</think>\n" + _call(
                "search", {"query": [question[:200]]}
            )
        elif turn == 1 and self.visit and links:
            text = f"<think>The first result, {links[0][0]}, looks relevant; I read it.</think>\n" + _call(
                "visit", {"url": links[0][1], "goal": "the answer to the question"}
            )
        else:
            found = [LINK.findall(m["content"]) for m in messages[2:] if m["role"] != "assistant"]
            first = next((x for x in found if x), [])
            if self.visit:  # a title the question does not already name
                first = [t for t in first if t[0].lower() not in messages[1]["content"].lower()] or first
            answer = first[0][0] if first else "unknown"
            text = f"<think>The evidence points to {answer}.</think>\n<answer>{answer}</answer>"
        return Generation(text, 120 * (turn + 1), len(text.split()))


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def build_runs(root: Path) -> None:
    """A synthesized QA file, two eval runs of scripted policies on it, and an RL step log."""
    from websailor.agent.loop import Agent, AgentConfig
    from websailor.corpus import Corpus
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import Gold, load_judge
    from websailor.questions import Question
    from websailor.synth.dataset import SynthConfig, read_items, synthesize
    from websailor.synth.graph import build_knowledge_graph
    from websailor.tools.local import build_local_tools

    corpus = Corpus.open(None)
    tools = build_local_tools(corpus)
    qa = root / "qa.jsonl"
    synthesize(build_knowledge_graph(corpus), qa, SynthConfig(n=12, levels=(1, 3)), progress=False, tools=tools)
    items = [Question(it["id"], it["question"], Gold.parse(it["answer"])) for it in read_items(qa)]
    items += lookup_questions(tools["search"])
    for visit in (False, True):
        agent = Agent(ReadingPolicy(visit), tools, AgentConfig(max_calls=4))
        out = root / ("eval-visit" if visit else "eval-search")
        evaluate(items, agent, load_judge("em"), out, EvalConfig(rollouts=3, concurrency=4), bench="qa", progress=False)
    rl = root / "rl-run"
    rl.mkdir()
    rng = random.Random(0)
    with (rl / "rl_log.jsonl").open("w", encoding="utf-8") as fh:
        for step in range(1, 13):
            reward = 0.1 + 0.5 * (1 - math.exp(-step / 5)) + rng.uniform(-0.05, 0.05)
            rec = {
                "step": step,
                "reward/mean": round(reward, 4),
                "reward/accuracy": round(max(0.0, reward - 0.1), 4),
                "groups/zero_spread_share": round(0.8 - 0.04 * step + rng.uniform(-0.05, 0.05), 4),
                "rollouts/tool_calls": round(2 + 0.1 * step + rng.uniform(-0.2, 0.2), 3),
                "rollouts/response_tokens": round(380 + 9 * step + rng.uniform(-20, 20), 1),
                "entropy": round(0.9 - 0.02 * step + rng.uniform(-0.03, 0.03), 4),
                "clip_ratio/region_mean": round(0.01 + rng.uniform(0, 0.01), 4),
                "time/step_s": round(40 + rng.uniform(-5, 5), 2),
            }
            fh.write(json.dumps(rec) + "\n")
    write_rollouts(root, rl)


def write_rollouts(root: Path, rl: Path) -> None:
    """``rl/rollouts.jsonl`` for steps 11 and 12, as ``train rl`` writes it, from the real
    rollouts of ``eval-search`` and ``eval-visit``: a question's group is two rollouts of one
    policy and one of the other (scripted policies are deterministic, so a group of one policy
    would never spread), each with the reward of its grade, its group-normalised advantage
    (GRPO) and whether it enters the loss (not when the group's rewards are all equal)."""
    from websailor.eval.scoring import read_scores

    def rollouts(run: str) -> dict[tuple[str, int], dict]:
        correct = {(s.id, s.rollout): bool(s.correct) for s in read_scores(root / run / "scores.jsonl")}
        out = {}
        for line in (root / run / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            out[(rec["id"], rec["rollout"])] = {**rec, "correct": correct.get((rec["id"], rec["rollout"]), False)}
        return out

    search, visit = rollouts("eval-search"), rollouts("eval-visit")
    ids = list(dict.fromkeys(qid for qid, _ in search))
    ids.sort(key=lambda q: search[(q, 0)]["correct"] == visit[(q, 0)]["correct"])  # groups that spread first
    (rl / "rl_settings.json").write_text(json.dumps({"group_size": 3, "algo": "v2", "model": "reader"}) + "\n")
    with (rl / "rollouts.jsonl").open("w", encoding="utf-8") as fh:
        for step, (major, minor) in ((11, (search, visit)), (12, (visit, search))):
            for qid in ids[:8]:
                group = [major[(qid, 0)], major[(qid, 1)], {**minor[(qid, 2)]}]
                rewards = [float(r["correct"]) for r in group]
                mean = sum(rewards) / len(rewards)
                std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / len(rewards))
                for i, (rec, reward) in enumerate(zip(group, rewards)):
                    advantage = round((reward - mean) / std, 4) if std else 0.0
                    row = {**rec, "step": step, "rollout": i, "reward": reward, "advantage": advantage}
                    fh.write(json.dumps({**row, "in_loss": bool(std)}) + "\n")


RESULT = re.compile(r"^\d+\. \[([^\]]+)\]\([^)]+\)\n(.+)$", re.M)


def lookup_questions(search) -> list:
    """Easy questions a search answers: the lead sentence of a search result with its title's
    words masked; the gold answer is the title."""
    from websailor.judge import Gold
    from websailor.questions import Question

    out = []
    for topic in ("volcano", "composer", "river delta", "empire capital", "painter", "island nation"):
        for title, snippet in RESULT.findall(search({"query": [topic]}))[:2]:
            masked = snippet.split(". ")[0]
            for word in title.split():
                masked = re.sub(rf"\b{re.escape(word)}\b", "___", masked)
            out.append(Question(f"lookup-{len(out)}", f'Which article begins: "{masked[:240]}"?', Gold.parse(title)))
    return out


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href and href.startswith("/") and not href.startswith("//"):
            self.hrefs.append(href)


def hrefs(html: str) -> list[str]:
    """The same-site absolute ``<a href>`` of a page, in order."""
    parser = _Hrefs()
    parser.feed(html)
    return parser.hrefs


def urls_to_shoot(get) -> list[str]:
    """The index, each run's page, and the first link of each run's page to its own URL with a
    query (a question, a step, an item); ``get(url)`` returns a page's HTML, or ``None`` when it
    is not there (a view not written yet: not shot)."""
    out = ["/"]
    for run in dict.fromkeys(h for h in hrefs(get("/") or "") if h != "/"):
        html = get(run)
        if html is None:
            print(f"skipped {run}: no page there")
            continue
        out.append(run)
        # two levels down its own URL: a question (and one rollout alone), a step (and a rollout), an item
        for level in range(2):
            deeper = [h for h in hrefs(html) if urlsplit(h).path == urlsplit(run).path and urlsplit(h).query]
            deeper = [h for h in deeper if h not in out and "page=" not in h and "outcome=" not in h]
            if level:  # from a question or a step: one rollout (not the next step)
                deeper.sort(key=lambda h: "rollout=" not in h)
            elif run.startswith("/qa/"):  # of the first items, the one with the largest subgraph
                first = deeper[:12]
                deeper = sorted(first, key=lambda h: -(get(h) or "").count("<circle")) + deeper[12:]
            if not deeper or (html := get(deeper[0])) is None:
                break
            out.append(deeper[0])
    evals = [h for h in out if h.startswith("/eval/") and not urlsplit(h).query]
    if len(evals) >= 2:  # the first two eval runs compared, and the first question that flipped
        a, b = (urlsplit(h).path.removeprefix("/eval/") for h in evals[:2])
        compare = f"/compare?a={a}&b={b}"
        if (html := get(compare)) is not None:
            out.append(compare)
            flipped = [h for h in hrefs(html) if h.startswith("/compare?") and "question=" in h]
            if flipped:
                out.append(flipped[0])
    return list(dict.fromkeys(out))


def slug(url: str) -> str:
    """``/eval/eval-search?question=x`` -> ``eval-eval-search-question-x`` (``index`` for ``/``)."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", url).strip("-")[:80] or "index"


def serve(root: Path):
    """The viewer over ``root`` in a thread: ``(base url, stop)``."""
    import uvicorn

    from websailor.server.app import bind_socket
    from websailor.view import create_view_app

    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_view_app(root), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
        sock.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def shoot(root: Path, out: Path) -> list[Path]:
    """Write ``out/<slug>.png`` for every URL of :func:`urls_to_shoot`; returns the files."""
    import httpx
    from playwright.sync_api import sync_playwright

    base, stop = serve(root)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        with httpx.Client(base_url=base, timeout=30) as client:

            def get(url: str) -> str | None:
                r = client.get(url)
                return r.text if r.status_code == 200 else None

            urls = urls_to_shoot(get)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            for url in urls:
                page.goto(base + url)
                page.wait_for_load_state("networkidle")
                path = out / f"{slug(url)}.png"
                page.screenshot(path=str(path), full_page="item=" in url)  # an item's graph and path run long
                written.append(path)
                print(f"{path} ({path.stat().st_size // 1024} KB): {url}")
            browser.close()
    finally:
        stop()
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, help="a folder of real runs (default: build a small set)")
    ap.add_argument("--keep-runs", type=Path, help="build the small set in this new folder and keep it")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots", help="where the PNGs go")
    args = ap.parse_args()
    if args.root is not None:
        shoot(args.root, args.out)
        return 0
    from websailor.corpus import Corpus
    from websailor.errors import WebsailorError

    try:
        Corpus.open(None)
    except WebsailorError as e:
        print(f"error: the small set is built over the embedded corpus: {e}", file=sys.stderr)
        return 2
    if args.keep_runs is not None and args.keep_runs.exists():
        print(f"error: --keep-runs {args.keep_runs} exists: name a new folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp) / "runs"
        root.mkdir(parents=True)
        t = time.perf_counter()
        build_runs(root)
        print(f"runs built in {time.perf_counter() - t:.1f} s under {root}")
        shoot(root, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
