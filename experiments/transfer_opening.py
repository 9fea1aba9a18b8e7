"""Transfer beyond our templates, before and after the question-text opening: two warm starts
of the embedded SmolLM2-135M on the same constructive trajectories, one opening with the first
clue only (``traj build --no-question-query``, the earlier opening) and one opening with a search
of the question's own text beside it (the default), each run on the 20 hand-written questions of
``benchmarks/data/vital_questions.jsonl`` that no template wrote, beside a baseline that searches
the question's text and answers with the top result's title.

The warm starts are those of ``benchmarks/rl_overfit.py`` (``--warm-items`` level-1 items of seed
7, compact observations, ``--warm-steps`` SFT steps of 2 at lr 1e-4), so a model that script
built can be reused (``--question-model hf:runs/rl_overfit/warm_model``). Besides Avg@k and
Pass@k, it counts where each rollout's first search comes from: the share of the first search's
words that the question holds (a model that learnt only the template's first move searches a
named entity, and invents one when the question names none).

    python experiments/transfer_opening.py --out runs/transfer_opening
    python experiments/transfer_opening.py --out runs/transfer_opening --publish experiments/results/transfer_opening

Everything resumes from ``--out``. Writes OUT/transfer_opening.json (and, with ``--publish``, the
figures, the items and each evaluation's summary, scores and rollouts to that folder; no model).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

from _common import claim_for_model, too_small, write_results  # noqa: E402
from pipeline_common import VITAL_QUESTIONS, WS, figures, note_checkout, publish, read_pages, search_baseline, served  # noqa: E402
from rl_overfit import items, warm_start  # noqa: E402

from websailor.models.vllm_launch import rollout_engine  # noqa: E402

#: the two openings compared: name -> traj build's question_query
OPENINGS = {"clue": False, "question": True}
#: words too common to tell where a query came from
_COMMON = frozenset(
    "the and for with which what who whose that this from into about was were is are of in on by".split()
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/transfer_opening"))
    p.add_argument("--question-model", help="a warm start of the question opening already built (hf:DIR)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--warm-items", type=int, default=80)
    p.add_argument("--warm-steps", type=int, default=40)
    p.add_argument("--k", type=int, default=4, help="rollouts per question")
    p.add_argument("--max-calls", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--engine", choices=("auto", "vllm", "local"), default="auto")
    p.add_argument("--publish", type=Path, help="copy the figures and the evaluations' small files here")
    return p.parse_args()


def check_args(a: argparse.Namespace) -> None:
    """Refuse, in one line and before any work, sizes out of range, an ``--out`` or
    ``--publish`` that is a file, and a ``--question-model`` that is not a model directory."""
    refusal = too_small(
        ("--k", a.k, 1),
        ("--warm-items", a.warm_items, 1),
        ("--warm-steps", a.warm_steps, 1),
        ("--max-calls", a.max_calls, 1),
        ("--max-tokens", a.max_tokens, 16),
    )
    if refusal:
        raise SystemExit(refusal)
    for flag, path in (("--out", a.out), ("--publish", a.publish)):
        if path is not None and path.exists() and not path.is_dir():
            raise SystemExit(f"{flag} {path} is a file; give a directory")
    if a.question_model is not None:
        folder = Path(a.question_model.removeprefix("hf:"))
        if not a.question_model.startswith("hf:") or not (folder / "config.json").is_file():
            raise SystemExit(f"--question-model {a.question_model}: give hf:DIR, DIR a model directory (config.json)")


def words(text: str) -> set[str]:
    """Lower-cased words of ``text`` that can tell a query's source (not the commonest)."""
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2 and w not in _COMMON}


def _queries(arguments: object) -> list[str]:
    """The query strings of a search call's arguments (a string or a list of them)."""
    query = arguments.get("query") if isinstance(arguments, dict) else None
    if isinstance(query, str):
        return [query]
    return [q for q in query if isinstance(q, str)] if isinstance(query, list) else []


