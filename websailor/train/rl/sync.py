"""The policy's weights pushed to a vLLM rollout server after every optimizer step.

TRL's ``GRPOTrainer`` calls ``trainer.vllm_generation.sync_weights()`` before a batch's
``rollout_func`` whenever the optimizer has stepped since the last call
(``trainer.state.global_step != trainer._last_loaded_step``). :class:`ServerWeightSync` takes
that place: :func:`attach` hands it to the trainer and turns on TRL's importance-sampling
correction, which then weighs each token by the ratio of the trainer's probability to the
server's sampling probability (the server's dtype, the trainer's precision here), capped, and
logs the engine mismatch (``sampling/sampling_logp_difference/mean`` and ``max``, over the
trained tokens) every step.

One sync, the path vLLM's CPU build offers (vLLM 0.32): the trainer's weights are written in
the server's own dtype (``/server_info``: fp32 where the CPU computes bf16 slowly, bf16 where it
does not; bf16 when the server does not say) as a safetensors checkpoint to a folder in shared
memory (``/dev/shm``), then ``POST /collective_rpc {"method": "reload_weights", "kwargs":
{"weights_path": DIR, "is_checkpoint_format": true}}`` makes the server read them and ``POST /reset_prefix_cache``
drops every cached key and value of the old weights. The rollouts of a batch all run inside
``rollout_func``, after the sync and before the update, so none is sampled from older weights;
:meth:`ServerWeightSync.require_current` checks it before a batch starts. On GPUs the same
hook is where vLLM's weight-transfer endpoints (``/pause``, ``/update_weights`` over NCCL,
``/resume``) go (docs/rl.md, "RL on GPUs").

Several servers: the weights are written once and every server reloads them at the same time
(one thread each); each server's version is kept, and a batch refuses any server whose version
is not the step's. The folder is ``sync_dir`` (default ``/dev/shm``, which only servers on this
machine read; a shared filesystem's path otherwise), told to the servers as ``server_dir`` (the
same folder's path where they run). :meth:`ServerWeightSync.probe` pushes the starting weights
once before any rollout, so a folder a server cannot read is one line at start, not a failed
first step.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import httpx

from websailor.errors import ConfigError, ModelError
from websailor.log import get_logger
from websailor.models.endpoint import api_key, probe_models
from websailor.models.vllm_server import parse_spec, server_root

logger = get_logger(__name__)

#: the endpoints the file sync needs (vLLM starts them with VLLM_SERVER_DEV_MODE=1)
SYNC_ENDPOINTS = ("/collective_rpc", "/reset_prefix_cache")
#: a server's model dtype as ``/server_info`` gives it -> the dtype the sync writes its weights in
SERVER_DTYPES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16"}


class WeightSyncError(ModelError):
    """Pushing the policy's weights to the rollout server failed or timed out."""


def _shm_root() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


def check_sync_dir(sync_dir: str | Path) -> None:
    """Check that the trainer can write weights into ``sync_dir`` (made when missing), with a
    probe file written and removed, so an unusable folder is refused before the model loads.
    Whether the servers can read it is checked by the first sync (:meth:`ServerWeightSync.probe`).

    Raises:
        ConfigError: ``sync_dir`` is a file, or cannot be made or written (the OS's reason).
    """
    path = Path(sync_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"sync_dir {path} is a file, not a folder: give a folder the weights can be written to")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".websailor-probe-"):
            pass
    except OSError as e:
        raise ConfigError(
            f"sync_dir {path}: the trainer cannot write the weights there ({e.strerror or e}); give a folder it can "
            "write, shared with the servers when they run elsewhere"
        ) from None


@dataclass
class SyncedServer:
    """One rollout server of a :class:`ServerWeightSync`: its spec, URLs, the optimizer steps
    its weights have seen (``version``; ``None``: not synced yet), the seconds of its last
    reload, and whether it was dropped (``lost``: it failed and ``on_server_loss`` is
    ``continue``)."""

    spec: str
    name: str
    base_url: str
    root: str
    version: int | None = None
    reload_s: float = 0.0
    lost: bool = False

    def drop(self, why: object) -> None:
        """Leave this server out of every later sync and rollout (the one record both read)."""
        self.lost = True
        logger.warning("rollout server %s is dropped for the rest of the run: %s", self.root, why)


