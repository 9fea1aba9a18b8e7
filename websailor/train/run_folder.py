"""A training run's folder and how a rerun of the same command picks it up.

SFT and RL runs write the same layout: a settings file that is the run's identity (its
settings, data digest and the run format of the code that wrote it), ``checkpoints/checkpoint-N``
(model, optimizer, scheduler, random states and the trainer's position in the data, saved every
``save_steps`` optimizer steps, the last ``keep_checkpoints`` kept), a step log appended as
steps finish, and a summary that marks the run finished.

A rerun with the same settings resumes from the newest checkpoint that is whole; one that was
cut short (a kill during a save) or damaged (a truncated or unreadable file) is moved aside,
with a warning naming what is wrong, and never loaded. The step log is cut back to that
checkpoint's step, so a resumed run writes each step's line exactly once. A folder of another
run, of another version of this layout, or with other settings is refused, naming what differs.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

from websailor.errors import ConfigError
from websailor.log import get_logger

logger = get_logger(__name__)

#: the layout of SFT and RL run folders this code writes and resumes; runs recorded without it
#: (format 1) kept no step log of SFT and checkpointed RL every 10 steps
RUN_FORMAT = 2
#: the key under which a run's settings file records it
FORMAT_KEY = "run_format"


def check_resume(
    out: Path, record: dict, settings_file: str, summary_file: str, kind: str, ignore: tuple[str, ...] = ()
) -> Path | None:
    """The checkpoint to resume from when ``out`` holds this very run (``None``: start); the
    run is identified by ``record`` (which carries :data:`FORMAT_KEY`) less the ``ignore`` keys
    (settings that may change between a run and its continuation), saved in ``settings_file``;
    ``summary_file`` marks a finished run.

    A directory of another run is refused, unless that run never saved a checkpoint or a
    model (it failed before training: nothing is lost by starting over).

    Raises:
        ConfigError: ``out`` holds other files, a run of another run format (another version
            of the code), or a run with other settings or data (the message names them).
    """
    saved = out / settings_file
    if not saved.exists():
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"--out {out} is not empty and holds no {kind} run: choose a new directory")
        return None
    try:
        before = json.loads(saved.read_text(encoding="utf-8"))
    except ValueError:
        raise ConfigError(f"{saved} is unreadable: remove {out} to start over") from None
    if not isinstance(before, dict):
        raise ConfigError(f"{saved} is unreadable: remove {out} to start over")
    started = (out / summary_file).exists() or bool(checkpoints(out / "checkpoints"))
    if started and before.get(FORMAT_KEY, 1) != record.get(FORMAT_KEY, 1):
        raise ConfigError(
            f"--out {out} holds an {kind} run written by another version of websailor (run format "
            f"{before.get(FORMAT_KEY, 1)!r}, this version writes {record.get(FORMAT_KEY, 1)!r}): it cannot be resumed; "
            "choose a new directory (the finished model in it, if any, is still a model for --model hf:DIR)"
        )
    before = {k: v for k, v in before.items() if k not in ignore}
    record = {k: v for k, v in record.items() if k not in ignore}
    if before != record:
        if not started:
            logger.info("%s holds the settings of a run that never trained: starting over", out)
            return None
        changed = sorted(k for k in set(before) | set(record) if before.get(k) != record.get(k))
        raise ConfigError(
            f"--out {out} holds an {kind} run with other {', '.join(changed)}: "
            "rerun with the same settings to resume, or choose a new directory"
        )
    return latest_checkpoint(out / "checkpoints")


def checkpoints(folder: Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``folder``, oldest first."""
    return sorted(
        (p for p in folder.glob("checkpoint-*") if p.is_dir() and p.name.rpartition("-")[2].isdigit()),
        key=lambda p: int(p.name.rpartition("-")[2]),
    )


def checkpoint_step(path: Path) -> int:
    """The optimizer steps a ``checkpoint-N`` folder holds (``N``)."""
    return int(Path(path).name.rpartition("-")[2])


#: the files that hold a checkpoint's weights, one of which must be there (full model or LoRA
#: adapter, whole or sharded)
WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
#: what a resumed run needs besides the weights (the trainer's own files; DeepSpeed keeps its
#: optimizer state in ``global_stepN/`` instead)
TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt")


