"""Seconds of one RL update on a group of rollouts of different lengths, with the forward
passes over each micro-batch's own tokens (:func:`websailor.train.rl.trim.trimmed_logps`, in
:class:`websailor.train.rl.update.AgentGRPOTrainer`) against TRL's, which run every micro-batch at the whole batch's padded width.

The group is real multi-turn agent runs over the embedded corpus (a scripted model searches
and visits pages, then answers; :func:`train_memory.long_trajectories`), one per length of
``--lengths``. The default is one group of the ladder experiment's overfitting check (full-size
run, 2026-12-02, step 7): rollouts of 1,400 to 3,000 tokens, 16,150 in all, 23,904 at the
padded width. Half answer right,
so every rollout carries an advantage and enters the loss. Each variant runs in a fresh process
(``train_rl``, one step: V2, lr 3e-5, the precision ``auto`` measures, TRL's LM head in both so
that only the padding differs, no checkpointing); the figure is the update's ``time/update_s`` and
the ratio of the two::

    python benchmarks/rl_padding.py [--lengths 1400,1500,1700,1750,2000,2100,2700,3000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import vital_source, write_results  # noqa: E402
from train_memory import QUESTION, long_trajectories, measure  # noqa: E402


def main() -> None:
    """Time the update both ways, print the figures and the ratio, save them."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--lengths",
        default="1400,1500,1700,1750,2000,2100,2700,3000",
        help="tokens of each rollout of the group (comma-separated; the group size is their number)",
    )
    a = ap.parse_args()
    try:
        lengths = [int(x) for x in a.lengths.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--lengths {a.lengths!r}: give whole numbers of tokens, comma-separated") from None
    if len(lengths) < 2 or min(lengths) < 400:
        raise SystemExit(f"--lengths {a.lengths!r}: give at least two lengths, each of 400 tokens or more")
    from websailor.corpus import CorpusBuildConfig, build_corpus

    results: dict = {"lengths": lengths}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = build_corpus(
            CorpusBuildConfig(source=vital_source(), format="vital", out=tmp / "corpus", show_progress=False)
        )
        runs = long_trajectories(len(lengths), lengths, corpus)
        tokens = [r.pop("_tokens") for r in runs]
        real, padded = sum(tokens), len(tokens) * max(tokens)
        results |= {"rollout_tokens": tokens, "real_tokens": real, "padded_tokens": padded}
        print(f"rollouts: {tokens} tokens; {real:,} real, {padded:,} at the padded width")
        trajs = tmp / "rl.jsonl"
        trajs.write_text("".join(json.dumps(r) + "\n" for r in runs))
        qa = tmp / "qa.jsonl"
        qa.write_text(json.dumps({"id": "river", "question": QUESTION, "answer": "Seine"}) + "\n")
        for label, is_padded in (("padded", True), ("trimmed", False)):
            cfg = {
                "kind": "rl",
                "label": label,
                "padded": is_padded,
                "out": str(tmp / f"rl-{label}"),
                "settings": {"lm_head": "trl", "gradient_checkpointing": False, "memory_limits": False},
                "tokens": max(tokens),
                "trajs": str(trajs),
                "qa": str(qa),
                "corpus": str(corpus),
            }
            results[label] = measure(cfg)
            print(f"{label}: update {results[label]['step_s']:.1f} s, peak {results[label]['peak_mb']:,.0f} MB")
    results["speedup"] = results["padded"]["step_s"] / results["trimmed"]["step_s"]
    print(f"trimmed: {results['speedup']:.2f}x the speed of the padded update")
    write_results("rl_padding", results, a)


if __name__ == "__main__":
    main()
