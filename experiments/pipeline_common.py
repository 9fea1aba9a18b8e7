"""What the experiment scripts share (``mini_pipeline.py``, ``grounded.py``,
``transfer_opening.py``): the vLLM server a stage samples on, the search baseline of the
hand-written questions, an evaluation's headline figures, the pages a rollout read, and
publishing a run's small outputs without this machine's paths."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
#: the `websailor` command of the interpreter that runs the script
WS = str(Path(sys.executable).with_name("websailor"))


def file_digest(path: str | Path) -> str | None:
    """The sha256 of the file at ``path`` (hex), ``None`` when it cannot be read."""
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def folder_path(text: str) -> Path:
    """``argparse`` type of a folder option: ``text`` as a path, an empty one refused (it
    would silently mean the current directory).

    Raises:
        argparse.ArgumentTypeError: ``text`` is empty or only spaces.
    """
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("give a folder, not an empty path")
    return Path(text)


#: the hand-written questions of the transfer check (stage ``transfer``)
VITAL_QUESTIONS = ROOT / "benchmarks" / "data" / "vital_questions.jsonl"


def model_dir(model: str) -> Path:
    """The transformers directory of ``smollm2``, ``hf:DIR`` or a directory."""
    if model == "smollm2":
        from websailor.models.embedded import ensure_smollm2

        return ensure_smollm2()
    return Path(model.removeprefix("hf:"))


@contextlib.contextmanager
def served(model: str, engine: str, logs: Path, label: str, max_model_len: int) -> Iterator[str]:
    """The model spec a stage's commands take: a vLLM server started for ``model`` and stopped
    after the stage (``engine == "vllm"``), or ``model`` itself for the local engine."""
    if engine != "vllm":
        yield model
        return
    from websailor.models.vllm_launch import VLLMServer

    logs.mkdir(parents=True, exist_ok=True)
    server = VLLMServer(
        model_dir(model), name=label, port=0, max_model_len=max_model_len, log_path=logs / f"{label}.log"
    )
    print(f"[{label}] starting a vLLM server for {model} (log {server.log_path})", flush=True)
    server.start()
    try:
        server.wait_ready(progress=True)
        print(f"[{label}] {server.spec} ready in {server.startup_s:.0f} s", flush=True)
        yield server.spec
    finally:
        server.stop()


def search_baseline(bench: Path, corpus: str | None = None) -> dict:
    """The transfer check's baseline: a BM25 search of each question's own text over the corpus,
    answering with the top result's title, graded by exact match (deterministic: one answer a
    question). Returns ``{"questions", "correct", "accuracy", "answers": [...]}``."""
    from websailor.corpus import Corpus
    from websailor.judge import load_judge
    from websailor.judge.base import Case
    from websailor.questions import load_questions

    items = load_questions(str(bench))
    corpus_ = Corpus.open(corpus)
    hits = corpus_.search([it.question for it in items], k=1)
    titles = [h[0].title if h else None for h in hits]
    grades = load_judge("em").grade([Case(it.question, t, it.gold) for it, t in zip(items, titles)])
    answers = [
        {"id": it.id, "question": it.question, "answer": str(it.gold.answer), "top_title": t, "correct": g.correct}
        for it, t, g in zip(items, titles, grades)
    ]
    right = sum(bool(a["correct"]) for a in answers)
    return {"questions": len(items), "correct": right, "accuracy": round(right / len(items), 4), "answers": answers}


#: the run's files that --publish copies (globs under OUT): small outputs, never a model
PUBLISHED = (
    "settings.json",
    "results.json",
    "results.md",
    "mini_pipeline.json",
    "qa_stats.txt",
    "compare_*.md",
    "dupo_stream.jsonl",
    "dupo_throughput.json",
    "transfer_baseline.json",
    "sft_model/sft_log.jsonl",
    "sft_model/sft_summary.json",
    "sft_model/sft_settings.json",
    "eval_*/summary.json",
    "eval_*/scores.jsonl",
    "eval_*/report.md",
    "eval_*/trajectories.jsonl",
    "transfer_*/summary.json",
    "transfer_*/scores.jsonl",
    "transfer_*/trajectories.jsonl",
    "*_model/rl_settings.json",
    "*_model/rl_summary.json",
    "*_model/rl_log.jsonl",
    "*_model/rollouts.jsonl",
    "*_model/*.png",
    "rl_sanity*/rl_settings.json",
    "rl_sanity*/rl_summary.json",
    "rl_sanity*/rl_log.jsonl",
    "rl_sanity*/rollouts.jsonl",
    "rl_sanity*/*.png",
    "sanity_qa.jsonl",
    "qa.jsonl",
)


#: the run's list of the checkouts that ran its stages (one path a line; :func:`note_checkout`)
CHECKOUTS = "checkouts.txt"


def note_checkout(out: Path) -> None:
    """Add this checkout's path to ``OUT/checkouts.txt`` (once), so that :func:`publish` strips
    it from the files of the stages it ran even when another checkout publishes the run (a run
    resumed from a checkout laid anew elsewhere records both paths). ``out`` must exist."""
    path = out / CHECKOUTS
    known = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if str(ROOT) not in known:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"{ROOT}\n")


def machine_paths(out: Path) -> list[tuple[bytes, bytes]]:
    """What :func:`publish` writes instead of this machine's paths: the run folder's (``OUT``,
    wherever it lives), the checkouts' (this one and those of ``OUT/checkouts.txt``: paths
    relative to them) and ``$WEBSAILOR_HOME``'s; longest first, so a run folder inside a checkout
    reads ``OUT``."""
    from websailor.config import websailor_home

    path = out / CHECKOUTS
    checkouts = {str(ROOT)} | set(path.read_text(encoding="utf-8").splitlines() if path.exists() else ())
    pairs = [
        (f"{out.resolve()}".encode(), b"OUT"),
        *((f"{c.rstrip('/')}/".encode(), b"") for c in checkouts if c.strip("/")),
        (f"{websailor_home().resolve()}".encode(), b"$WEBSAILOR_HOME"),
    ]
    return sorted(pairs, key=lambda p: -len(p[0]))


#: JSONL files of at least this many bytes are published packed (``NAME.gz``,
#: :mod:`websailor.packed`): the checkout must stay small enough to travel (a GPU machine here
#: takes a working tree of 64 MiB at most), and rollouts compress 8 to 12 times.
PACK_BYTES = 2_000_000


def publish(out: Path, dest: Path, patterns: tuple[str, ...] = PUBLISHED) -> int:
    """Copy the run's small outputs (``patterns``, globs under ``out``; :data:`PUBLISHED` for this
    pipeline) from ``out`` to ``dest`` (same relative
    paths; files of an earlier publish are replaced, packed or not); returns the bytes written.
    No path of the machine that ran the experiment is published (:func:`machine_paths`): the
    run folder reads ``OUT``, paths under the checkout (the configs in the settings) are relative
    to it. A JSONL file of :data:`PACK_BYTES` or more is written packed, as ``NAME.gz`` (the viewer
    and ``compare`` read it as it is)."""
    from websailor.packed import pack, packed_twin

    total = 0
    replace = machine_paths(out)
    for pattern in patterns:
        for src in sorted(out.glob(pattern)):
            if not src.is_file() or "checkpoint" in src.as_posix():
                continue
            target = dest / src.relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = src.read_bytes()
            if src.suffix != ".png":
                for old, new in replace:
                    data = data.replace(old, new)
            stale = target
            if src.suffix == ".jsonl" and len(data) >= PACK_BYTES:
                data, target = pack(data), packed_twin(target)
            else:
                stale = packed_twin(target)
            stale.unlink(missing_ok=True)  # the other form, from an earlier publish
            target.write_bytes(data)
            total += len(data)
    return total


def figures(eval_dir: Path) -> dict:
    """The headline figures of an evaluation, overall and by level, and its grounding (the share
    of answered rollouts whose answer was read before it was given, and the answer page's
    listed, visited and picked shares: :mod:`websailor.eval.grounding`)."""
    s = json.loads((eval_dir / "summary.json").read_text())
    keep = (
        "questions",
        "k",
        "trajectories",
        "ungraded",
        "format_validity",
        "avg_at_k",
        "avg_at_k_ci95",
        "pass_at_k",
        "mean_tool_calls",
        "terminations",
        "total_wall_s",
        "grounding",
    )
    out = {key: s.get(key) for key in keep}
    out["by_level"] = s.get("by_level") or {}
    return out


def read_pages(rollout: dict) -> dict[str, str]:
    """The pages a rollout's ``visit`` calls read: ``{url: title}``, the title read from the
    URL's last path segment (``.../wiki/Nicholas_I_of_Russia`` -> "Nicholas I of Russia")."""
    pages = {}
    for call in rollout.get("tool_calls") or []:
        url = (call.get("arguments") or {}).get("url") if call.get("name") == "visit" else None
        for u in [url] if isinstance(url, str) else url if isinstance(url, list) else []:
            if isinstance(u, str):
                pages[u] = unquote(u.rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")
    return pages