def checkpoint_problem(path: Path) -> str | None:
    """What is wrong with checkpoint ``path`` (``None``: it is whole). The trainer writes
    ``trainer_state.json`` last, so a checkpoint without it was cut short; the weights
    (:data:`WEIGHT_FILES`) and the optimizer and scheduler states (:data:`TRAINING_STATE_FILES`)
    must be there; every safetensors file must hold the bytes its header declares, every torch
    file (a zip archive) must read back with matching checksums, every JSON file must parse, and
    the trainer state must have its step."""
    path = Path(path)
    if not (path / "trainer_state.json").is_file():
        return "no trainer_state.json (a save was interrupted)"
    if not any((path / w).is_file() for w in WEIGHT_FILES):
        return "no model weights (" + ", ".join(WEIGHT_FILES[:2]) + ")"
    deepspeed = any(d.is_dir() and d.name.startswith("global_step") for d in path.iterdir())
    for name in () if deepspeed else TRAINING_STATE_FILES:  # DeepSpeed keeps them in global_stepN/
        if not (path / name).is_file():
            return f"no {name} (the optimizer's state would be lost)"
    for f in sorted(path.iterdir()):
        if not f.is_file():
            continue
        try:
            if f.suffix == ".safetensors":
                problem = _safetensors_problem(f)
            elif f.suffix in (".pt", ".pth", ".bin"):
                problem = _torch_file_problem(f)
            elif f.name == "trainer_state.json":
                state = json.loads(f.read_text(encoding="utf-8"))
                ok = isinstance(state, dict) and type(state.get("global_step")) is int
                problem = None if ok else "not a trainer state (no integer global_step)"
            elif f.suffix == ".json":
                json.loads(f.read_text(encoding="utf-8"))
                problem = None
            else:
                problem = None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            problem = f"unreadable ({type(e).__name__}: {e})"
        if problem:
            return f"{f.name}: {problem}"
    return None


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return "shorter than a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"its header claims {n} bytes, the file has {size}"
        header = json.loads(fh.read(n))
    if not isinstance(header, dict):
        return "its header is not a safetensors header"
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    need = 8 + n + max(ends, default=0)
    return None if size >= need else f"cut short: {size} of {need} bytes"


def _torch_file_problem(path: Path) -> str | None:
    if not zipfile.is_zipfile(path):
        return "not a whole torch archive (cut short?)"
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
    return None if bad is None else f"member {bad} fails its checksum"


def checkpoint_is_final(path: Path) -> bool:
    """Whether checkpoint ``path`` was saved at its run's last step (``global_step`` reached the
    ``max_steps`` its ``trainer_state.json`` records): a run killed after it and before its
    model was written is finished from it, not trained a step further (transformers' trainer,
    resumed at its last step, trains one more)."""
    try:
        state = json.loads((Path(path) / "trainer_state.json").read_text(encoding="utf-8"))
        return 0 < int(state["max_steps"]) <= int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest whole ``checkpoint-N`` in ``folder`` (:func:`checkpoint_problem`). Newer ones
    that are cut short or damaged are moved aside to ``damaged-checkpoint-N`` (replacing any
    damaged one kept before: one is kept to look at), with a warning, and never loaded; the run
    resumes from the one before."""
    found = checkpoints(folder)
    while found:
        problem = checkpoint_problem(found[-1])
        if problem is None:
            return found[-1]
        broken = found.pop()
        aside = broken.with_name(f"damaged-{broken.name}")
        for old in broken.parent.glob("damaged-checkpoint-*"):  # one kept for a look, not a disk's worth
            shutil.rmtree(old, ignore_errors=True)
        try:
            broken.rename(aside)
        except OSError:
            shutil.rmtree(broken, ignore_errors=True)
            aside = None
        logger.warning(
            "%s is damaged (%s): %s; resuming from %s",
            broken,
            problem,
            f"moved aside to {aside.name}" if aside else "removed",
            found[-1].name if found else "the start",
        )
    return None


def trim_jsonl(path: Path, max_step: int) -> None:
    """Drop the records of steps after ``max_step`` (a resumed run repeats those steps) and an
    unfinished last line of a killed run (with a warning), streaming the file
    (:class:`websailor.jsonio.JsonlStream`); blank lines go too. The file is replaced (a new
    file moved over it) only when something is dropped or its last line lacks its newline.

    Raises:
        InputFormatError: a complete line that is not a JSON object: refused, and the file left
            as it is, rather than dropped unseen.
    """
    from websailor.jsonio import JsonlStream, parse_line

    if not path.exists():
        return
    stream = JsonlStream(path, f"a record of {path.name}")
    tmp = path.with_name(f".{path.name}.trim-{os.getpid()}")
    changed = False
    try:
        with tmp.open("wb") as out:
            for _, lineno, raw in stream.lines():
                step = parse_line(path, lineno, raw, f"a record of {path.name}").get("step", 0) if raw.strip() else None
                if step is None or (isinstance(step, int) and step > max_step):
                    changed = True
                    continue
                changed = changed or not raw.endswith(b"\n")
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
        if stream.unfinished is not None:
            logger.warning("%s", stream.unfinished)
            changed = True
        if changed:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
