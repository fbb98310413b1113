"""NumPy reference of SnapStream: SnapKV compression at prefill, StreamingLLM while decoding.

SnapStream gives every sequence a KV cache of one fixed length, ``sink + recent + topk``:

``[sink tokens | recent tokens (ring buffer) | top-K tokens chosen by SnapKV]``

Why this shape. A static-graph deployment compiles prefill and decode once, for fixed tensor
shapes, and batches sequences of different lengths together. Every array here therefore keeps
one shape for the life of a sequence; prompts shorter than the budget fill the spare slots with
padding (position ``-1``) that a validity mask hides from attention. Short prompts need no
special graph, and a batch may mix prompt lengths (``lengths=``).

Why a ring buffer. The obvious sliding window drops the oldest recent token by slicing the
cache and concatenating the pieces with the new token every decode step
(:class:`NaiveSnapStreamCache`). Such a concatenation cannot be split along the sequence
dimension, so on a dataflow accelerator it needs whole-sequence temporaries on chip. Laying the
recent region out as a ring buffer at prefill time (:class:`SnapStreamCache`) turns the decode
update into one in-place scatter at slot ``sink + (p - sink) % recent`` for the token at
position ``p``; the decode graph is then the ordinary static-cache decode graph with a different
write index. Attention is order-free over the cached slots, so both layouts give the same
results; the tests check this.

Selection (SnapKV). The last ``obs_window`` prompt queries vote for the eviction candidates,
positions ``[sink, L - recent)``. A vote is an attention weight, and :class:`VoteNormalisation`
says which keys that weight is normalised over. The default, ``CAUSAL``, is the original
SnapKV's rule: each query takes its ordinary causal softmax over every key up to its own
position (sink, candidates, recent tokens and earlier window tokens alike), and only the weight
that lands on candidates counts, so a query that mostly attends to the sink or to its
neighbours casts a small vote. ``CANDIDATES`` renormalises each query over the candidates it
can see, so every query casts a whole vote; that is equation (3) of the SnapStream paper as
written, and a recomputation that reads only the candidate keys gives exactly this. Either
way the votes are summed over the window (and over the query heads that share a KV head),
smoothed with a centred average pool of width ``pool_kernel`` (zero padding, stride 1, so
nothing outside the candidates leaks in), and the ``topk`` best candidates are kept. For MLA,
whose latent cache is shared by all heads, ``shared_selection=True`` sums the votes over every
head and keeps one set of positions. Both rules are masks over one ``(window, seq)`` logits
array per head, so a batch of mixed prompt lengths needs no per-length shapes.

Conventions: positions are 0-based absolute token indices; arrays are
``(batch, heads, seq, head_dim)``; ``q_heads`` must be a multiple of ``kv_heads`` and query head
``h`` reads KV head ``h // (q_heads // kv_heads)``. Computations use the promoted floating dtype
of the inputs (at least float32).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Self

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import ArrayLike, NDArray

from rdusim.snapstream.config import SnapStreamConfig, VoteNormalisation

__all__ = [
    "NaiveSnapStreamCache",
    "SnapStreamCache",
    "SnapStreamCacheBase",
    "VoteNormalisation",
    "attend",
    "full_attention",
    "masked_attention",
    "select_topk",
    "snapkv_scores",
]

FloatArray = NDArray[np.floating]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


# --------------------------------------------------------------------------------------------
# helpers


def _rank4(name: str, x: ArrayLike) -> FloatArray:
    arr = np.asarray(x)
    if arr.ndim != 4:
        raise ValueError(f"{name} must have 4 dims (batch, heads, seq, head_dim), got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    return arr


def _compute_dtype(*arrays: np.ndarray) -> np.dtype[np.floating]:
    return np.result_type(*[a.dtype for a in arrays], np.float32)


def _group_size(q_heads: int, kv_heads: int) -> int:
    if kv_heads < 1 or q_heads % kv_heads != 0:
        raise ValueError(
            f"q_heads must be a multiple of kv_heads, got q_heads={q_heads}, kv_heads={kv_heads}"
        )
    return q_heads // kv_heads


def _masked_softmax(logits: FloatArray, mask: BoolArray) -> FloatArray:
    """Softmax over the last axis restricted to ``mask``; rows with nothing allowed are zero."""
    masked = np.where(mask, logits, -np.inf)
    row_max = masked.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    weights = np.where(mask, np.exp(masked - row_max), 0.0)
    denom = weights.sum(axis=-1, keepdims=True)
    return np.divide(weights, denom, out=np.zeros_like(weights), where=denom > 0)


def _readonly(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


def _resolve_lengths(
    lengths: ArrayLike | None, batch: int, seq: int, config: SnapStreamConfig, strict: bool
) -> IntArray:
    """Per-sequence prompt lengths, checked against the padded ``seq`` and the config."""
    if lengths is None:
        out = np.full(batch, seq, dtype=np.int64)
    else:
        raw = np.asarray(lengths)
        if raw.shape != (batch,) or not np.issubdtype(raw.dtype, np.integer):
            raise ValueError(f"lengths must be an integer array of shape ({batch},), got {raw!r}")
        out = raw.astype(np.int64)
    for length in out.tolist():
        if length > seq:
            raise ValueError(f"lengths must be <= the padded sequence length {seq}, got {length}")
        config.validate_for(length, strict=strict)
    return out


def _avg_pool(votes: FloatArray, kernel: int) -> FloatArray:
    """Centred 1-D average pool along the last axis: stride 1, zero padding, divide by kernel."""
    if kernel == 1:
        return votes
    pad = kernel // 2
    padded = np.pad(votes, [(0, 0)] * (votes.ndim - 1) + [(pad, pad)])
    return sliding_window_view(padded, kernel, axis=-1).mean(axis=-1)


# --------------------------------------------------------------------------------------------
# SnapKV selection


def _as_normalisation(value: VoteNormalisation | str) -> VoteNormalisation:
    try:
        return VoteNormalisation(value)
    except ValueError:
        choices = ", ".join(repr(rule.value) for rule in VoteNormalisation)
        raise ValueError(f"normalisation must be one of {choices}, got {value!r}") from None


def _check_selection_inputs(q: FloatArray, k: FloatArray, config: SnapStreamConfig) -> int:
    """Check ``q_obs`` against ``k`` and the config; return the query heads per KV head."""
    batch, q_heads, window, head_dim = q.shape
    kb, kv_heads, _, kd = k.shape
    if kb != batch:
        raise ValueError(f"q_obs and k must share the batch size, got {batch} and {kb}")
    if kd != head_dim:
        raise ValueError(f"q_obs and k must share head_dim, got {head_dim} and {kd}")
    if window != config.obs_window:
        raise ValueError(
            f"obs_window={config.obs_window} but q_obs holds {window} queries per head"
        )
    return _group_size(q_heads, kv_heads)


def _vote_masks(
    lengths: IntArray,
    window: int,
    seq: int,
    config: SnapStreamConfig,
    normalisation: VoteNormalisation,
) -> tuple[BoolArray, BoolArray]:
    """Candidates ``(batch, seq)`` and the keys each window query normalises over ``(b, w, s)``.

    Query ``i`` of prompt ``b`` sits at ``lengths[b] - window + i`` and sees keys up to itself,
    hence never a padded key of a shorter prompt.
    """
    pos = np.arange(seq)
    candidate = (pos >= config.sink) & (pos < (lengths - config.recent)[:, None])
    query_pos = lengths[:, None] - window + np.arange(window)
    causal = pos[None, None, :] <= query_pos[:, :, None]
    if normalisation is VoteNormalisation.CANDIDATES:
        return candidate, causal & candidate[:, None, :]
    return candidate, causal


def snapkv_scores(
    q_obs: ArrayLike,
    k: ArrayLike,
    config: SnapStreamConfig,
    *,
    shared_across_heads: bool = False,
    lengths: ArrayLike | None = None,
    normalisation: VoteNormalisation | str = VoteNormalisation.CAUSAL,
) -> FloatArray:
    """Pooled SnapKV votes of every position, ``(batch, kv_heads, seq)``.

    ``q_obs[b]`` are the queries at positions ``lengths[b] - obs_window ... lengths[b] - 1``
    (the last ``obs_window`` of that prompt); ``k`` holds the prompt keys padded to a common
    ``seq``. ``normalisation`` picks the keys each query's softmax runs over (see
    :class:`VoteNormalisation`); only weights on candidates are summed and pooled. Positions
    that are not eviction candidates score ``-inf``. A query never votes for a candidate after
    itself, which only matters when ``obs_window > recent``. With ``shared_across_heads`` every
    row holds the same total over all heads.
    """
    rule = _as_normalisation(normalisation)
    q = _rank4("q_obs", q_obs)
    kk = _rank4("k", k)
    group = _check_selection_inputs(q, kk, config)
    batch, kv_heads, seq, head_dim = kk.shape
    lens = _resolve_lengths(lengths, batch, seq, config, strict=False)

    dtype = _compute_dtype(q, kk)
    k_per_q = np.repeat(kk.astype(dtype), group, axis=1)
    logits = np.einsum("bhwd,bhsd->bhws", q.astype(dtype), k_per_q) / math.sqrt(head_dim)
    candidate, visible = _vote_masks(lens, config.obs_window, seq, config, rule)
    weights = _masked_softmax(logits, visible[:, None, :, :])

    # Zero the weight on non-candidates before pooling so that none of it leaks in.
    on_candidates = np.where(candidate[:, None, None, :], weights, 0.0)
    votes = on_candidates.sum(axis=2).reshape(batch, kv_heads, group, seq).sum(axis=2)
    if shared_across_heads:
        votes = np.broadcast_to(votes.sum(axis=1, keepdims=True), votes.shape)
    pooled = _avg_pool(votes, config.pool_kernel)
    return np.where(candidate[:, None, :], pooled, -np.inf).astype(dtype)


def _topk_positions(scores: FloatArray, topk: int) -> IntArray:
    """Best ``topk`` finite scores per row, as ascending positions padded with ``-1``."""
    batch, heads, seq = scores.shape
    out = np.full((batch, heads, topk), -1, dtype=np.int64)
    take = min(topk, seq)
    if take == 0:
        return out
    # Stable sort on the negated scores: ties go to the earlier position, deterministically.
    order = np.argsort(-scores, axis=-1, kind="stable")[..., :take]
    chosen = np.isfinite(np.take_along_axis(scores, order, axis=-1))
    out[..., :take] = np.where(chosen, order, -1)
    # Ascending positions, padding last (the order inside the top-K region is cosmetic).
    key = np.where(out < 0, seq, out)
    out = np.sort(key, axis=-1)
    return np.where(out == seq, -1, out).astype(np.int64)


def select_topk(
    q_obs: ArrayLike,
    k: ArrayLike,
    config: SnapStreamConfig,
    shared_across_heads: bool = False,
    *,
    lengths: ArrayLike | None = None,
    normalisation: VoteNormalisation | str = VoteNormalisation.CAUSAL,
) -> IntArray:
    """Positions SnapKV keeps, ``(batch, kv_heads, topk)`` int64, ascending, ``-1`` = padding.

    Per KV head for MHA/GQA; with ``shared_across_heads`` (MLA's shared latent) every head gets
    the same positions. A prompt with fewer than ``topk`` candidates pads the remainder.
    ``normalisation`` is passed to :func:`snapkv_scores`; ties go to the earlier position.
    """
    scores = snapkv_scores(
        q_obs,
        k,
        config,
        shared_across_heads=shared_across_heads,
        lengths=lengths,
        normalisation=normalisation,
    )
    return _topk_positions(scores, config.topk)


# --------------------------------------------------------------------------------------------
# attention


def masked_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, valid: ArrayLike) -> FloatArray:
    """Scaled dot-product attention of ``q`` over the slots of ``k``/``v`` marked ``valid``.

    ``q`` is ``(batch, q_heads, n, head_dim)``, ``k`` ``(batch, kv_heads, s, head_dim)``, ``v``
    ``(batch, kv_heads, s, v_dim)`` and ``valid`` ``(batch, kv_heads, s)``. No causal mask: every
    query sees every valid slot, which is right for decode queries after the cached tokens.
    """
    qq = _rank4("q", q)
    kk = _rank4("k", k)
    vv = _rank4("v", v)
    mask = np.asarray(valid, dtype=bool)
    batch, q_heads, _, head_dim = qq.shape
    if kk.shape[0] != batch or kk.shape[3] != head_dim:
        raise ValueError(f"q {qq.shape} and k {kk.shape} disagree on batch or head_dim")
    if vv.shape[:3] != kk.shape[:3]:
        raise ValueError(f"v {vv.shape} must match k {kk.shape} in batch, heads and seq")
    if mask.shape != kk.shape[:3]:
        raise ValueError(f"valid must have shape {kk.shape[:3]}, got {mask.shape}")
    group = _group_size(q_heads, kk.shape[1])

    dtype = _compute_dtype(qq, kk, vv)
    k_per_q = np.repeat(kk.astype(dtype), group, axis=1)
    v_per_q = np.repeat(vv.astype(dtype), group, axis=1)
    mask_per_q = np.repeat(mask, group, axis=1)[:, :, None, :]
    logits = np.einsum("bhnd,bhsd->bhns", qq.astype(dtype), k_per_q) / math.sqrt(head_dim)
    weights = _masked_softmax(logits, mask_per_q)
    return np.einsum("bhns,bhsd->bhnd", weights, v_per_q)


def full_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, lengths: ArrayLike | None = None
) -> FloatArray:
    """Uncompressed attention of ``q`` over all keys (the first ``lengths[b]`` when given)."""
    kk = np.asarray(k)
    if kk.ndim != 4:
        raise ValueError(f"k must have 4 dims (batch, heads, seq, head_dim), got {kk.shape}")
    batch, kv_heads, seq, _ = kk.shape
    lens = np.full(batch, seq) if lengths is None else np.asarray(lengths).reshape(batch)
    valid = np.arange(seq)[None, :] < lens[:, None]
    return masked_attention(q, kk, v, np.broadcast_to(valid[:, None, :], (batch, kv_heads, seq)))


# --------------------------------------------------------------------------------------------
# caches


class SnapStreamCacheBase(ABC):
    """State shared by both layouts: fixed-size key/value/position buffers and a length each.

    Use the :meth:`prefill` class method of a concrete layout to build one. All buffers keep
    the shape ``(batch, kv_heads, slots, ...)`` for the life of the cache.
    """

    def __init__(
        self,
        config: SnapStreamConfig,
        keys: FloatArray,
        values: FloatArray,
        positions: IntArray,
        lengths: IntArray,
    ) -> None:
        self._config = config
        self._keys = keys
        self._values = values
        self._positions = positions
        self._lengths = lengths

    # -- construction -----------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def _streaming_positions(cls, config: SnapStreamConfig, lengths: IntArray) -> IntArray:
        """Positions of the ``sink + recent`` slots after prefill, ``(batch, sink + recent)``."""

    @classmethod
    def prefill(
        cls,
        q_obs: ArrayLike,
        k: ArrayLike,
        v: ArrayLike,
        config: SnapStreamConfig,
        *,
        shared_selection: bool = False,
        lengths: ArrayLike | None = None,
        strict: bool = False,
        normalisation: VoteNormalisation | str = VoteNormalisation.CAUSAL,
    ) -> Self:
        """Compress a prompt's keys and values into a cache of ``config.slots`` slots.

        Args:
            q_obs: ``(batch, q_heads, obs_window, head_dim)``, the last ``obs_window`` queries
                of each prompt (ending at ``lengths[b] - 1``).
            k: ``(batch, kv_heads, seq, head_dim)`` prompt keys, padded to ``seq``.
            v: ``(batch, kv_heads, seq, v_dim)`` prompt values; ``v_dim`` may differ.
            config: cache budget.
            shared_selection: one top-K selection for all heads (MLA) instead of one per KV
                head.
            lengths: ``(batch,)`` prompt lengths; defaults to ``seq`` for every sequence.
            strict: reject prompts longer than ``sink + recent`` with fewer than ``topk``
                candidates instead of padding the top-K region (see
                :meth:`SnapStreamConfig.validate_for`).
            normalisation: keys each observation query's vote is normalised over; the default
                is the original SnapKV's causal softmax (see :class:`VoteNormalisation`).

        A prompt of ``L <= sink + recent`` tokens keeps every token at its own slot, the rest
        is padding and so is the whole top-K region; decoding then fills the slots in order.
        """
        kk = _rank4("k", k)
        vv = _rank4("v", v)
        if vv.shape[:3] != kk.shape[:3]:
            raise ValueError(f"v {vv.shape} must match k {kk.shape} in batch, heads and seq")
        batch, kv_heads, seq, _ = kk.shape
        lens = _resolve_lengths(lengths, batch, seq, config, strict)
        topk_pos = select_topk(
            q_obs, kk, config, shared_selection, lengths=lens, normalisation=normalisation
        )

        stream_pos = cls._streaming_positions(config, lens)
        stream_pos = np.broadcast_to(stream_pos[:, None, :], (batch, kv_heads, stream_pos.shape[1]))
        positions = np.concatenate([stream_pos, topk_pos], axis=2).astype(np.int64)

        valid = positions >= 0
        index = np.where(valid, positions, 0)[..., None]
        keys = np.where(valid[..., None], np.take_along_axis(kk, index, axis=2), 0)
        values = np.where(valid[..., None], np.take_along_axis(vv, index, axis=2), 0)
        return cls(config, keys.astype(kk.dtype), values.astype(vv.dtype), positions, lens.copy())

    # -- read-only state ----------------------------------------------------------------------

    @property
    def config(self) -> SnapStreamConfig:
        return self._config

    @property
    def keys(self) -> FloatArray:
        """``(batch, kv_heads, slots, head_dim)``; padding slots are zero."""
        return _readonly(self._keys)

    @property
    def values(self) -> FloatArray:
        """``(batch, kv_heads, slots, v_dim)``; padding slots are zero."""
        return _readonly(self._values)

    @property
    def positions(self) -> IntArray:
        """``(batch, kv_heads, slots)`` absolute token index held by each slot, ``-1`` if none."""
        return _readonly(self._positions)

    @property
    def valid(self) -> BoolArray:
        """``(batch, kv_heads, slots)`` mask of the slots holding a token."""
        return _readonly(self._positions >= 0)

    @property
    def lengths(self) -> IntArray:
        """``(batch,)`` tokens seen so far (prompt plus appended), i.e. the next position."""
        return _readonly(self._lengths)

    # -- decode -------------------------------------------------------------------------------

    def _check_step(self, k: ArrayLike, v: ArrayLike) -> tuple[FloatArray, FloatArray]:
        kk = _rank4("k", k)
        vv = _rank4("v", v)
        batch, kv_heads, _, head_dim = self._keys.shape
        want_k = (batch, kv_heads, 1, head_dim)
        want_v = (batch, kv_heads, 1, self._values.shape[3])
        if kk.shape != want_k:
            raise ValueError(f"k must have shape {want_k}, got {kk.shape}")
        if vv.shape != want_v:
            raise ValueError(f"v must have shape {want_v}, got {vv.shape}")
        return kk, vv

    @abstractmethod
    def append(self, k: ArrayLike, v: ArrayLike) -> IntArray:
        """Add one decoded token per sequence in place; return the evicted positions ``(batch,)``.

        ``-1`` means the token went into a padding slot and nothing was evicted.
        """


class SnapStreamCache(SnapStreamCacheBase):
    """SnapStream cache whose recent region is a ring buffer: one scatter per decode step.

    Slot ``sink + j`` holds the latest token ``p >= sink`` with ``(p - sink) % recent == j``, so
    the token decoded at position ``p`` overwrites exactly the oldest recent token.
    """

    @classmethod
    def _streaming_positions(cls, config: SnapStreamConfig, lengths: IntArray) -> IntArray:
        sink, recent = config.sink, config.recent
        slot = np.arange(sink)
        sink_pos = np.where(slot[None, :] < lengths[:, None], slot[None, :], -1)
        # Ring slot j: the largest p < L with p >= sink and p = sink + j (mod recent).
        j = np.arange(recent)
        behind = lengths[:, None] - 1 - sink - j[None, :]
        ring_pos = np.where(behind >= 0, sink + j + recent * (behind // recent), -1)
        return np.concatenate([sink_pos, ring_pos], axis=1).astype(np.int64)

    def append(self, k: ArrayLike, v: ArrayLike) -> IntArray:
        kk, vv = self._check_step(k, v)
        position = self._lengths.copy()
        slot = self._config.ring_slot(position)
        rows = np.arange(position.shape[0])
        evicted = self._positions[rows, 0, slot].copy()
        # The whole decode update: one scatter into each buffer at the ring index.
        self._keys[rows, :, slot, :] = kk[:, :, 0, :]
        self._values[rows, :, slot, :] = vv[:, :, 0, :]
        self._positions[rows, :, slot] = position[:, None]
        self._lengths += 1
        return evicted


class NaiveSnapStreamCache(SnapStreamCacheBase):
    """SnapStream cache with a chronological sliding window, for comparison.

    Until the sink and recent regions are full, a decoded token is scattered into its own slot.
    Afterwards each step rebuilds the cache as ``[sink | recent[1:] + new | top-K]`` from slices
    and a concatenation, the update that the ring buffer avoids.
    """

    @classmethod
    def _streaming_positions(cls, config: SnapStreamConfig, lengths: IntArray) -> IntArray:
        sink, recent = config.sink, config.recent
        slot = np.arange(sink)
        sink_pos = np.where(slot[None, :] < lengths[:, None], slot[None, :], -1)
        start = np.maximum(sink, lengths - recent)
        recent_pos = start[:, None] + np.arange(recent)[None, :]
        recent_pos = np.where(recent_pos < lengths[:, None], recent_pos, -1)
        return np.concatenate([sink_pos, recent_pos], axis=1).astype(np.int64)

    def append(self, k: ArrayLike, v: ArrayLike) -> IntArray:
        kk, vv = self._check_step(k, v)
        sink, recent = self._config.sink, self._config.recent
        window_end = sink + recent
        position = self._lengths.copy()
        rows = np.arange(position.shape[0])
        new_pos = np.broadcast_to(position[:, None, None], (*self._positions.shape[:2], 1))

        def _update(buffer: np.ndarray, new: np.ndarray) -> np.ndarray:
            # Case 1 (window not full yet): scatter the token into its own slot.
            scattered = buffer.copy()
            scattered[rows, :, np.minimum(position, window_end - 1)] = new[:, :, 0]
            # Case 2 (window full): drop the oldest recent token by slicing and concatenating.
            slid = np.concatenate(
                [
                    buffer[:, :, :sink],
                    buffer[:, :, sink + 1 : window_end],
                    new,
                    buffer[:, :, window_end:],
                ],
                axis=2,
            )
            full = (position >= window_end).reshape((-1,) + (1,) * (buffer.ndim - 1))
            return np.where(full, slid, scattered)

        evicted = np.where(position >= window_end, self._positions[:, 0, sink], -1)
        self._keys[...] = _update(self._keys, kk)
        self._values[...] = _update(self._values, vv)
        self._positions[...] = _update(self._positions, new_pos)
        self._lengths += 1
        return evicted.astype(np.int64)


def attend(q: ArrayLike, cache: SnapStreamCacheBase) -> FloatArray:
    """Attention of ``q`` ``(batch, q_heads, n, head_dim)`` over the valid slots of ``cache``."""
    return masked_attention(q, cache.keys, cache.values, cache.valid)
