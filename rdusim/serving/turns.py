"""Which model a colocated node runs next, and which models its HBM holds.

A node takes the models in turn (round robin over the models with work, one graph execution
each). A model that is not resident is switched in when its turn comes: the least recently used
unpinned models without requests in flight are evicted until it fits. A model in flight is never
evicted, so when a waiting model can only fit by evicting some, those stop admitting prompts and
drain first (the waiting model whose oldest prompt came first goes first). See
`rdusim.serving.engine` for the whole deployment.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rdusim.serving.batch import DecodeBatch
    from rdusim.serving.records import RequestRecord


class HeldModel(Protocol):
    """What residency needs of a model: its bytes per socket while resident."""

    @property
    def hbm_bytes(self) -> float: ...


class ModelTurns:
    """One colocated node's turns and HBM residency."""

    def __init__(
        self,
        models: Sequence[HeldModel],
        budget: float,
        pinned: Sequence[int],
        batches: Sequence[DecodeBatch],  # the node's, one per model
        queues: Sequence[deque[RequestRecord]],  # every model's waiting prompts
    ) -> None:
        self.models, self.budget, self.batches, self.queues = models, budget, batches, queues
        self.count = len(models)
        self.pinned = set(pinned)
        self.resident = [False] * self.count
        self.last_used = [0.0] * self.count
        used = 0.0
        for m in [*sorted(self.pinned), *(i for i in range(self.count) if i not in self.pinned)]:
            if used + models[m].hbm_bytes > budget:
                if m in self.pinned:
                    raise ValueError(f"the pinned models do not fit the HBM budget ({m})")
                break
            self.resident[m] = True
            used += models[m].hbm_bytes
        self.turn = self.count - 1  # the model served last: the first turn is model 0's
        self.draining: frozenset[int] = frozenset()
        self.claim = -1  # the waiting model the draining ones make room for (-1: none)

    def _busy(self, m: int) -> bool:
        return self.batches[m].active > 0

    def _has_work(self, m: int) -> bool:
        """Requests in flight, or waiting ones it may admit (a draining model admits none)."""
        return self._busy(m) or (len(self.queues[m]) > 0 and m not in self.draining)

    def with_work(self) -> set[int]:
        """The models with requests in flight or waiting ones they may admit."""
        return {m for m in range(self.count) if self._has_work(m)}

    def _room(self) -> float:
        used = sum(self.models[m].hbm_bytes for m in range(self.count) if self.resident[m])
        return self.budget - used

    def victims(self, m: int, idle_only: bool) -> list[int] | None:
        """The resident models to evict, least recently used first, for `m` to fit (only those
        without requests in flight if `idle_only`); None if it cannot fit so."""
        need = self.models[m].hbm_bytes - self._room()
        order = sorted(
            (i for i in range(self.count) if self.resident[i] and i not in self.pinned),
            key=lambda i: (self.last_used[i], i),
        )
        out: list[int] = []
        for i in order:
            if need <= 1e-9:
                break
            if idle_only and self._busy(i):
                continue
            out.append(i)
            need -= self.models[i].hbm_bytes
        return out if need <= 1e-9 else None

    def _eligible(self, m: int) -> bool:
        """`m` has work and is resident or can be switched in now."""
        if not self._has_work(m):
            return False
        return self.resident[m] or self.victims(m, idle_only=True) is not None

    def next(self) -> int | None:
        """The next model to run (round robin over those with work that are resident or can
        be switched in now), or None when no model has work. Sets `draining`."""
        if self.count == 1:
            return 0
        self._update_draining()
        for k in range(1, self.count + 1):
            m = (self.turn + k) % self.count
            if self._eligible(m):
                self.turn = m
                return m
        return None

    def sole(self, m: int) -> bool:
        """Whether `m`, just chosen by `next`, is the only model `next` can choose until the
        batches or the queues change (so its turns follow each other)."""
        return self.count == 1 or not any(self._eligible(i) for i in range(self.count) if i != m)

    def _update_draining(self) -> None:
        """The models that stop admitting prompts so that the longest-waiting model that cannot
        be switched in yet will fit once they drain. The choice holds until that model is
        switched in (victims chosen afresh at every decision would take turns draining, and
        none would empty), or until no prompt of it waits (another node took them)."""
        if self.claim >= 0 and not self.resident[self.claim] and self.queues[self.claim]:
            return
        self.claim = -1
        queues = self.queues
        blocked = [
            m
            for m in range(self.count)
            if not self.resident[m] and queues[m] and self.victims(m, idle_only=True) is None
        ]
        if not blocked:
            self.draining = frozenset()
            return
        first = min(blocked, key=lambda m: (queues[m][0].arrival_s, queues[m][0].id))
        self.claim = first
        self.draining = frozenset(self.victims(first, idle_only=False) or ())

    def switch_in(self, m: int) -> tuple[int, ...]:
        """Evict what `m` needs (idle, least recently used first) and mark it resident."""
        evicted = tuple(self.victims(m, idle_only=True) or ())
        for i in evicted:
            self.resident[i] = False
        self.resident[m] = True
        return evicted