class ServerWeightSync:
    """The weight sync to one or several vLLM rollout servers (see the module docstring).

    Args:
        specs: the policy servers' model specs, ``vllm:NAME@http://HOST:PORT/v1`` (one or a
            sequence).
        timeout_s: seconds one sync may take (writing and reloading), after which it fails.
        sync_dir: the folder the weights are written to (a fresh subfolder per sync object;
            default ``/dev/shm``, or the temporary folder where there is none).
        server_dir: ``sync_dir``'s path as the servers see it (default: the same path).
        drop_failed: a server whose reload fails is marked lost and left out from then on
            (``on_server_loss: continue``) instead of failing the sync; the sync fails only when
            no server is left.

    Attributes:
        servers: the :class:`SyncedServer` of each spec, in order.
        version: the optimizer steps of the last push every live server took (``None``: none
            yet: the servers still hold the weights they started with).
        last_sync_s: seconds of the last sync; ``last_write_s``: of that, writing the file.
        weight_dtype: the dtype the weights are written in, the servers' own (read by
            :meth:`check`; ``"bfloat16"`` until then, or when a server does not say): weights
            rounded to bf16 for an fp32 server would be a mismatch of the sync's own making.
    """

    #: the server endpoints this sync needs, and how to start a server that has them
    endpoints: tuple[str, ...] = SYNC_ENDPOINTS
    server_hint = "start it with VLLM_SERVER_DEV_MODE=1 in its environment (websailor serve model does)"

    def __init__(
        self,
        specs: str | Sequence[str],
        timeout_s: float = 300.0,
        sync_dir: str | Path | None = None,
        server_dir: str | None = None,
        drop_failed: bool = False,
    ) -> None:
        specs = [specs] if isinstance(specs, str) else list(specs)
        if not specs:
            raise ConfigError("the weight sync needs at least one rollout server")
        self.servers = [SyncedServer(spec, *parse_spec(spec), root="") for spec in specs]
        for server in self.servers:
            server.root = server_root(server.base_url)
        self.timeout_s = timeout_s
        self.drop_failed = drop_failed
        self.trainer: Any = None
        #: called before each sync TRL asks for: waits for rollouts still sampling from the old weights
        self.before_push: Any = None
        self.version: int | None = None
        self.last_sync_s = 0.0
        self.last_write_s = 0.0
        self.weight_dtype = "bfloat16"
        self.sync_dir = Path(sync_dir) if sync_dir is not None else None
        name = f"websailor-policy-{os.getpid()}-{id(self):x}"
        self._dir = (self.sync_dir or _shm_root()) / name
        self._server_path = str(PurePosixPath(server_dir) / name) if server_dir else str(self._dir)
        self._headers = {"Authorization": f"Bearer {api_key()}"}

    @property
    def spec(self) -> str:
        """The first server's spec (the one server of a single-server sync)."""
        return self.servers[0].spec

    @property
    def root(self) -> str:
        """The first server's root URL."""
        return self.servers[0].root

    @property
    def live(self) -> list[SyncedServer]:
        """The servers not dropped."""
        return [s for s in self.servers if not s.lost]

    # -- before anything runs ------------------------------------------------------------
    def check(self) -> None:
        """Check, before any rollout, that every server serves the model, offers the sync
        endpoints and computes log-probabilities after the temperature, and that all hold
        the model in one dtype.

        Raises:
            ConfigError: one line naming the URL and what to change: nothing listens there
                (not running, or still starting: vLLM opens its port only when its start-up
                compile is done), it serves another model, it was started without
                ``VLLM_SERVER_DEV_MODE=1``; servers of different dtypes.
        """
        dtypes = {}
        for server in self.servers:
            dtypes[server.root] = self._check_server(server)
        if len(set(dtypes.values())) > 1:
            listed = ", ".join(f"{root} {dtype}" for root, dtype in dtypes.items())
            raise ConfigError(
                f"the rollout servers hold the model in different dtypes ({listed}): one weight file cannot fit "
                "them all; start them with the same --dtype"
            )
        self.weight_dtype = next(iter(dtypes.values()))

    def _check_server(self, server: SyncedServer) -> str:
        """:meth:`check` of one server; the dtype its weights are written in."""
        try:
            probe_models(server.base_url, server.name, api_key(), prefix="vllm", skippable=False)
        except ConfigError as e:
            hint = ""
            if "nothing listens" in str(e):
                hint = (
                    " (a server still starting does not listen yet: vLLM opens its port after its start-up compile, "
                    "1 to 2 minutes; wait until `websailor serve model` prints the spec)"
                )
            raise ConfigError(f"rollout server {server.spec}: {e}{hint}") from None
        try:
            paths = (
                httpx.get(f"{server.root}/openapi.json", timeout=10.0, headers=self._headers).json().get("paths", {})
            )
        except (httpx.HTTPError, ValueError, AttributeError) as e:
            raise ConfigError(f"rollout server {server.spec}: cannot read {server.root}/openapi.json ({e})") from None
        missing = [p for p in self.endpoints if p not in paths]
        if missing:
            raise ConfigError(
                f"rollout server {server.spec}: the server has no {', '.join(missing)} endpoint, which the weight "
                f"sync needs: {self.server_hint}"
            )
        config = self._model_config(server.root)
        mode = config.get("logprobs_mode")
        if mode not in (None, "processed_logprobs"):
            logger.warning(
                "%s computes log-probabilities as %s, before the temperature: the importance-sampling correction is "
                "biased unless the temperature is 1 (start vLLM with --logprobs-mode processed_logprobs)",
                server.spec,
                mode,
            )
        return SERVER_DTYPES.get(str(config.get("dtype")), "bfloat16")

    def _model_config(self, root: str) -> dict[str, Any]:
        """The model settings of the server at ``root`` (``/server_info``; empty when it does
        not give them)."""
        try:
            info = httpx.get(f"{root}/server_info", params={"config_format": "json"}, timeout=10.0).json()
            config = info["vllm_config"]["model_config"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return {}
        return config if isinstance(config, dict) else {}

    # -- the sync TRL calls --------------------------------------------------------------
    def sync_weights(self) -> None:
        """Push the trainer's current weights to the server (TRL calls this before a batch's
        rollouts whenever the optimizer has stepped).

        Raises:
            WeightSyncError: writing, reloading or resetting the cache failed or took longer
                than ``timeout_s``; the step stops and nothing is trained on its rollouts.
        """
        trainer = self.trainer
        main = trainer.accelerator.is_main_process
        if self.before_push is not None:  # a batch sampled ahead finishes on the weights it began with
            self.before_push()
        self.push(trainer.accelerator.unwrap_model(trainer.model), int(trainer.state.global_step), main)
        trainer.accelerator.wait_for_everyone()

    def push(self, model: Any, step: int | None, main: bool = True) -> None:
        """Send ``model``'s weights to every live server as those of ``step`` (optimizer steps
        taken; ``None``: weights of no step, such as a probe's) with :meth:`_transfer`; on
        processes other than the ``main`` one only the version is recorded.

        Raises:
            WeightSyncError: as :meth:`sync_weights`, naming the servers that failed (with
                ``drop_failed``: only when every server failed; the others are dropped).
        """
        t0 = time.perf_counter()
        label = "the probe" if step is None else f"step {step + 1}"
        servers = self.live
        if main:
            errors = self._transfer(model, servers, label, t0)
            failed = [(srv, e) for srv, e in zip(servers, errors) if e is not None]
            if failed and (not self.drop_failed or len(failed) == len(servers)):
                raise (
                    failed[0][1]
                    if len(failed) == 1
                    else WeightSyncError(
                        f"{len(failed)} of {len(servers)} rollout servers failed the weight sync before {label}: "
                        + "; ".join(str(e) for _, e in failed)
                    )
                )
            for server, e in failed:
                server.drop(e)
        for server in self.live:
            server.version = step
        self.version = step
        self.last_sync_s = time.perf_counter() - t0
        if main:  # the other processes of a launch only record the version
            where = servers[0].root if len(servers) == 1 else f"{len(self.live)} servers"
            logger.info("weights of %s synced to %s in %.2f s", label, where, self.last_sync_s)

    def _transfer(self, model: Any, servers: list[SyncedServer], label: str, t0: float) -> list[WeightSyncError | None]:
        """The file transfer: the weights written once to the sync folder, then reloaded by every
        server at the same time (one thread each); each server's error, or ``None``.

        Raises:
            WeightSyncError: the folder's file system is full or the write failed.
        """
        import torch

        from websailor.models.serving import check_shm

        width = getattr(torch, self.weight_dtype).itemsize  # bytes a weight
        size_mb = sum(p.numel() for p in model.state_dict().values()) * width / 2**20
        check_shm(1.1 * size_mb + 1, "the weight sync", self._dir.parent)  # one line before anything is written
        try:
            try:
                self._write(model)
            except (OSError, RuntimeError) as e:
                raise WeightSyncError(
                    f"weight sync before {label}: writing {self._dir} failed: {type(e).__name__}: {e}"
                ) from e
            self.last_write_s = time.perf_counter() - t0
            with ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix="weight-sync") as pool:
                return list(pool.map(lambda server: self._reload(server, t0, label), servers))
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _reload(self, server: SyncedServer, t0: float, label: str) -> WeightSyncError | None:
        """Have ``server`` reload the written weights and drop its cached keys and values; the
        error, or ``None``."""
        try:
            reload = {"weights_path": self._server_path, "is_checkpoint_format": True}
            body = {"method": "reload_weights", "kwargs": reload}
            _check_rpc(server.root, self._post(server.root, "/collective_rpc", body, t0))
            self._post(server.root, "/reset_prefix_cache", None, t0)
        except WeightSyncError as e:
            return e
        except (OSError, RuntimeError) as e:
            return WeightSyncError(f"weight sync to {server.root} before {label}: {type(e).__name__}: {e}")
        server.reload_s = time.perf_counter() - t0
        return None

    def probe(self, model: Any, step: int | None, main: bool = True) -> None:
        """Push ``model``'s weights (the run's starting weights; ``step``: their version, or
        ``None`` when they are of no step the run trains from) before any rollout: the check
        that every server reads the sync's folder. Only the ``main`` process of several pushes;
        the others record the version.

        Raises:
            ConfigError: a server could not load them, naming the folder and the setting to change.
        """
        try:
            self.push(model, step, main)
        except WeightSyncError as e:
            hint = (
                f"; the weights were written to {self._dir.parent} (sync_dir) and the servers told "
                f"{PurePosixPath(self._server_path).parent} (server_sync_dir): is that folder the same one where "
                "they run?"
                if self.sync_dir is not None
                else "; the weights were written to shared memory (/dev/shm), which only servers on this machine "
                "read: for servers elsewhere set sync_dir to a shared folder (and server_sync_dir to its path there)"
            )
            raise ConfigError(f"the first weight sync failed before any rollout: {e}{hint}") from None

    def _write(self, model: Any) -> None:
        """``model``'s weights as a safetensors checkpoint in :attr:`weight_dtype` with its
        config in ``self._dir``. Every tensor is a copy, so tied weights (the embeddings and the
        LM head) are written under both names: ``save_pretrained`` drops a name whose tensor
        another shares, and the server then kept its old LM head (seen with fp32 weights, whose
        cast is no copy)."""
        import torch

        shutil.rmtree(self._dir, ignore_errors=True)
        dtype = getattr(torch, self.weight_dtype)
        with torch.no_grad():
            state = {k: v.detach().to(dtype, copy=True) for k, v in model.state_dict().items()}
            model.save_pretrained(self._dir, state_dict=state, safe_serialization=True)

    def _post(self, root: str, path: str, body: dict | None, t0: float) -> str:
        """POST ``body`` to ``path`` of the server at ``root`` within what is left of the
        sync's time; the answer's text."""
        left = self.timeout_s - (time.perf_counter() - t0)
        if left <= 0:
            raise WeightSyncError(f"weight sync to {root} took longer than {self.timeout_s:.0f} s")
        try:
            r = httpx.post(f"{root}{path}", json=body, timeout=left, headers=self._headers)
        except httpx.TimeoutException:
            raise WeightSyncError(
                f"weight sync to {root}: {path} did not answer within {self.timeout_s:.0f} s; the step stops "
                "and nothing is trained on rollouts of unknown weights: rerun the same command to resume"
            ) from None
        except httpx.HTTPError as e:
            raise WeightSyncError(
                f"weight sync to {root}: {path} failed ({type(e).__name__}: {e}): is the server still running? "
                "Nothing is trained on rollouts of unknown weights: restart it and rerun the same command to resume"
            ) from None
        if r.status_code != 200:
            raise WeightSyncError(f"weight sync to {root}: {path} answered HTTP {r.status_code}: {r.text[:300]}")
        return r.text

    def require_current(self, step: int) -> None:
        """Refuse to start a batch's rollouts when a live server does not hold the weights of
        ``step`` (a sync was skipped or failed).

        Raises:
            WeightSyncError: naming the first server whose weights are of another step.
        """
        for server in self.live:
            if server.version != step:
                held = (
                    "the weights it started with" if server.version is None else f"the weights of step {server.version}"
                )
                raise WeightSyncError(
                    f"{server.root} holds {held}, not those of step {step}: its rollouts would be off-policy"
                )


