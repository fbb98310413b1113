"""Each op's memory tiers: where its weights and the KV cache it touches live (`placement:`).

The sharding pass decides how many bytes an op moves; this pass says over which channel. An op's
streamed weights come from its part's tier (a decoder layer kind, the MTP module, the embedding or
the head), its cache reads and writes from the KV cache's; activations, workspace and spills stay
in HBM. A kernel reads DDR directly, as it reads HBM: the AGCUs are every kernel's portal to
off-chip memory (SnapStream paper §2.2), so nothing is staged through HBM first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rdusim.compiler.program import ExtraRole, OpPlan
from rdusim.spec.placement import PARTS, PlacementSpec, Tier

# The placement part an extra's weights belong to (the MTP module's drafts reuse the model's
# embedding and head, so they read them where those live).
PART_OF_ROLE = {
    ExtraRole.EMBEDDING: "embedding",
    ExtraRole.MTP_EMBEDDING: "embedding",
    ExtraRole.HEAD: "head",
    ExtraRole.MTP_HEAD: "head",
    ExtraRole.MTP_PROJECTION: "mtp",
    ExtraRole.MTP_LAYER: "mtp",
    ExtraRole.DRAFT_EMBEDDING: "draft",
    ExtraRole.DRAFT_LAYER: "draft",
    ExtraRole.DRAFT_HEAD: "draft",
}


@dataclass(frozen=True)
class Placement:
    """The tiers one compile uses: each part's weights (a part not listed: HBM) and the KV
    cache's."""

    weights: tuple[tuple[str, Tier], ...] = ()
    kv_cache: Tier = Tier.HBM

    @classmethod
    def of(cls, spec: PlacementSpec) -> Placement:
        return cls(tuple((p, spec.weights_of(p)) for p in PARTS), spec.kv_cache)

    def weights_of(self, part: str) -> Tier:
        return dict(self.weights).get(part, Tier.HBM)


def part_of(kind: str, role: ExtraRole | None) -> str:
    """The placement part of a layer kind (a decoder layer: its kind) or of an extra."""
    return kind if role is None else PART_OF_ROLE[role]


def place(ops: Iterable[OpPlan], weights: Tier, cache: Tier) -> None:
    """Put the ops' weights in `weights` and the cache they touch in `cache`."""
    for p in ops:
        p.weight_tier = weights
        p.cache_tier = cache
