"""The weight sync over NCCL, for GPUs: vLLM's weight-transfer endpoints driven by TRL's
experimental ``WeightTransferClient`` (``trl.experimental.async_grpo.weight_transfer``), behind
the interface of :class:`~websailor.train.rl.sync.ServerWeightSync` (``weight_transfer: nccl``).

Each server gets one NCCL group with the trainer's main process, opened at the first push (the
probe, before any rollout): ``POST /init_weight_transfer_engine`` on the server while the trainer
joins the group. Every push then pauses the server (``/pause``), streams each parameter from the
trainer's GPU into the server's (``/start_weight_update``, ``/update_weights`` while the
broadcast runs, ``/finish_weight_update``), resumes it (``/resume``) and drops its cached keys
and values (``/reset_prefix_cache``); nothing is written to disk. The server must be started
with ``VLLM_SERVER_DEV_MODE=1`` and ``--weight-transfer-config '{"backend":"nccl"}'`` on other
GPUs than the trainer's (NCCL cannot join two ranks on one GPU), and must reach the trainer's
address and the port it advertises.

Not yet run on a GPU (none was lent to this work): ``benchmarks/gpu_smoke.sh`` is the check.
On CPUs, the file sync is the path (``weight_transfer: file``, the default).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.train.rl.sync import ServerWeightSync, SyncedServer, WeightSyncError

logger = get_logger(__name__)

#: the endpoints of vLLM's weight transfer (vLLM 0.28 and later, with VLLM_SERVER_DEV_MODE=1)
NCCL_ENDPOINTS = (
    "/init_weight_transfer_engine",
    "/pause",
    "/resume",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
    "/reset_prefix_cache",
)


def sent_parameters(model: Any) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` of every trainable parameter under the name the served checkpoint
    uses (the wrappers' prefixes removed: DDP's ``module.``, activation checkpointing's)."""
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        yield name.removeprefix("module.").replace("_checkpoint_wrapped_module.", ""), param.detach()


def _trl_client(root: str, update_info: dict, timeout_s: float) -> Any:
    """TRL's ``WeightTransferClient`` for the server at ``root``.

    Raises:
        ConfigError: TRL's experimental module or vLLM (which it needs) cannot be imported.
    """
    try:
        from trl.experimental.async_grpo.vllm_client import VLLMClient
        from trl.experimental.async_grpo.weight_transfer import WeightTransferClient

        return WeightTransferClient(VLLMClient(root), update_info, weight_sync_timeout=int(timeout_s))
    except ImportError as e:
        raise ConfigError(
            f"weight_transfer nccl needs vLLM installed beside the trainer (a GPU machine: pip install vllm): {e}"
        ) from None


class NCCLWeightSync(ServerWeightSync):
    """:class:`ServerWeightSync` with the weights streamed over NCCL (see the module docstring).

    Args:
        specs, timeout_s, drop_failed: as :class:`ServerWeightSync` (no folder: nothing is written).
        client_factory: ``(root, update_info, timeout_s) -> client`` with TRL's
            ``WeightTransferClient`` methods (``init_weight_transfer``, ``pause``,
            ``send_weights``, ``resume``); default TRL's, for tests another.
    """

    endpoints = NCCL_ENDPOINTS
    server_hint = (
        "start it with VLLM_SERVER_DEV_MODE=1 in its environment and --weight-transfer-config "
        '\'{"backend":"nccl"}\' (vLLM 0.28 or later), or use weight_transfer: file'
    )

    def __init__(
        self,
        specs: str | Sequence[str],
        timeout_s: float = 300.0,
        drop_failed: bool = False,
        client_factory: Callable[[str, dict, float], Any] | None = None,
    ) -> None:
        super().__init__(specs, timeout_s=timeout_s, drop_failed=drop_failed)
        self._factory = client_factory or _trl_client
        self._clients: dict[str, Any] = {}

    def _transfer(self, model: Any, servers: list[SyncedServer], label: str, t0: float) -> list[WeightSyncError | None]:
        """Stream the weights to each server in turn; each server's error, or ``None``."""
        self.last_write_s = 0.0  # nothing is written
        return [self._send(model, server, label, t0) for server in servers]

    def _send(self, model: Any, server: SyncedServer, label: str, t0: float) -> WeightSyncError | None:
        try:
            client = self._clients.get(server.root)
            if client is None:  # the group is opened once, at the first push (the probe)
                params = list(sent_parameters(model))
                info = {
                    "names": [n for n, _ in params],
                    "dtype_names": [str(p.dtype).removeprefix("torch.") for _, p in params],
                    "shapes": [list(p.shape) for _, p in params],
                }
                client = self._factory(server.root, info, self.timeout_s)
                client.init_weight_transfer()
                self._clients[server.root] = client
            client.pause()
            try:
                client.send_weights(sent_parameters(model))
            finally:
                client.resume()
            self._post(server.root, "/reset_prefix_cache", None, t0)
        except WeightSyncError as e:
            return e
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 (TRL's client raises RuntimeError, requests' errors, NCCL's)
            return WeightSyncError(f"NCCL weight sync to {server.root} before {label}: {type(e).__name__}: {e}")
        server.reload_s = time.perf_counter() - t0
        return None

    def probe(self, model: Any, step: int | None, main: bool = True) -> None:
        """The first push, which opens each server's NCCL group (see the module docstring).

        Raises:
            ConfigError: a server could not join or take the weights, with what to check.
        """
        try:
            self.push(model, step, main)
        except WeightSyncError as e:
            raise ConfigError(
                f"the first NCCL weight sync failed before any rollout: {e}; the servers must run on other GPUs than "
                'the trainer, with --weight-transfer-config \'{"backend":"nccl"}\', and reach this machine'
            ) from None
