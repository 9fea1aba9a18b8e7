"""The ladder experiment's settings (``mini_pipeline.py``): its options, the run folder's
layout, and which settings a resumed run must keep (a folder of another layout or of other
identity settings is refused in one line before any work)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _common import too_small  # noqa: E402
from pipeline_common import ROOT, file_digest, folder_path  # noqa: E402
from pipeline_status import STAGES  # noqa: E402

from websailor.tools.environment import OBSERVATION_PRESETS  # noqa: E402

DESCRIPTION = (
    "The base -> SFT -> RL experiment on two CPU cores: a difficulty ladder, constructive trajectories, SFT, "
    "the prefilter, an overfitting check, V2 and DUPO RL, and evaluations of every model on the held-out items."
)

#: the run directory's layout; directories of an earlier layout are refused (:data:`LAYOUT_CHANGES`)
LAYOUT = 5
#: what each layout changed (a run folder of an earlier one is refused, naming the change)
LAYOUT_CHANGES = {
    2: "trajectories that open with the question's own words, rollouts on vLLM, a prefilter at k = 8",
    3: "SFT and RL run folders that resume at step granularity (run format 2: an SFT step log, RL "
    "checkpoints after every step), the loss-position LM head and the measured precision",
    4: "questions that also describe their answer (--described-share, 0.5 by default) and grounded "
    "trajectories (every page opened has its reason in what was read before; checks that can reject)",
    5: "SFT on trajectories drawn from a pool with a share of lookups (--sft-items, --lookup-share; traj_pool.jsonl)",
}
#: what the first stage (synth) writes: until it exists, a run's settings bind nothing
FIRST_OUTPUT = "qa.jsonl"
#: the settings a resumed run must keep (the others, such as --until, may change)
IDENTITY = (
    "items",
    "levels",
    "test_fraction",
    "seed",
    "observations",
    "distractor_share",
    "described_share",
    "sft_config",
    "model",
    "k",
    "eval_limit",
    "max_calls",
    "max_tokens",
    "concurrency",
    "prefilter_limit",
    "prefilter_k",
    "prefilter_sampler",
    "question_query",
    "sft_items",
    "lookup_share",
    "sanity_items",
    "sanity_group_size",
    "sanity_lr",
    "group_size",
    "rl_lr",
    "rl_config",
    "rl_groups",
)
#: identity settings added to this layout after runs of it began, with the value those runs had
#: (a settings.json without one is read with it)
ADDED = {"prefilter_sampler": "eval"}
#: settings that name a config file: its contents are the setting (``KEY_sha256`` in the run's
#: settings), so the same file under another path, as in a checkout laid anew elsewhere, is the
#: same setting, and an edited file at the same path is not
CONFIG_FILES = ("sft_config", "rl_config")
#: identity settings that only later stages read, and what those stages write: such a setting may
#: change while none of it exists (a learning rate chosen after the overfitting check, say)
READ_LATER = {
    "prefilter_sampler": ("eval_sft_train",),
    "sanity_items": ("sanity_qa.jsonl", "rl_sanity"),
    "sanity_group_size": ("rl_sanity",),
    "sanity_lr": ("rl_sanity",),
    "group_size": ("rl_model", "dupo_model", "dupo_stream.jsonl"),
    "rl_lr": ("rl_model", "dupo_model"),
    "rl_groups": ("rl_model", "dupo_model"),
    "rl_config": ("rl_sanity", "rl_model", "dupo_model"),
}


def build_parser() -> argparse.ArgumentParser:
    """The script's options (``status`` has its own: :mod:`pipeline_status`)."""
    p = argparse.ArgumentParser(
        description=DESCRIPTION,
        epilog="`python experiments/mini_pipeline.py status --out DIR` prints where a run stands, the time left "
        "and the command that continues it.",
    )
    p.add_argument("--out", type=folder_path, default=Path("runs/ladder"))
    p.add_argument("--items", type=int, default=600, help="items to synthesize (train + test)")
    p.add_argument("--levels", default="1-2", help="difficulty levels of the ladder (synth --level)")
    p.add_argument("--test-fraction", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--observations",
        choices=tuple(OBSERVATION_PRESETS),
        default="compact",
        help="observation setting of SFT data, RL and eval",
    )
    p.add_argument("--distractor-share", type=float, default=0.3)
    p.add_argument(
        "--described-share",
        type=float,
        default=0.5,
        help="share of items whose question also states the answer's own description (synth --described-share)",
    )
    p.add_argument(
        "--question-query",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="constructive trajectories open with a search of the question's own text (traj build --question-query)",
    )
    p.add_argument(
        "--sft-items",
        type=int,
        default=0,
        help="trajectories SFT trains on, drawn from the training items' pool (default 0: all of them, and "
        "--lookup-share is unused; grounded.py's recipe: 100)",
    )
    p.add_argument(
        "--lookup-share",
        type=float,
        default=0.5,
        help="share of the SFT trajectories whose question search lists the answer (traj select; default 0.5)",
    )
    p.add_argument("--sft-config", type=Path, default=ROOT / "configs" / "sft" / "cpu_ladder.yaml")
    p.add_argument("--model", default="smollm2", help="the base model")
    p.add_argument("--engine", choices=("auto", "vllm", "local"), default="auto", help="where rollouts are sampled")
    p.add_argument("--max-model-len", type=int, default=8192, help="the vLLM server's context (tokens)")
    p.add_argument("--k", type=int, default=4, help="rollouts per test item")
    p.add_argument("--eval-limit", type=int, default=60, help="test items evaluated")
    p.add_argument("--max-calls", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prefilter-limit", type=int, default=48, help="training items the SFT model is rated on")
    p.add_argument("--prefilter-k", type=int, default=8, help="rollouts per training item of the prefilter")
    p.add_argument(
        "--prefilter-sampler",
        choices=("eval", "rl"),
        default="rl",
        help="how the prefilter samples: rl (the default), the RL runs' own (--rl-config's temperature and "
        "top-p, no presence penalty), so the moderate band is rated as RL will sample; or eval, the paper's "
        "evaluation sampler (temperature 0.85, top-p 0.95, presence penalty 1.1; every run before this option, "
        "and the default until 2026-12-06)",
    )
    p.add_argument("--sanity-items", type=int, default=8, help="moderate items of the overfitting check (at most)")
    p.add_argument("--sanity-steps", type=int, default=16)
    p.add_argument("--sanity-group-size", type=int, default=8, help="rollouts per group (and per step) of the check")
    p.add_argument(
        "--sanity-lr",
        type=float,
        default=3e-5,
        help="learning rate of the check (1e-5 moved too little: experiments.md)",
    )
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument(
        "--rl-lr", type=float, default=3e-5, help="learning rate of V2 and DUPO (the check's: experiments.md)"
    )
    p.add_argument("--rl-config", type=Path, default=ROOT / "configs" / "rl" / "cpu_ladder.yaml")
    p.add_argument("--rl-steps", type=int, default=40, help="RL steps of the main run (V2, and DUPO)")
    p.add_argument(
        "--rl-groups",
        type=int,
        default=2,
        help="groups (items) a step of V2 and DUPO: a batch of --rl-groups x --group-size rollouts",
    )
    p.add_argument("--throughput-groups", type=int, default=4, help="groups per batch of the DUPO throughput stage")
    p.add_argument("--throughput-max-groups", type=int, default=24, help="most groups the throughput stage samples")
    p.add_argument("--until", choices=STAGES, default=STAGES[-1], help="stop after this stage")
    p.add_argument("--only", help="run only these stages (comma-separated; their inputs must exist)")
    p.add_argument("--publish", type=folder_path, help="copy the run's small outputs to this folder at the end")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's options, every one a later stage reads checked before any work: a size below
    its least (a group below 2 rollouts has no baseline), a share outside [0, 1], a test fraction
    outside (0, 1), a learning rate that is not a positive number, levels that ``synth`` would
    refuse, a config file that is missing or that its stage would refuse, and an ``--out`` or
    ``--publish`` that cannot be a folder are refused in one line."""
    a = build_parser().parse_args(argv)
    sizes = ("items", "k", "eval_limit", "max_calls", "concurrency", "prefilter_limit", "prefilter_k")
    sizes += ("sanity_items", "sanity_steps", "rl_steps", "max_model_len")
    sizes += ("throughput_groups", "throughput_max_groups", "rl_groups")
    refusal = too_small(*((f"--{k.replace('_', '-')}", getattr(a, k), 1) for k in sizes))
    refusal = refusal or too_small(("--group-size", a.group_size, 2), ("--sanity-group-size", a.sanity_group_size, 2))
    refusal = refusal or too_small(("--max-tokens", a.max_tokens, 16), ("--sft-items", a.sft_items, 0))
    if refusal:
        raise SystemExit(refusal)
    if not 0.0 < a.test_fraction < 1.0:
        raise SystemExit(
            f"--test-fraction must be in (0, 1): the test split is what the models are compared on; got {a.test_fraction}"
        )
    shares = (("--distractor-share", a.distractor_share), ("--described-share", a.described_share))
    for flag, share in (*shares, ("--lookup-share", a.lookup_share)):
        if not 0.0 <= share <= 1.0:
            raise SystemExit(f"{flag} must be in [0, 1], got {share}")
    for flag, lr in (("--sanity-lr", a.sanity_lr), ("--rl-lr", a.rl_lr)):
        if not (math.isfinite(lr) and lr > 0):
            raise SystemExit(f"{flag} must be a positive number, got {lr}")
    from websailor.synth.dataset import parse_levels

    try:
        parse_levels(a.levels)
    except ValueError as e:
        raise SystemExit(str(e).replace("--level ", "--levels ")) from None
    _check_configs(a)
    for flag, folder in (("--out", a.out), ("--publish", a.publish)):
        if folder is not None:
            _check_folder(flag, folder)
    if a.publish is not None and a.publish.resolve() == a.out.resolve():
        raise SystemExit(f"--publish {a.publish} is the run folder itself: give another folder")
    return a


def _check_configs(a: argparse.Namespace) -> None:
    """Refuse, in one line, an ``--sft-config`` or ``--rl-config`` that is not a readable file
    or that ``train sft`` / ``train rl`` would refuse (so a bad RL config fails now, not hours
    later at the prefilter)."""
    from websailor.errors import ConfigError
    from websailor.train.rl import load_settings as rl_settings
    from websailor.train.sft import load_settings as sft_settings

    for flag, path, load in (("--sft-config", a.sft_config, sft_settings), ("--rl-config", a.rl_config, rl_settings)):
        if not path.is_file():
            raise SystemExit(f"{flag} {path}: no such file")
        try:
            load(path)
        except ConfigError as e:
            raise SystemExit(f"{flag} {path} is refused: {e}") from None


def _check_folder(flag: str, folder: Path) -> None:
    """Refuse, in one line, a ``folder`` that is a file or lies under one, or whose nearest
    existing folder takes no file (probed with a temporary file, so that a read-only or
    immutable folder is refused now, not after hours of stages)."""
    import tempfile

    for path in (folder, *folder.parents):
        if path.exists():
            if not path.is_dir():
                where = "is a file" if path == folder else f"lies under {path}, a file"
                raise SystemExit(f"{flag} {folder} {where}; give a folder")
            try:
                with tempfile.TemporaryFile(dir=path):
                    pass
            except OSError as e:
                where = "" if path == folder else f" (its nearest existing folder {path})"
                raise SystemExit(f"{flag} {folder}{where} cannot be written: {e.strerror or e}") from None
            return


def option_text(key: str, value: object) -> str:
    """How ``--key value`` reads on the command line (a flag for a boolean)."""
    flag = key.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"


def layout_difference(layout: object) -> str:
    """What a run folder of ``layout`` is, against this script's :data:`LAYOUT`, in words."""
    if isinstance(layout, int) and not isinstance(layout, bool) and layout < LAYOUT:
        since = "; ".join(LAYOUT_CHANGES[n] for n in range(layout + 1, LAYOUT + 1) if n in LAYOUT_CHANGES)
        return f"an earlier version of this script (layout {layout}, now {LAYOUT}: since then {since})"
    return f"an unknown layout ({layout!r}; this script writes layout {LAYOUT})"


def with_config_digests(settings: dict) -> dict:
    """``settings`` with ``KEY_sha256`` of each config file of :data:`CONFIG_FILES` (``None``
    for a file that cannot be read)."""
    return settings | {f"{key}_sha256": file_digest(settings[key]) for key in CONFIG_FILES if key in settings}


def _same(key: str, saved: dict, settings: dict) -> bool:
    """Whether ``key`` has the same value in the saved and the new settings: a config file's by
    its contents where both runs recorded them (settings saved before the digests: by path)."""
    digest = f"{key}_sha256"
    if key in CONFIG_FILES and saved.get(digest) and settings.get(digest):
        return saved[digest] == settings[digest]
    return saved[key] == settings[key]


def _difference(key: str, saved: dict, settings: dict) -> str:
    """How ``key`` changed, in words (a config file at the same path: its contents changed; the
    same text of another JSON type, such as ``"400"`` for 400: the saved value as written)."""
    was, now = option_text(key, saved[key]), option_text(key, settings[key])
    text = f"{was} (now {now}"
    if was == now and type(saved[key]) is not type(settings[key]):  # same text, another JSON type
        text += f", saved as {json.dumps(saved[key])}: was settings.json edited by hand?"
    if key in CONFIG_FILES and saved[key] == settings[key]:
        digest = f"{key}_sha256"
        text += f", its contents changed: sha256 {str(saved.get(digest))[:12]}, now {str(settings.get(digest))[:12]}"
    return text + ")"


def read_by(key: str, saved: dict) -> tuple[str, ...]:
    """What the stages that read the later setting ``key`` write (:data:`READ_LATER`); the RL
    config is also read by a prefilter that samples at RL's sampler (``--prefilter-sampler rl``)."""
    made = READ_LATER[key]
    if key == "rl_config" and saved.get("prefilter_sampler") == "rl":
        made = (*made, "eval_sft_train")
    return made


def check_settings(out: Path, settings: dict) -> None:
    """Refuse, in one line, an ``--out`` that is a file, a run directory whose ``settings.json``
    cannot be read, one of another layout, or one with other identity settings once the first
    stage has written (:data:`FIRST_OUTPUT`: a first stage that failed on a bad setting leaves
    nothing to keep, so the corrected command runs; :data:`IDENTITY`;
    those of :data:`READ_LATER` only once a stage that reads them has written something; a
    config file of :data:`CONFIG_FILES` by its contents; a setting of :data:`ADDED` missing from
    the saved settings has the value the run had)."""
    _check_folder("--out", out)
    saved_path = out / "settings.json"
    if not saved_path.exists():
        return
    try:
        saved = json.loads(saved_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{saved_path} cannot be read ({type(e).__name__}: {e}); use another --out") from None
    if not isinstance(saved, dict):
        kind = "null" if saved is None else type(saved).__name__
        raise SystemExit(f"{saved_path} is a JSON {kind}, not the settings object; use another --out")
    layout = saved.get("layout", 1)
    if layout != LAYOUT:
        raise SystemExit(
            f"{out} holds a run of {layout_difference(layout)}; start it again under another --out (or delete it)"
        )
    if not (out / FIRST_OUTPUT).exists():
        return  # no stage has written anything: nothing depends on the saved settings yet
    saved = ADDED | saved
    changed = [
        key
        for key in IDENTITY
        if key in saved
        and not _same(key, saved, settings)
        and (key not in READ_LATER or any((out / made).exists() for made in read_by(key, saved)))
    ]
    if changed:
        raise SystemExit(
            f"{out} holds a run with other settings: "
            + ", ".join(_difference(key, saved, settings) for key in changed)
            + "; use the same settings to resume it, or another --out"
        )
