"""Finding the runs under a folder, and keeping URL paths inside it.

A run is one of:

- ``eval``: a folder with ``trajectories.jsonl`` and ``scores.jsonl``, ``summary.json``,
  ``race.jsonl`` or ``fact.jsonl`` (a report evaluation, ``eval --task report``: its RACE and
  FACT records are read beside the trajectories, :mod:`websailor.view.report_views`), or with a
  ``trajectories.jsonl`` alone whose first record carries the gold record ``eval`` writes
  (``answer: {"answer", "aliases", ...}``): an evaluation still running its rollouts;
- ``rl``: a folder with ``rl_log.jsonl`` or ``rollouts.jsonl`` (``websailor train rl``);
- ``sft``: a folder with ``sft_summary.json`` or ``sft_settings.json`` (``websailor train sft``);
- ``trajectories``: a JSONL file whose first record is a trajectory (``run``, ``traj build``);
- ``qa``: a JSONL file whose first record is a synthesized item (``synth``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from websailor.errors import InvalidArgumentError
from websailor.packed import exists, packed_twin, unpacked

#: Files that make a folder with a ``trajectories.jsonl`` an eval run.
EVAL_FILES = ("scores.jsonl", "summary.json", "race.jsonl", "fact.jsonl")
#: Folders never searched for runs (checkpoints hold no run files of their own).
SKIPPED = frozenset({".git", ".venv", "__pycache__", "checkpoints", "tensorboard", "node_modules"})
#: Most folders walked under the root (a home directory must not hang the index).
MAX_FOLDERS = 5000


@dataclass(frozen=True)
class RunEntry:
    """One run found under the root: ``kind`` (``eval``, ``rl``, ``sft``, ``trajectories``,
    ``qa``), ``rel`` (its path relative to the root, POSIX form, ``"."`` for the root itself),
    ``bytes`` (its files' size) and ``mtime`` (seconds since the epoch, its newest file)."""

    kind: str
    rel: str
    bytes: int
    mtime: float


def resolve(root: Path, rel: str) -> Path:
    """``root / rel``, refused unless it stays inside ``root``: no absolute path, no ``..``, no
    symbolic link that leads out.

    Raises:
        InvalidArgumentError: the path leaves the root (the message names it).
    """
    if rel in ("", "."):
        return root.resolve()
    if rel.startswith(("/", "\\")) or os.path.isabs(rel) or "\x00" in rel:
        raise InvalidArgumentError(f"{rel!r} is not a path inside the viewed folder")
    parts = Path(rel).parts
    if len(rel) > 4096 or any(len(p.encode("utf-8", "surrogatepass")) > 255 for p in parts):
        raise InvalidArgumentError(f"{rel[:200]!r}...: a path too long for the file system")
    if any(p == ".." for p in parts):
        raise InvalidArgumentError(f"{rel!r} leaves the viewed folder")
    real_root = root.resolve()
    try:
        target = (real_root / rel).resolve()
    except (OSError, RuntimeError) as e:  # a symbolic link loop, a name too long for the file system
        raise InvalidArgumentError(f"{rel[:200]!r} cannot be opened ({type(e).__name__})") from None
    if target != real_root and real_root not in target.parents:
        raise InvalidArgumentError(f"{rel!r} leads out of the viewed folder (a symbolic link?)")
    return target


def run_file(run: Path, name: str) -> Path:
    """``run / name``, a file of the run folder ``run`` (a path :func:`resolve` returned; a
    published run's packed ``name.gz`` is read through its plain copy, :mod:`websailor.packed`),
    refused when it is a symbolic link that leads out of the folder: a run someone sent must not
    read (and show, and export) another file of this machine.

    Raises:
        InvalidArgumentError: the file leads out of the run folder (the message names it).
    """
    path = run / name
    packed = not path.is_file() and packed_twin(path).is_file()
    try:
        target = (packed_twin(path) if packed else path).resolve()
    except (OSError, RuntimeError):
        raise InvalidArgumentError(f"{run.name}/{name} cannot be opened (a symbolic link loop?)") from None
    if run.resolve() not in target.parents:
        raise InvalidArgumentError(f"{run.name}/{name} is a symbolic link out of its run folder: it is not read")
    return unpacked(path) if packed else path


def _utf8(name: str) -> bool:
    """Whether a file name decodes as UTF-8 (one that does not cannot be put in a URL)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _first_record(path: Path) -> dict | None:
    if not path.is_file():  # a named pipe or a device would block the open
        return None
    try:
        with path.open("rb") as fh:
            line = fh.readline(1 << 20)
        rec = json.loads(line)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def file_kind(path: Path) -> str | None:
    """``trajectories``, ``qa`` or ``None`` for a JSONL file, from its first record."""
    return file_kind_of(_first_record(path)) if path.suffix == ".jsonl" else None


def file_kind_of(rec: dict | None) -> str | None:
    """``trajectories``, ``qa`` or ``None`` for the first record of a JSONL file."""
    if rec is None:
        return None
    if "messages" in rec and "termination" in rec:
        return "trajectories"
    if "question" in rec and ("subgraph" in rec or "split" in rec):
        return "qa"
    return None


def _eval_record(rec: dict | None) -> bool:
    """Whether ``rec`` is a trajectory written by ``eval`` (its gold record travels with it)."""
    answer = rec.get("answer") if rec else None
    return file_kind_of(rec) == "trajectories" and isinstance(answer, dict) and "aliases" in answer


def not_a_run(path: Path) -> str | None:
    """Why the file ``path`` is not a run (one line naming it), or ``None`` when it is one."""
    if file_kind(path):
        return None
    lead = f"{path.name} is not a run:"
    if path.suffix != ".jsonl":
        return f"{lead} a file must be a trajectories or synthesized QA JSONL (.jsonl); a run folder also works"
    try:
        with path.open("rb") as fh:
            first = fh.readline(1 << 20)
    except OSError as e:
        return f"{lead} it cannot be read ({e.strerror or type(e).__name__})"
    if not first.strip():
        return f"{lead} its first line is empty (a run not started yet?)"
    rec = _first_record(path)
    if rec is None:
        return f"{lead} its first line is not a JSON object"
    return (
        f"{lead} its first record is neither a trajectory (messages, termination) nor a synthesized item "
        f"(question with subgraph or split); it has {', '.join(sorted(map(str, rec))[:8]) or 'no fields'}"
    )


def folder_kind(path: Path) -> str | None:
    """``eval``, ``rl``, ``sft`` or ``None`` for a folder, from the files it holds."""
    traj = path / "trajectories.jsonl"
    if exists(traj) and (
        any(exists(path / name) for name in EVAL_FILES) or _eval_record(_first_record(unpacked(traj)))
    ):
        return "eval"
    if (path / "rl_log.jsonl").is_file() or (exists(path / "rollouts.jsonl") and (path / "rl_settings.json").is_file()):
        return "rl"
    if (path / "sft_summary.json").is_file() or (path / "sft_settings.json").is_file():
        return "sft"
    return None


#: Files of a run folder left out of its size: the model a training run saved beside its logs.
WEIGHT_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".gguf"})


def _size(path: Path) -> tuple[int, float]:
    """``(bytes, newest mtime)`` of a run file, or of a run folder's own files, model weights
    (:data:`WEIGHT_SUFFIXES`) left out."""
    if path.is_file():
        files = [path]
    else:
        files = [p for p in path.iterdir() if p.is_file() and p.suffix not in WEIGHT_SUFFIXES]
    stats = [f.stat() for f in files]
    return sum(s.st_size for s in stats), max((s.st_mtime for s in stats), default=0.0)


def find_runs(root: Path) -> list[RunEntry]:
    """Every run under ``root`` (``root`` itself included), sorted by path. Folders in
    :data:`SKIPPED`, hidden ones and symbolic links are not entered; files inside a run folder
    are part of that run, not runs of their own.

    Raises:
        InvalidArgumentError: ``root`` does not exist.
    """
    root = Path(root)
    if not root.exists():
        raise InvalidArgumentError(f"{root} does not exist")
    real = root.resolve()
    if real.is_file():
        kind = file_kind(real)
        return [RunEntry(kind, ".", *_size(real))] if kind else []
    out: list[RunEntry] = []
    walked = 0
    for folder, dirs, files in os.walk(real, followlinks=False):
        walked += 1
        here = Path(folder)
        rel = here.relative_to(real).as_posix()
        kind = folder_kind(here)
        if kind:
            out.append(RunEntry(kind, rel, *_size(here)))
            dirs[:] = []
            continue
        dirs[:] = sorted(
            d for d in dirs if d not in SKIPPED and not d.startswith(".") and _utf8(d) and not (here / d).is_symlink()
        )
        for name in sorted(files):
            p = here / name
            if p.is_symlink() or not _utf8(name) or not p.is_file():
                continue
            kind = file_kind(p)
            if kind:
                out.append(RunEntry(kind, p.relative_to(real).as_posix(), *_size(p)))
        if walked >= MAX_FOLDERS:
            break
    return sorted(out, key=lambda e: e.rel)