def _check_rpc(root: str, text: str) -> None:
    """Refuse a ``/collective_rpc`` answer that reports an error from a worker."""
    try:
        body = json.loads(text)
    except ValueError:
        return
    results = body.get("results") if isinstance(body, dict) else None
    if isinstance(results, list):
        bad = [r for r in results if r not in (None, True) and not isinstance(r, (dict, list))]
        if bad:
            raise WeightSyncError(f"weight sync to {root}: reload_weights answered {bad[0]!r}")


def attach(trainer: Any, sync: ServerWeightSync, mode: str, cap: float) -> None:
    """Make ``trainer`` (a ``GRPOTrainer`` built with ``use_vllm=False``) sync its weights
    through ``sync`` before each batch's rollouts and correct for the engine mismatch with the
    sampled log-probabilities: TRL's ``vllm_importance_sampling_*`` path, ``mode``
    (``token_truncate``, ``token_mask``, ``sequence_truncate``, ``sequence_mask``; ``none``: no
    correction) with the
    ratio capped at ``cap`` (TRL 1.16, ``grpo_trainer.py``: the rollout-function branch syncs
    through ``vllm_generation.sync_weights()``, and the correction runs when ``use_vllm`` is set)."""
    sync.trainer = trainer
    trainer.vllm_generation = sync
    trainer._last_loaded_step = -1
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = mode != "none"
    trainer.vllm_importance_sampling_mode = mode
    trainer.vllm_importance_sampling_clip_max = cap
