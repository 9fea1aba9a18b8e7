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
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from websailor.errors import ConfigError, ModelError
from websailor.log import get_logger
from websailor.models.openai_compat import api_key, probe_models
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


class ServerWeightSync:
    """The weight sync to a vLLM rollout server (see the module docstring).

    Args:
        spec: the policy server's model spec, ``vllm:NAME@http://HOST:PORT/v1``.
        timeout_s: seconds one sync may take (writing and reloading), after which it fails.

    Attributes:
        version: the optimizer steps the server's weights have seen (``None``: not synced
            yet: the server still holds the weights it started with).
        last_sync_s: seconds of the last sync; ``last_write_s``: of that, writing the file.
        weight_dtype: the dtype the weights are written in, the server's own (read by
            :meth:`check`; ``"bfloat16"`` until then, or when the server does not say): weights
            rounded to bf16 for an fp32 server would be a mismatch of the sync's own making.
    """

    def __init__(self, spec: str, timeout_s: float = 300.0) -> None:
        self.spec = spec
        self.name, self.base_url = parse_spec(spec)
        self.root = server_root(self.base_url)
        self.timeout_s = timeout_s
        self.trainer: Any = None
        self.version: int | None = None
        self.last_sync_s = 0.0
        self.last_write_s = 0.0
        self.weight_dtype = "bfloat16"
        self._dir = _shm_root() / f"websailor-policy-{id(self):x}"
        self._headers = {"Authorization": f"Bearer {api_key()}"}

    # -- before anything runs ------------------------------------------------------------
    def check(self) -> None:
        """Check, before any rollout, that the server serves the model, offers the sync
        endpoints and computes log-probabilities after the temperature.

        Raises:
            ConfigError: one line naming the URL and what to change: nothing listens there
                (not running, or still starting: vLLM opens its port only when its start-up
                compile is done), it serves another model, it was started without
                ``VLLM_SERVER_DEV_MODE=1``.
        """
        try:
            probe_models(self.base_url, self.name, api_key(), prefix="vllm")
        except ConfigError as e:
            hint = ""
            if "nothing listens" in str(e):
                hint = (
                    " (a server still starting does not listen yet: vLLM opens its port after its start-up compile, "
                    "1 to 2 minutes; wait until `websailor serve model` prints the spec)"
                )
            raise ConfigError(f"rollout server {self.spec}: {e}{hint}") from None
        try:
            paths = httpx.get(f"{self.root}/openapi.json", timeout=10.0, headers=self._headers).json().get("paths", {})
        except (httpx.HTTPError, ValueError, AttributeError) as e:
            raise ConfigError(f"rollout server {self.spec}: cannot read {self.root}/openapi.json ({e})") from None
        missing = [p for p in SYNC_ENDPOINTS if p not in paths]
        if missing:
            raise ConfigError(
                f"rollout server {self.spec}: the server has no {', '.join(missing)} endpoint, which the weight "
                "sync needs: start it with VLLM_SERVER_DEV_MODE=1 in its environment (websailor serve model does)"
            )
        config = self._model_config()
        mode = config.get("logprobs_mode")
        self.weight_dtype = SERVER_DTYPES.get(str(config.get("dtype")), "bfloat16")
        if mode not in (None, "processed_logprobs"):
            logger.warning(
                "%s computes log-probabilities as %s, before the temperature: the importance-sampling correction is "
                "biased unless the temperature is 1 (start vLLM with --logprobs-mode processed_logprobs)",
                self.spec,
                mode,
            )

    def _model_config(self) -> dict[str, Any]:
        """The server's model settings (``/server_info``; empty when it does not give them)."""
        try:
            info = httpx.get(f"{self.root}/server_info", params={"config_format": "json"}, timeout=10.0).json()
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
        self.push(trainer.accelerator.unwrap_model(trainer.model), int(trainer.state.global_step), main)
        trainer.accelerator.wait_for_everyone()

    def push(self, model: Any, step: int, main: bool = True) -> None:
        """Write ``model``'s weights and have the server load them as those of ``step``
        (optimizer steps taken); on processes other than the ``main`` one only the version is
        recorded.

        Raises:
            WeightSyncError: as :meth:`sync_weights`.
        """
        t0 = time.perf_counter()
        if main:  # a full /dev/shm is one line before anything is written, not a failed write
            import torch

            from websailor.models.serving import check_shm

            width = getattr(torch, self.weight_dtype).itemsize  # bytes a weight
            size_mb = sum(p.numel() for p in model.state_dict().values()) * width / 2**20
            check_shm(1.1 * size_mb + 1, "the weight sync", self._dir.parent)
        try:
            if main:
                self._write(model)
                self.last_write_s = time.perf_counter() - t0
                reload = {"weights_path": str(self._dir), "is_checkpoint_format": True}
                _check_rpc(self.root, self._post("/collective_rpc", {"method": "reload_weights", "kwargs": reload}, t0))
                self._post("/reset_prefix_cache", None, t0)
        except (OSError, RuntimeError) as e:
            raise WeightSyncError(f"weight sync to {self.root} before step {step + 1}: {type(e).__name__}: {e}") from e
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
        self.version = step
        self.last_sync_s = time.perf_counter() - t0
        logger.info("weights of step %d synced to %s in %.2f s", step, self.root, self.last_sync_s)

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

    def _post(self, path: str, body: dict | None, t0: float) -> str:
        """POST ``body`` to the server's ``path`` within what is left of the sync's time; the
        answer's text."""
        left = self.timeout_s - (time.perf_counter() - t0)
        if left <= 0:
            raise WeightSyncError(f"weight sync to {self.root} took longer than {self.timeout_s:.0f} s")
        try:
            r = httpx.post(f"{self.root}{path}", json=body, timeout=left, headers=self._headers)
        except httpx.TimeoutException:
            raise WeightSyncError(
                f"weight sync to {self.root}: {path} did not answer within {self.timeout_s:.0f} s; the step stops "
                "and nothing is trained on rollouts of unknown weights: rerun the same command to resume"
            ) from None
        except httpx.HTTPError as e:
            raise WeightSyncError(
                f"weight sync to {self.root}: {path} failed ({type(e).__name__}: {e}): is the server still running? "
                "Nothing is trained on rollouts of unknown weights: restart it and rerun the same command to resume"
            ) from None
        if r.status_code != 200:
            raise WeightSyncError(f"weight sync to {self.root}: {path} answered HTTP {r.status_code}: {r.text[:300]}")
        return r.text

    def require_current(self, step: int) -> None:
        """Refuse to start a batch's rollouts when the server does not hold the weights of
        ``step`` (a sync was skipped or failed).

        Raises:
            WeightSyncError: the server's weights are of another step.
        """
        if self.version != step:
            held = "the weights it started with" if self.version is None else f"the weights of step {self.version}"
            raise WeightSyncError(
                f"{self.root} holds {held}, not those of step {step}: its rollouts would be off-policy"
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
