"""Several rollout servers behind one batch: each rollout goes to the server with the fewest
rollouts in flight, and a server that fails during a batch either stops the step or is dropped
while its rollouts are rerun on the others (``on_server_loss``; issue 40).

The unit routed is a whole rollout, not a model call: a rollout's turns share their prefix, so
they stay on the server that holds its keys and values. The weights of every server are synced
by one :class:`~websailor.train.rl.sync.ServerWeightSync` before the batch, and the pool reads
that sync's :class:`~websailor.train.rl.sync.SyncedServer` records: a server dropped by either
(a failed reload, or no answer after a failed rollout) is out of both.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import httpx

from websailor.errors import ModelError
from websailor.log import get_logger
from websailor.models.endpoint import api_key
from websailor.train.rl.sync import SyncedServer

logger = get_logger(__name__)


class ServerPool:
    """The rollout servers of an RL run and the rollouts in flight on each.

    Args:
        models: one chat backend per server (:class:`~websailor.models.vllm_server.VLLMServerModel`).
        servers: each server's record in the weight sync (``ServerWeightSync.servers``), in the
            same order: its root URL, version and whether it was dropped.

    Attributes:
        in_flight: rollouts running on each server now.
        served: rollouts each server has started since :meth:`reset_counts`.
    """

    def __init__(self, models: Sequence[Any], servers: Sequence[SyncedServer]) -> None:
        if len(models) != len(servers) or not models:
            raise ValueError(f"{len(models)} server backends for {len(servers)} servers")
        self.models = list(models)
        self.servers = list(servers)
        self.in_flight = [0] * len(models)
        self.served = [0] * len(models)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.models)

    @property
    def roots(self) -> list[str]:
        """Each server's root URL."""
        return [server.root for server in self.servers]

    @property
    def live(self) -> list[int]:
        """The indices of the servers not dropped."""
        return [i for i, server in enumerate(self.servers) if not server.lost]

    def acquire(self, avoid: Sequence[int] = ()) -> int:
        """Take a slot on the live server with the fewest rollouts in flight (the lowest index
        among equals), other than those of ``avoid`` while another is live.

        Raises:
            ModelError: no server is left.
        """
        with self._lock:
            live = self.live
            if not live:
                raise ModelError("no rollout server is left: every one failed during the run")
            candidates = [i for i in live if i not in avoid] or live
            i = min(candidates, key=lambda j: (self.in_flight[j], j))
            self.in_flight[i] += 1
            self.served[i] += 1
            return i

    def release(self, i: int) -> None:
        """Give back the slot :meth:`acquire` took on server ``i``."""
        with self._lock:
            self.in_flight[i] -= 1

    def answers(self, i: int, timeout_s: float = 10.0) -> bool:
        """Whether server ``i`` still answers (``GET /v1/models``)."""
        try:
            r = httpx.get(
                f"{self.servers[i].root}/v1/models", timeout=timeout_s, headers={"Authorization": f"Bearer {api_key()}"}
            )
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    def drop(self, i: int, why: str) -> None:
        """Leave server ``i`` out of every later rollout and sync."""
        with self._lock:
            self.servers[i].drop(why)

    def reset_counts(self) -> None:
        """Start counting :attr:`served` again (once per batch)."""
        with self._lock:
            self.served = [0] * len(self.models)

    def close(self) -> None:
        """Close every backend."""
        for model in self.models:
            model.close()


class RoutedAgent:
    """An agent-like object whose :meth:`run` takes each rollout to the least busy live server
    of ``pool`` and remembers where each rollout ran (:attr:`where`, by rollout number).

    Args:
        pool: the servers.
        agents: one :class:`~websailor.agent.loop.Agent` per server, over its backend.
        avoid: server indices to keep off while another is live (those that just failed).
    """

    def __init__(self, pool: ServerPool, agents: Sequence[Any], avoid: Sequence[int] = ()) -> None:
        if len(agents) != len(pool):
            raise ValueError(f"{len(agents)} agents for {len(pool)} servers")
        self.pool = pool
        self.agents = list(agents)
        self.avoid = tuple(avoid)
        self.where: dict[int, int] = {}

    def run(self, question: str, qid: str, rollout: int, answer: Any = None) -> Any:
        """One rollout on the least busy server (see :meth:`Agent.run`)."""
        i = self.pool.acquire(self.avoid)
        self.where[rollout] = i
        try:
            return self.agents[i].run(question, qid, rollout, answer)
        finally:
            self.pool.release(i)
