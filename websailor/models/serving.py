"""Which engine samples a job's rollouts: the local transformers engine, or a vLLM server the
job starts for itself and stops when it ends (``--engine auto|local|vllm``).

A vLLM server costs a start-up (60 to 130 s on two cores, compiling) and then samples several
times faster than the local engine (docs/benchmarks.md, "A vLLM server": 14.1 against about 5
rollouts a minute on the ladder's workload), so it pays from about :data:`BREAK_EVEN_ROLLOUTS`
rollouts on two cores. ``auto`` starts one for a local model (``smollm2``, ``hf:DIR``) when the
job's rollouts reach that and vLLM is installed (``make vllm``, or ``vllm`` in this
environment), and uses the local engine otherwise, saying once why. ``vllm`` always starts one
(and names how to install vLLM when it is missing); ``local`` never does. Specs that name a
server already (``vllm:``, ``openai:``) are used as they are.

The server is stopped by its process group when the job ends, on Ctrl-C (and SIGTERM, which the
CLI turns into one) and on error; shared-memory files its workers left in ``/dev/shm`` and
that no live process still maps are removed. Records name the model by its spec (``smollm2``,
``hf:DIR``), never by the server's port, so a resumed evaluation continues the same run
whichever engine serves it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError
from websailor.log import get_logger

logger = get_logger(__name__)

ENGINES = ("auto", "local", "vllm")
#: rollouts from which a vLLM server's start-up pays on two CPU cores (measured: start-up 60 to
#: 130 s; 14.1 rollouts a minute on vLLM against about 5 on the local engine)
BREAK_EVEN_ROLLOUTS = 15
#: free space ``/dev/shm`` needs for a vLLM server's worker queues (MB)
SHM_NEED_MB = 64
SHM = Path("/dev/shm")


@dataclass
class ServedModel:
    """The model spec a job loads and the server behind it, if the job started one.

    Attributes:
        spec: what to load (:func:`websailor.models.load_model`): the job's own spec, or the
            started server's ``vllm:NAME@URL``.
        label: how records name the model: the job's own spec.
        engine: ``local``, ``vllm`` (a server this job started) or ``server`` (a spec that names
            a server already).
        server: the :class:`~websailor.models.vllm_launch.VLLMServer` this job started, or ``None``.
        reason: one line saying why this engine was chosen.
    """

    spec: str
    label: str
    engine: str
    server: Any = None
    reason: str = ""
    _shm_before: set[str] = field(default_factory=set)

    def close(self) -> None:
        """Stop the server this job started (its whole process group) and remove the
        shared-memory files it left (:func:`remove_orphaned_shm`); nothing for the others."""
        if self.server is None:
            return
        try:
            self.server.stop()
        finally:
            self.server = None
            removed = remove_orphaned_shm(self._shm_before)
            if removed:
                logger.info("removed %d shared-memory files the vLLM server left in %s", removed, SHM)

    def __enter__(self) -> ServedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_local_spec(spec: str) -> bool:
    """Whether ``spec`` names local weights (``smollm2``, ``hf:DIR``) that an engine must serve."""
    spec = (spec or "").strip()
    return spec == "smollm2" or spec.startswith("hf:")


def vllm_available() -> str | None:
    """The Python that has vLLM (:func:`~websailor.models.vllm_launch.find_vllm_python`), or
    ``None`` where none is installed.

    Raises:
        ConfigError: the interpreter named by ``WEBSAILOR_VLLM_PYTHON`` is missing or not an
            executable (a user's explicit choice is never passed over in silence).
    """
    from websailor.models.vllm_launch import VLLM_PYTHON_ENV, find_vllm_python

    if os.environ.get(VLLM_PYTHON_ENV):
        return find_vllm_python()
    try:
        return find_vllm_python()
    except ConfigError:
        return None


def install_hint() -> str:
    """How to install vLLM here: its CPU build without a GPU, ``pip install vllm`` with one."""
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    return "pip install vllm (a GPU machine)" if gpu else "make vllm (vLLM's CPU build in .venv-vllm)"


def check_shm(need_mb: float, what: str, folder: Path | None = None) -> None:
    """Refuse ``what`` when ``folder`` (default ``/dev/shm``; where it is missing: nothing to
    check) has less than ``need_mb`` MB free.

    Raises:
        ConfigError: one line with the free and the needed space.
    """
    folder = SHM if folder is None else Path(folder)
    if not folder.is_dir():
        return
    free = shutil.disk_usage(folder).free / 2**20
    if free < need_mb:
        raise ConfigError(
            f"{folder} has {free:.0f} MB free and {what} needs about {need_mb:.0f} MB: free it (old vLLM files are "
            f"psm_*, old weight syncs websailor-policy-*) or enlarge it"
        )


def _shm_names() -> set[str]:
    try:
        return {p.name for p in SHM.iterdir()}
    except OSError:
        return set()


def _mapped_shm() -> set[str]:
    """The ``/dev/shm`` file names some live process maps or holds open."""
    names: set[str] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for line in (proc / "maps").read_text(errors="replace").splitlines():
                if "/dev/shm/" in line:
                    names.add(line.rsplit("/dev/shm/", 1)[1].split()[0])
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    names.add(target[len("/dev/shm/") :].split()[0])
        except OSError:  # a process that ended meanwhile, or one we may not read
            continue
    return names


def remove_orphaned_shm(before: set[str]) -> int:
    """Remove the ``/dev/shm`` files that appeared since ``before`` (names then present) and that
    no live process maps or holds open (a killed vLLM worker's queues); returns how many."""
    new = _shm_names() - before
    if not new:
        return 0
    in_use = _mapped_shm()
    removed = 0
    for name in sorted(new - in_use):
        path = SHM / name
        try:
            if path.is_file() and not name.startswith("websailor-policy-"):
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def serve_for_job(
    spec: str,
    engine: str,
    rollouts: int,
    *,
    max_model_len: int | None = None,
    log_path: str | Path | None = None,
    startup_timeout_s: float | None = None,
) -> ServedModel:
    """The model a job of about ``rollouts`` rollouts loads, with ``engine`` (``auto``,
    ``local`` or ``vllm``; see the module docstring); a server it starts is ready when this
    returns, and :meth:`ServedModel.close` stops it.

    Args:
        spec: the job's ``--model``.
        engine: the job's ``--engine``.
        rollouts: the rollouts the job will run (estimated: items x k, less those done).
        max_model_len: the server's context (tokens; ``None``: the model's).
        log_path: where the server's output goes (default: the system's temporary folder).
        startup_timeout_s: seconds to wait for the server to answer.

    Raises:
        ConfigError: an unknown engine; ``vllm`` without vLLM installed (naming ``make vllm``
            or ``pip install vllm``) or for a spec that names a server already; a server that
            cannot start (the port taken, ``/dev/shm`` full, its own error), stopped first.
    """
    from websailor.models import local_model_dir

    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: use one of {', '.join(ENGINES)}")
    if not is_local_spec(spec):
        if engine == "vllm":
            raise ConfigError(
                f"--engine vllm starts a server for local weights (smollm2, hf:DIR); {spec} is served already"
            )
        return ServedModel(spec, spec, "server", reason=f"{spec} names its server")
    if engine == "local":
        return ServedModel(spec, spec, "local", reason="--engine local")
    python = vllm_available()
    if engine == "auto":
        if rollouts < BREAK_EVEN_ROLLOUTS:
            why = (
                f"{rollouts} rollout{'' if rollouts == 1 else 's'}, fewer than the {BREAK_EVEN_ROLLOUTS} at which a "
                "vLLM server's start-up pays"
            )
            logger.info("engine auto: the local engine (%s)", why)
            return ServedModel(spec, spec, "local", reason=why)
        if python is None:
            why = f"vLLM is not installed ({install_hint()} to sample {rollouts} rollouts several times faster)"
            logger.warning("engine auto: the local engine runs the %d rollouts; %s", rollouts, why)
            return ServedModel(spec, spec, "local", reason=why)
    elif python is None:
        raise ConfigError(f"--engine vllm: vLLM is not installed: {install_hint()}, or --engine local")
    path = local_model_dir(spec)
    return _start(spec, path, python, max_model_len, log_path, startup_timeout_s, rollouts)


def _start(
    spec: str,
    model_dir: Path | None,
    python: str,
    max_model_len: int | None,
    log_path: str | Path | None,
    startup_timeout_s: float | None,
    rollouts: int,
) -> ServedModel:
    from websailor.models.vllm_launch import DEFAULT_STARTUP_S, VLLMServer

    check_shm(SHM_NEED_MB, "a vLLM server")
    before = _shm_names()
    try:
        server = VLLMServer(
            model_dir, name="policy", port=0, max_model_len=max_model_len, python=python, log_path=log_path
        )
    except OSError as e:  # no free port to bind
        raise ConfigError(f"no free TCP port for a vLLM server on 127.0.0.1 ({e.strerror or e})") from None
    label = "smollm2" if spec.strip() == "smollm2" else f"hf:{model_dir}"  # as the local engine names it
    served = ServedModel(server.spec, label, "vllm", server, f"{rollouts} rollouts on a vLLM server", before)
    logger.info("engine: starting a vLLM server for %s (%d rollouts; log %s)", spec, rollouts, server.log_path)
    try:
        server.start()
        server.wait_ready(startup_timeout_s or DEFAULT_STARTUP_S, progress=True)
    except BaseException:
        served.close()
        raise
    logger.info("engine: %s serves %s (ready in %.0f s)", server.spec, spec, server.startup_s or 0.0)
    return served
