"""Sizes of a SnapStream KV cache and the rules that check them.

A SnapStream cache has a fixed number of slots, ``sink + recent + topk``, whatever the prompt
length. Fixing the size up front is the whole point: a static-graph compiler allocates the
decode cache once and never reshapes it. This module holds the configuration, the checks that
catch impossible sizes early (with the offending parameter named), and the ring-buffer slot
formula the decoder uses to write a new token in place.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from enum import StrEnum
from typing import overload

import numpy as np
from numpy.typing import NDArray

__all__ = ["SnapStreamConfig", "VoteNormalisation"]


def _as_int(name: str, value: object) -> int:
    """Accept Python and numpy integers (but not bools or floats) for a size parameter."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, got {type(value).__name__} {value!r}"
        ) from None


class VoteNormalisation(StrEnum):
    """Keys over which an observation query's softmax is normalised before it votes.

    ``CAUSAL`` (default): every key the query sees under the causal mask, positions ``0`` to
    its own. These are the prefill attention weights themselves, which the original SnapKV
    reads, so a query votes with exactly the attention it paid to the candidates.
    ``CANDIDATES``: only the candidates it sees, so each query's votes sum to one. It is the
    SnapStream paper's equation (3) as written, and a recomputation of it needs only the
    candidate keys.
    """

    CAUSAL = "causal"
    CANDIDATES = "candidates"


@dataclass(frozen=True)
class SnapStreamConfig:
    """Budget of a SnapStream cache: ``[sink | recent ring buffer | top-K]``.

    Attributes:
        sink: leading prompt tokens kept for ever (attention sinks). May be 0.
        recent: size of the ring buffer holding the most recent tokens; at least 1, since
            decoding writes every new token into it.
        topk: number of prompt tokens between the sink and the recent window that SnapKV keeps.
            May be 0, which turns SnapStream into plain StreamingLLM.
        obs_window: number of trailing prompt queries whose attention votes for the top-K
            tokens; at least 1.
        pool_kernel: width of the average pooling over the votes, which keeps neighbours of a
            strongly attended token together; odd (so the window is centred) and at least 1.
    """

    sink: int
    recent: int
    topk: int
    obs_window: int
    pool_kernel: int = 1
    # keys each observation query's softmax is normalised over before it votes (prefill cost and
    # the reference's selection both follow it)
    normalisation: VoteNormalisation = VoteNormalisation.CAUSAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "normalisation", VoteNormalisation(self.normalisation))
        minimum = {"sink": 0, "recent": 1, "topk": 0, "obs_window": 1, "pool_kernel": 1}
        for name, low in minimum.items():
            value = _as_int(name, getattr(self, name))
            # Normalise numpy integers to int so the frozen instance hashes and compares simply.
            object.__setattr__(self, name, value)
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if self.pool_kernel % 2 == 0:
            raise ValueError(f"pool_kernel must be odd, got {self.pool_kernel}")

    @property
    def slots(self) -> int:
        """Fixed sequence length of the compressed cache."""
        return self.sink + self.recent + self.topk

    def candidates(self, seq_len: int) -> int:
        """Number of eviction candidates, positions ``[sink, seq_len - recent)``, of a prompt."""
        return max(seq_len - self.sink - self.recent, 0)

    def validate_for(self, seq_len: int, *, strict: bool = False) -> None:
        """Check that a prompt of ``seq_len`` tokens can be compressed with this configuration.

        Raises ``ValueError`` when the prompt is empty or shorter than the observation window
        (SnapKV needs ``obs_window`` real queries). A prompt with fewer eviction candidates than
        ``topk`` is normally fine: the missing top-K slots are padding, which is what the
        decoder's validity mask is for. With ``strict=True`` a prompt that is longer than
        ``sink + recent`` but still leaves fewer than ``topk`` candidates is rejected instead,
        naming ``topk``; prompts of at most ``sink + recent`` tokens are always accepted, since
        they keep every token and need no selection at all.
        """
        seq_len = _as_int("seq_len", seq_len)
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        if self.obs_window > seq_len:
            raise ValueError(
                f"obs_window must be <= the prompt length, got obs_window={self.obs_window} "
                f"for a prompt of {seq_len} tokens"
            )
        if strict and self.sink + self.recent < seq_len < self.slots:
            raise ValueError(
                f"topk={self.topk} exceeds the {self.candidates(seq_len)} eviction candidates "
                f"of a prompt of {seq_len} tokens (sink={self.sink}, recent={self.recent})"
            )

    @overload
    def ring_slot(self, position: int) -> int: ...
    @overload
    def ring_slot(self, position: NDArray[np.integer]) -> NDArray[np.int64]: ...
    def ring_slot(self, position: int | NDArray[np.integer]) -> int | NDArray[np.int64]:
        """Cache slot that the token at absolute ``position`` is written to while decoding.

        Positions below ``sink`` go to their own slot; later positions cycle through the ring
        buffer, ``sink + (position - sink) % recent``, so one scatter per step replaces the
        oldest recent token and nothing else moves. This is the 0-based write index of the
        paper's decode update (Listing 5) and agrees with its prefill ring construction
        (Listing 3); equation (4), as printed, writes the same rule with shifted offsets.
        """
        if isinstance(position, np.ndarray):
            p = position.astype(np.int64)
            if np.any(p < 0):
                raise ValueError("position must be >= 0")
            ring = self.sink + (p - self.sink) % self.recent
            return np.where(p < self.sink, p, ring)
        p_int = _as_int("position", position)
        if p_int < 0:
            raise ValueError(f"position must be >= 0, got {p_int}")
        if p_int < self.sink:
            return p_int
        return self.sink + (p_int - self.sink) % self.recent
