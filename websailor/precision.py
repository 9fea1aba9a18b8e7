"""bf16 or fp32, chosen by measuring this machine rather than reading its CPU flags: the
precision training runs in, and the dtype of the vLLM servers websailor starts
(:func:`websailor.models.vllm_launch.serving_dtype`).

``precision: auto`` means bf16 autocast where it is faster than fp32, fp32 elsewhere. On a GPU
with bf16 support that is bf16. On a CPU it cannot be read off ``/proc/cpuinfo``: bf16 matrix
products ran 8.5 times fp32 on a Xeon with AMX, 2.6 to 3.9 times on an AMD EPYC with AVX-512
BF16, 0.6 to 0.7 times on a Xeon with AVX-512 BF16 and FP16 but no AMX, and 0.25 to 0.3 times on
a Xeon without bf16 instructions (torch 2.13; docs/benchmarks.md, "Precision"). So ``auto``
times the model's own matrix shapes in both precisions, about a second, and keeps the faster;
the result is cached per machine (CPU model, core count, torch version, shapes) in
``$WEBSAILOR_HOME/precision.json``, so later runs do not measure again.

Weights and optimizer state stay fp32 either way: updates of a few 1e-5 relative to a weight
are below bf16's resolution (2^-8) and would be lost in bf16 weights.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websailor.config import websailor_home
from websailor.log import get_logger

logger = get_logger(__name__)

CACHE_FILE = "precision.json"
#: rows of the timed products (tokens of a micro-batch)
ROWS = 512
#: the vocabulary's columns are timed on one tile of this width (the LM head's shape, smaller)
VOCAB_TILE = 8192
#: seconds each precision is timed for, at least
TIME_S = 0.3
#: rows of the probe timed first (:func:`time_matmuls`)
PROBE_ROWS = 64
#: bf16 this many times slower than fp32 on the probe or worse: not timed further
PROBE_LOSS = 4.0
#: the choice needs bf16 this much faster (a tie keeps fp32: exact, and no casts)
MARGIN = 1.05


@dataclass
class PrecisionChoice:
    """What precision a run trains in, and why.

    Attributes:
        bf16: bf16 autocast (fp32 weights and optimizer state) when true, else fp32.
        how: ``asked`` (``bf16`` or ``fp32`` given), ``gpu`` (a GPU with bf16 support),
            ``measured`` (timed now), ``cached`` (timed earlier on this machine), or
            ``no_bf16`` (the device cannot compute in bf16).
        gflops: the timed throughput, ``{"fp32": ..., "bf16": ...}`` in GFLOPS, when measured.
        shapes: the ``(rows, inner, columns)`` products timed.
    """

    bf16: bool
    how: str
    gflops: dict[str, float] = field(default_factory=dict)
    shapes: list[list[int]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What the run summary and the benchmarks say of the choice."""
        rec: dict[str, Any] = {"precision": "bf16" if self.bf16 else "fp32", "how": self.how}
        if self.gflops:
            rec["gflops"] = dict(self.gflops)
            rec["bf16_over_fp32"] = round(self.gflops["bf16"] / self.gflops["fp32"], 2)
            rec["shapes"] = [list(s) for s in self.shapes]
        return rec

    def describe(self) -> str:
        """One line for the log: the choice and the measurement behind it."""
        name = "bf16 autocast" if self.bf16 else "fp32"
        if not self.gflops:
            return f"precision {name} ({self.how})"
        g = self.gflops
        return (
            f"precision {name}: bf16 matmul {g['bf16']:.3g} GFLOPS against fp32 {g['fp32']:.3g} on this machine "
            f"({g['bf16'] / g['fp32']:.3g}x, {self.how})"
        )


def model_shapes(config: Any) -> list[tuple[int, int, int]]:
    """The matrix products that dominate a training step of ``config``'s model (a transformers
    config, or ``None`` for SmolLM2-135M's): ``(rows, inner, columns)`` of the attention
    projection, the MLP's two products and one tile of the LM head."""
    hidden = int(getattr(config, "hidden_size", 0) or 576)
    inner = int(getattr(config, "intermediate_size", 0) or (1536 if config is None else 4 * hidden))
    vocab = int(getattr(config, "vocab_size", 0) or 49152)
    return [
        (ROWS, hidden, hidden),
        (ROWS, hidden, inner),
        (ROWS, inner, hidden),
        (ROWS, hidden, min(vocab, VOCAB_TILE)),
    ]


