"""Prefix-aware request routing for Ray Serve: requests that share a prompt prefix go to the
replica that served that prefix last, where its KV blocks are likely still in the prefix cache.

A Ray Serve request router (``ray.serve.request_router.RequestRouter``) runs in every caller that
holds a handle to the engine deployment (here: the router-ingress replicas of ``ossa.ray.serve``).
It keys each request by its routing text (the prompt, or the chat messages' contents) cut into
fixed chunks of characters; chunk *i*'s key hashes chunks 0..i, so a key names a whole prefix, like
the engine's block hashes name whole token prefixes. The router remembers which replica each key
was last routed to (an LRU map of bounded size) and, for a new request, prefers the replica that owns
its longest known prefix, unless that one has more than ``imbalance_threshold`` requests queued
beyond the least-loaded replica's (then: least loaded). A request with no known prefix goes to the
not-busy replica that owns the fewest prefixes, which spreads distinct prefixes over the replicas.
If the chosen replica is full (``max_ongoing_requests``), Serve takes the least-loaded one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ray.serve.request_router import (
    FIFOMixin,
    LocalityMixin,
    MultiplexMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)


def prefix_keys(text: str, chunk_chars: int) -> list[int]:
    """One key per whole chunk of ``text``; key *i* depends on chunks 0..i (a chained hash)."""
    keys: list[int] = []
    h = 0
    for start in range(0, len(text) - chunk_chars + 1, chunk_chars):
        h = hash((h, text[start : start + chunk_chars]))
        keys.append(h)
    return keys


def routing_text(args: tuple[Any, ...]) -> str | None:
    """The routing text of a request: the ``routing_text`` attribute of its first argument that has
    one (``ossa.ray.serve.ForwardedRequest``)."""
    for arg in args:
        text = getattr(arg, "routing_text", None)
        if isinstance(text, str):
            return text
    return None


class PrefixAffinityRouter(FIFOMixin, LocalityMixin, MultiplexMixin, RequestRouter):
    """Routes a request to the replica that holds its longest known prompt prefix (see module doc)."""

    def initialize_state(
        self, chunk_chars: int = 64, max_keys: int = 200_000, imbalance_threshold: int = 8, **kwargs: Any
    ) -> None:
        if chunk_chars < 1 or max_keys < 1 or imbalance_threshold < 0:
            raise ValueError("chunk_chars and max_keys must be >= 1, imbalance_threshold >= 0")
        self.chunk_chars = int(chunk_chars)
        self.max_keys = int(max_keys)
        self.imbalance_threshold = int(imbalance_threshold)
        self._owner: OrderedDict[int, ReplicaID] = OrderedDict()  # prefix key -> last replica (LRU)
        self._owned: dict[ReplicaID, int] = {}  # replica -> how many keys it owns
        self.num_preferred = 0  # requests routed with a preferred replica (for tests and logs)

    def _queue_len(self, replica: RunningReplica) -> int | None:
        return self.replica_queue_len_cache.get(replica.replica_id)

    def _preferred(self, text: str, candidates: list[RunningReplica]) -> RunningReplica | None:
        by_id = {r.replica_id: r for r in candidates}
        for key in reversed(prefix_keys(text, self.chunk_chars)):
            owner = self._owner.get(key)
            if owner is not None and owner in by_id:
                return by_id[owner]
        return None

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        text = None if pending_request is None else routing_text(tuple(pending_request.args))
        lengths = {r.replica_id: self._queue_len(r) for r in candidate_replicas}
        known = [q for q in lengths.values() if q is not None]
        least = min(known) if known else 0
        # Replicas within the threshold of the least loaded one (unknown lengths count as idle).
        free = [
            r for r in candidate_replicas if (lengths[r.replica_id] or 0) - least <= self.imbalance_threshold
        ]
        preferred = None if text is None else self._preferred(text, free)
        if preferred is None:
            # No replica holds this prefix (or the one that does is busy): the replica holding the
            # fewest prefixes among the not-busy ones spreads new prefixes, then the least loaded.
            preferred = min(free, key=lambda r: self._owned.get(r.replica_id, 0), default=None)
        else:
            self.num_preferred += 1
        if preferred is None:
            return [candidate_replicas]
        return [[preferred], candidate_replicas]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        text = routing_text(tuple(pending_request.args)) if pending_request is not None else None
        if not text:
            return
        for key in prefix_keys(text, self.chunk_chars):
            old = self._owner.pop(key, None)
            if old is not None:
                self._owned[old] -= 1
            self._owner[key] = replica_id
            self._owned[replica_id] = self._owned.get(replica_id, 0) + 1
        while len(self._owner) > self.max_keys:
            _, old = self._owner.popitem(last=False)
            self._owned[old] -= 1

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        for key in [k for k, v in self._owner.items() if v == replica_id]:
            del self._owner[key]
        self._owned.pop(replica_id, None)
