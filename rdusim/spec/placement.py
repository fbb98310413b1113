"""Where a mapping keeps its weights and KV cache: HBM or DDR (`placement:`).

An SN40L socket has three memory tiers: on-chip SRAM, HBM (64 GB, 1.6 TB/s) and DDR (1.5 TB,
100 GB/s). The compiler plans SRAM itself; `placement` says which off-chip tier holds each part of
the model, so a deployment can trade HBM capacity for DDR's sixteen-times-slower streaming:

    placement:
      weights: hbm        # every weight not placed below
      moe: ddr            # the MoE layers' weights (layer kinds: dense, moe)
      kv_cache: hbm

Weights are placed per part: a decoder layer kind (`dense`, `moe`), the MTP module (`mtp`), the
token embedding (`embedding`), the LM head (`head`) and a speculative draft model (`draft`, all
its weights); a part not named takes `weights`. The KV cache has one tier (a draft model's cache
included). Everything defaults to HBM.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.base import Strict
from rdusim.spec.model import ModelSpec
from rdusim.spec.yamlio import did_you_mean, line_of


class Tier(StrEnum):
    """An off-chip memory tier of a socket."""

    HBM = "hbm"
    DDR = "ddr"


# The parts whose weights are placed one by one; decoder layer kinds first.
LAYER_KINDS = ("dense", "moe")
PARTS = (*LAYER_KINDS, "mtp", "embedding", "head", "draft")


class PlacementSpec(Strict):
    """The tier of each part's weights (`weights` for every part not named) and of the KV
    cache."""

    weights: Tier = Field(default=Tier.HBM, description="every weight not placed by part")
    dense: Tier | None = Field(default=None, description="the dense decoder layers' weights")
    moe: Tier | None = Field(default=None, description="the MoE decoder layers' weights")
    mtp: Tier | None = Field(default=None, description="the MTP module's own weights")
    embedding: Tier | None = Field(default=None, description="the token embedding table")
    head: Tier | None = Field(default=None, description="the final norm and LM head")
    draft: Tier | None = Field(default=None, description="a speculative draft model's weights")
    kv_cache: Tier = Field(default=Tier.HBM, description="the KV cache of every layer")

    def weights_of(self, part: str) -> Tier:
        """The tier of `part`'s weights (one of `PARTS`)."""
        if part not in PARTS:
            raise ValueError(f"unknown placement part {part!r}: one of {', '.join(PARTS)}")
        tier: Tier | None = getattr(self, part)
        return tier if tier is not None else self.weights


def model_parts(model: ModelSpec, has_draft: bool = False) -> set[str]:
    """The placement parts `model` has: its layer kinds, `mtp` with an MTP module, `draft` with a
    draft model (`speculative:`), and always the embedding and the head."""
    parts = {model.layer_kind(i) for i in range(model.num_hidden_layers)}
    if getattr(model, "num_nextn_predict_layers", 0):
        parts.add("mtp")
    if has_draft:
        parts.add("draft")
    return parts | {"embedding", "head"}


def check_placement(
    placement: PlacementSpec, model: ModelSpec, file: str, doc: Any, has_draft: bool = False
) -> None:
    """A part the model lacks (`moe` on Llama, `mtp` without an MTP module, `draft` without a
    draft model) would be placed and then ignored: refuse it, every such key at once."""
    have = model_parts(model, has_draft)
    listed = ", ".join(p for p in PARTS if p in have)
    errors = [
        SpecError(
            f"{model.name} has no {part!r} weights to place (its parts: {listed})",
            file=file,
            key=f"placement.{part}",
            line=line_of(doc, ("placement", part)) if doc is not None else None,
            fix=did_you_mean(part, have)
            + f"place one of {listed}, or all weights with placement.weights",
        )
        for part in PARTS
        if getattr(placement, part) is not None and part not in have
    ]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)