def _machine_key(shapes: list[tuple[int, int, int]]) -> str:
    import platform

    import torch

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    shape_text = ",".join("x".join(map(str, s)) for s in shapes)
    return f"{model} | {torch.get_num_threads()} threads | torch {torch.__version__} | {shape_text}"


def time_matmuls(shapes: list[tuple[int, int, int]], seconds: float = TIME_S) -> dict[str, float]:
    """GFLOPS of ``shapes``' products in fp32 and under bf16 autocast (fp32 operands cast as
    training casts them, the weight's cast cached for the autocast region), each timed for at
    least ``seconds`` after a warm-up.

    A probe comes first: the first shape cut to :data:`PROBE_ROWS` rows. Where bf16 runs it
    :data:`PROBE_LOSS` times slower than fp32 or worse (CPUs without bf16 instructions: 0.7
    GFLOPS against 124 on an EPYC here, where the full timing took 36 s), the probe's figures
    are the answer: bf16 cannot win on the larger shapes."""
    m, k, n = shapes[0]
    probe = _gflops([(min(m, PROBE_ROWS), k, n)], seconds=0.0)
    if probe["bf16"] * PROBE_LOSS <= probe["fp32"]:
        return probe
    return _gflops(shapes, seconds)


def _gflops(shapes: list[tuple[int, int, int]], seconds: float) -> dict[str, float]:
    """:func:`time_matmuls`' timing: each precision's products after one warm-up call of each,
    repeated until ``seconds`` passed (once at least)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    pairs = [
        (torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen).requires_grad_(True)) for m, k, n in shapes
    ]
    flops = sum(2 * m * k * n for m, k, n in shapes)
    out: dict[str, float] = {}
    for name, ctx in (
        ("fp32", lambda: torch.autocast("cpu", enabled=False)),
        ("bf16", lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
    ):
        with torch.no_grad(), ctx():
            for a, b in pairs:  # warm-up: the first call of each shape allocates and picks kernels
                a @ b
            reps, t0 = 0, time.perf_counter()
            while True:
                for a, b in pairs:
                    a @ b
                reps += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= seconds:
                    break
        out[name] = float(f"{flops * reps / elapsed / 1e9:.3g}")  # a slow bf16 must not round to 0
    return out


def _usable(gflops: Any) -> bool:
    """Whether a cached measurement can be trusted: both figures finite numbers above 0 (not
    booleans, not NaN)."""
    return isinstance(gflops, dict) and all(
        type(gflops.get(k)) in (int, float) and math.isfinite(gflops[k]) and gflops[k] > 0 for k in ("fp32", "bf16")
    )


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, gflops: dict[str, float]) -> None:
    data = _read_cache(path)
    data[key] = {"gflops": gflops, "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        tmp.replace(path)
    except OSError as e:  # a read-only home: measure again next time, say so once
        logger.warning("could not cache the precision measurement in %s (%s)", path, e)
        tmp.unlink(missing_ok=True)


def choose_precision(precision: str, config: Any = None, measure: bool = True) -> PrecisionChoice:
    """The precision of a run asked for ``precision`` (``auto``, ``bf16`` or ``fp32``) with a
    model of ``config`` (a transformers config; ``None``: SmolLM2-135M's shapes).

    ``auto`` on a GPU is bf16 where it supports it; on a CPU, bf16 autocast only where its
    matrix products of the model's shapes ran at least :data:`MARGIN` times fp32's
    (:func:`time_matmuls`, cached per machine in ``$WEBSAILOR_HOME/precision.json``).
    ``measure=False`` never times: a cached figure or fp32.

    Raises:
        ValueError: ``precision`` is none of the three.
    """
    import torch

    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision {precision!r}: use auto, bf16 or fp32")
    if precision != "auto":
        return PrecisionChoice(precision == "bf16", "asked")
    if torch.cuda.is_available():
        ok = torch.cuda.is_bf16_supported()
        return PrecisionChoice(ok, "gpu" if ok else "no_bf16")
    shapes = model_shapes(config)
    path = websailor_home() / CACHE_FILE
    key = _machine_key(shapes)
    cached = _read_cache(path).get(key)
    gflops = cached.get("gflops") if isinstance(cached, dict) else None
    how = "cached"
    if not _usable(gflops):  # missing, or written by hand or damaged: measured again
        if not measure:
            return PrecisionChoice(False, "not_measured")
        gflops, how = time_matmuls(shapes), "measured"
        _write_cache(path, key, gflops)
    choice = PrecisionChoice(gflops["bf16"] >= MARGIN * gflops["fp32"], how, dict(gflops), [list(s) for s in shapes])
    logger.info("%s", choice.describe())
    return choice
