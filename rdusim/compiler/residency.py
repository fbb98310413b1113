"""Which models a node holds at once, in DDR and in HBM, and what switching between them costs.

SN40L keeps many models on one node: their weights sit in each socket's DDR, and the model being
served has its weights in HBM. Each model's weights are sharded evenly over the node's sockets,
so a tier holds a set of models when the sum of their per-socket shares fits one socket's
capacity:

- DDR: `socket.ddr.capacity_bytes` per socket;
- HBM: `socket.hbm.capacity_bytes` x `calibration.hbm_usable_fraction` per socket (what the
  runtime leaves to weights, KV cache and workspace; only weights are counted here, so a
  deployment's KV cache and workspace come on top, as `rdusim map` plans them).

A model's weights are `summarize(model).weight_bytes` (the capacity rules' figure; DeepSeek's MTP
module is not in it).

A switch from model A to model B loads B's weights from DDR into HBM, replacing A: each socket
reads its shard of B from its own DDR and writes it into its own HBM, all sockets in parallel,
so the switch takes one shard over the slower of the socket's DDR read and HBM write bandwidths
(peak: no efficiency is calibrated for DDR). On SN40L HBM (1.6 TB/s) is far faster than DDR
(100 GB/s), so DDR bounds it. Nothing else is modelled to contend: no decode or prefill traffic
on DDR or HBM during the switch, no links (each socket loads its own shard), no host. A switch to
the model already resident costs 0. A model whose shard alone overflows usable HBM cannot be
switched in at all; its switch time is still given, as what loading its weights would take.

Pure functions of the model and the hardware spec: nothing is read from elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, takewhile
from typing import Any

from rdusim.ir.model import summarize
from rdusim.spec.hardware import Hardware
from rdusim.spec.model import ModelSpec

ASSUMPTIONS = (
    "weights sharded evenly over the node's sockets",
    "HBM counts weights only (KV cache and workspace come on top)",
    "a switch loads the new model's shard on every socket in parallel from DDR into HBM at "
    "peak bandwidth (the slower of DDR read and HBM write)",
    "nothing else contends during a switch: no decode or prefill traffic on DDR or HBM",
    "a switch to the model already resident costs 0",
    "a model whose shard alone overflows HBM cannot be switched in: its switch time is only what "
    "loading its weights would take",
)


@dataclass(frozen=True)
class ModelWeights:
    """A model's weight bytes on the node, and each socket's shard of them."""

    name: str
    weight_bytes: float
    per_socket_bytes: float


@dataclass(frozen=True)
class TierFit:
    """How the given models fit one memory tier of every socket."""

    tier: str  # "hbm" or "ddr"
    capacity_per_socket_bytes: float
    needed_per_socket_bytes: float  # every given model at once
    all_fit: bool
    fit_in_order: int  # loaded in the order given, the first this many fit together


@dataclass(frozen=True)
class Switch:
    """Loading `to`'s weights into HBM in place of `source`'s."""

    source: str
    to: str
    seconds: float


@dataclass(frozen=True)
class Residency:
    """Where the given models fit on a node and what switching between them costs."""

    hardware: str
    sockets: int
    switch_bandwidth: float  # bytes/s per socket a switch loads at
    models: tuple[ModelWeights, ...]
    hbm: TierFit
    ddr: TierFit
    switches: tuple[Switch, ...]  # every ordered pair, the model itself included

    def as_dict(self) -> dict[str, Any]:
        """The JSON report: plain values, in a fixed order."""
        return {
            "hardware": self.hardware,
            "sockets": self.sockets,
            "switch_bandwidth_per_socket": self.switch_bandwidth,
            "models": [
                {
                    "name": m.name,
                    "weight_bytes": m.weight_bytes,
                    "per_socket_bytes": m.per_socket_bytes,
                    "fits_hbm": m.per_socket_bytes <= self.hbm.capacity_per_socket_bytes,
                    "load_s": switch_seconds(m, None, self.sockets, self.switch_bandwidth),
                }
                for m in self.models
            ],
            "tiers": {t.tier: _tier_dict(t) for t in (self.hbm, self.ddr)},
            "switches": [
                {"from": s.source, "to": s.to, "seconds": s.seconds} for s in self.switches
            ],
            "assumptions": list(ASSUMPTIONS),
        }


def _tier_dict(t: TierFit) -> dict[str, Any]:
    return {
        "capacity_per_socket_bytes": t.capacity_per_socket_bytes,
        "needed_per_socket_bytes": t.needed_per_socket_bytes,
        "all_fit": t.all_fit,
        "fit_in_order": t.fit_in_order,
    }


def shard_bytes(weight_bytes: float, sockets: int) -> float:
    """Each socket's share of `weight_bytes` sharded evenly over `sockets`."""
    return weight_bytes / sockets


def model_weights(model: ModelSpec, sockets: int) -> ModelWeights:
    """A model's weight bytes and its per-socket shard on a node of `sockets`."""
    total = summarize(model).weight_bytes
    return ModelWeights(model.name, total, shard_bytes(total, sockets))


def hbm_capacity(hw: Hardware) -> float:
    """Bytes of one socket's HBM the runtime leaves to weights, KV cache and workspace."""
    return hw.socket.hbm.capacity_bytes * hw.calibration.hbm_usable_fraction


def ddr_capacity(hw: Hardware) -> float:
    """Bytes of one socket's DDR."""
    return hw.socket.ddr.capacity_bytes


def switch_bandwidth(hw: Hardware) -> float:
    """Bytes/s at which one socket loads weights from its DDR into its HBM: the slower of the
    two (DDR on SN40L)."""
    return min(hw.socket.ddr.bandwidth, hw.socket.hbm.bandwidth)


def fit_in_order(shares: Sequence[float], capacity: float) -> int:
    """How many of `shares`, loaded in the order given, fit `capacity` together: the longest
    prefix whose sum fits (loading stops at the first that would overflow)."""
    return sum(1 for _ in takewhile(lambda used: used <= capacity, accumulate(shares)))


def tier_fit(tier: str, shares: Sequence[float], capacity: float) -> TierFit:
    """How the models with these per-socket `shares` fit a tier of `capacity` bytes a socket
    (the total summed in the same order as `fit_in_order`'s, so the two always agree)."""
    needed = list(accumulate(shares, initial=0.0))[-1]
    return TierFit(tier, capacity, needed, needed <= capacity, fit_in_order(shares, capacity))


def switch_seconds(
    to: ModelWeights, resident: ModelWeights | None, sockets: int, bandwidth: float
) -> float:
    """Time to load `to`'s weights into HBM in place of `resident` (None: nothing resident):
    every socket loads its shard at `bandwidth` in parallel; 0 when `to` is already resident."""
    if resident == to:
        return 0.0
    return shard_bytes(to.weight_bytes, sockets) / bandwidth


def residency(models: Sequence[ModelSpec], hw: Hardware) -> Residency:
    """Where `models` fit on `hw`'s node, in the order given, and every pair's switch."""
    sockets = hw.sockets
    weights = tuple(model_weights(m, sockets) for m in models)
    shares = [w.per_socket_bytes for w in weights]
    bandwidth = switch_bandwidth(hw)
    switches = tuple(
        Switch(a.name, b.name, switch_seconds(b, a, sockets, bandwidth))
        for a in weights
        for b in weights
    )
    return Residency(
        hardware=hw.name,
        sockets=sockets,
        switch_bandwidth=bandwidth,
        models=weights,
        hbm=tier_fit("hbm", shares, hbm_capacity(hw)),
        ddr=tier_fit("ddr", shares, ddr_capacity(hw)),
        switches=switches,
    )