def first_search_sources(rollouts: list[dict]) -> dict:
    """Where the first search of each rollout comes from, and what it led to: ``rollouts``,
    ``with_search`` (those that searched at all), ``question_word_share`` (mean share of the
    first search's words that the question holds, over those), ``from_question`` (those whose
    first search takes at least half its words from the question), ``answer_page_shown`` (those
    whose first search's results link the gold answer's page, ``/wiki/Title``, plain or
    percent-encoded) and ``answer_page_read`` (those that visited that page at any point)."""
    shares, shown, read = [], 0, 0
    for r in rollouts:
        calls = [c for c in r.get("tool_calls") or [] if isinstance(c, dict)]
        first = next((i for i, c in enumerate(calls) if c.get("name") == "search"), None)
        asked = words(" ".join(_queries(calls[first].get("arguments")))) if first is not None else set()
        if asked:
            shares.append(len(asked & words(str(r.get("question", "")))) / len(asked))
        gold = r.get("answer")
        if isinstance(gold, dict):
            gold = gold.get("answer")
        title = str(gold or "").strip().replace(" ", "_")
        if not title:
            continue
        pages = {f"/wiki/{title}", f"/wiki/{quote(title)}"}
        responses = [  # the tool responses, in call order (not the system prompt, not a format reminder)
            m
            for m in r.get("messages") or []
            if m.get("role") != "system" and str(m.get("content")).lstrip().startswith("<tool_response>")
        ]
        if first is not None and first < len(responses):
            shown += any(f"{page})" in str(responses[first].get("content")) for page in pages)
        read += any(unquote(u).rstrip("/").endswith(f"/wiki/{title}") for u in read_pages({"tool_calls": calls}))
    return {
        "rollouts": len(rollouts),
        "with_search": len(shares),
        "question_word_share": round(sum(shares) / len(shares), 4) if shares else None,
        "from_question": sum(s >= 0.5 for s in shares),
        "answer_page_shown": shown,
        "answer_page_read": read,
    }


def evaluate(model: str, name: str, out: Path, a: argparse.Namespace, engine: str) -> dict:
    """``websailor eval`` of ``model`` on the hand-written questions (no server is started for an
    evaluation that has finished); its figures."""
    eval_dir = out / f"eval_{name}"
    claim_for_model(eval_dir, model)
    done = json.loads((eval_dir / "summary.json").read_text()) if (eval_dir / "summary.json").exists() else {}
    finished = done.get("k") == a.k and not done.get("ungraded") and done.get("trajectories") == a.k * done["questions"]
    if not finished:
        with served(model, engine, out / "logs", f"transfer_{name}", 8192) as spec:
            bench = os.path.relpath(VITAL_QUESTIONS)  # no path of this machine in the published files
            args = ["eval", "--bench", bench, "--rollouts", str(a.k), "--model", spec]
            args += ["--max-calls", str(a.max_calls), "--max-tokens", str(a.max_tokens), "--observations", "compact"]
            args += ["--engine", "local"] if engine == "local" else []  # eval must not start a server either
            print(f"\n[eval_{name}] $ websailor {' '.join(args)} --out {eval_dir}", flush=True)
            subprocess.run([WS, *args, "--out", str(eval_dir)], check=True)
    rollouts = [json.loads(line) for line in (eval_dir / "trajectories.jsonl").read_text().splitlines() if line]
    return {**figures(eval_dir), "first_search": first_search_sources(rollouts)}


def main() -> int:
    from websailor.signals import interrupt_on_termination

    a = parse_args()
    check_args(a)
    interrupt_on_termination()  # a killed run stops the vLLM server of its stage
    a.pool = 1  # rl_overfit.items() also writes an RL pool; this script does not use it
    a.out.mkdir(parents=True, exist_ok=True)
    note_checkout(a.out)
    engine = rollout_engine(a.engine)
    warm_qa, _ = items(a.out, a)
    results = {"baseline": {k: v for k, v in search_baseline(VITAL_QUESTIONS).items() if k != "answers"}}
    for name, question_query in OPENINGS.items():
        model = a.question_model if name == "question" and a.question_model else None
        if model is None:
            print(f"\n[sft_{name}] warm start, {a.warm_steps} steps of 2, question_query={question_query}", flush=True)
            model = warm_start(a.out / name, warm_qa, a, question_query=question_query)
        results[name] = {"model": model, **evaluate(model, name, a.out, a, engine)}
    (a.out / "transfer_opening.json").write_text(json.dumps(results, indent=2))
    base = results["baseline"]
    print(f"\nsearch baseline: {base['correct']} of {base['questions']}")
    for name in OPENINGS:
        f, s = results[name], results[name]["first_search"]
        print(
            f"{name} opening: Avg@{a.k} {100 * f['avg_at_k']:.1f}, Pass@{a.k} {100 * f['pass_at_k']:.1f}, format "
            f"validity {100 * f['format_validity']:.1f}%; first search from the question in {s['from_question']} "
            f"of {s['with_search']} rollouts that searched (word share {s['question_word_share']}); the answer's page "
            f"listed by it in {s['answer_page_shown']}, read in {s['answer_page_read']} of {s['rollouts']}"
        )
    write_results("transfer_opening", results, a)
    if a.publish:
        written = publish(a.out, a.publish)  # the items, and each evaluation's summary, scores and rollouts
        shutil.copy2(a.out / "transfer_opening.json", a.publish / "transfer_opening.json")
        print(f"published {written / 1e6:.1f} MB to {a.publish}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
