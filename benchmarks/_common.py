"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

_CHILD = """
import json, resource, sys, time
from websailor.corpus import CorpusBuildConfig, build_corpus
cfg = json.loads(sys.argv[1])
t = time.perf_counter()
build_corpus(CorpusBuildConfig(**cfg))
print(json.dumps({"seconds": time.perf_counter() - t,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


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
