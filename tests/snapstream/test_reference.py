"""Tests of the NumPy SnapStream reference: ring-buffer layout, decode updates, examples.

The selection rule itself is checked against a brute force in ``test_selection.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.snapstream.config import SnapStreamConfig
from rdusim.snapstream.reference import (
    NaiveSnapStreamCache,
    SnapStreamCache,
    SnapStreamCacheBase,
    VoteNormalisation,
    attend,
    full_attention,
    masked_attention,
    select_topk,
    snapkv_scores,
)

PROPERTY = settings(max_examples=100, deadline=None)


# --------------------------------------------------------------------------------------------
# scenario generation


@dataclass(frozen=True)
class Scenario:
    """A batch of prompts plus the tokens later decoded for each of them."""

    config: SnapStreamConfig
    batch: int
    kv_heads: int
    group: int
    head_dim: int
    v_dim: int
    seq: int
    lengths: tuple[int, ...]
    steps: int
    shared: bool
    seed: int

    def tensors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Return ``q_obs``, padded prompt ``k``/``v`` and the full token streams ``k``/``v``.

        Prompt slots past each length are NaN so that any leak of padding shows up.
        """
        rng = np.random.default_rng(self.seed)
        total = self.seq + self.steps
        stream_k = rng.standard_normal((self.batch, self.kv_heads, total, self.head_dim))
        stream_v = rng.standard_normal((self.batch, self.kv_heads, total, self.v_dim))
        q_obs = rng.standard_normal(
            (self.batch, self.kv_heads * self.group, self.config.obs_window, self.head_dim)
        )
        k = stream_k[:, :, : self.seq].copy()
        v = stream_v[:, :, : self.seq].copy()
        for b, length in enumerate(self.lengths):
            k[b, :, length:] = np.nan
            v[b, :, length:] = np.nan
        return q_obs, k, v, stream_k, stream_v


@st.composite
def scenarios(draw: st.DrawFn, max_seq: int = 48) -> Scenario:
    config = SnapStreamConfig(
        sink=draw(st.integers(0, 4)),
        recent=draw(st.integers(1, 6)),
        topk=draw(st.integers(0, 6)),
        obs_window=draw(st.integers(1, 6)),
        pool_kernel=draw(st.sampled_from([1, 3, 5])),
    )
    batch = draw(st.integers(1, 2))
    seq = draw(st.integers(config.obs_window, max_seq))
    lengths = draw(st.lists(st.integers(config.obs_window, seq), min_size=batch, max_size=batch))
    return Scenario(
        config=config,
        batch=batch,
        kv_heads=draw(st.integers(1, 2)),
        group=draw(st.integers(1, 2)),
        head_dim=draw(st.integers(4, 8)),
        v_dim=draw(st.integers(3, 6)),
        seq=seq,
        lengths=tuple(lengths),
        steps=draw(st.integers(0, 16)),
        shared=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def _triples(cache: SnapStreamCacheBase, b: int, h: int) -> tuple[np.ndarray, ...]:
    """The (position, key, value) contents of one head, sorted by position."""
    valid = cache.valid[b, h]
    pos = cache.positions[b, h][valid]
    order = np.argsort(pos)
    return pos[order], cache.keys[b, h][valid][order], cache.values[b, h][valid][order]


# --------------------------------------------------------------------------------------------
# properties


@PROPERTY
@given(scenarios())
def test_ring_and_naive_caches_agree_through_decode(sc: Scenario) -> None:
    cfg = sc.config
    q_obs, k, v, stream_k, stream_v = sc.tensors()
    lengths = np.array(sc.lengths)
    kwargs = {"shared_selection": sc.shared, "lengths": lengths}
    ring = SnapStreamCache.prefill(q_obs, k, v, cfg, **kwargs)
    naive = NaiveSnapStreamCache.prefill(q_obs, k, v, cfg, **kwargs)
    shape = (sc.batch, sc.kv_heads, cfg.slots)
    topk_at_prefill = ring.positions[..., cfg.sink + cfg.recent :].copy()
    rng = np.random.default_rng(sc.seed + 1)
    rows = np.arange(sc.batch)

    for step in range(sc.steps + 1):
        seen = lengths + step
        # Shapes never change and nothing is NaN: padding never leaks into the cache.
        for cache in (ring, naive):
            assert cache.keys.shape == (*shape, sc.head_dim)
            assert cache.values.shape == (*shape, sc.v_dim)
            assert cache.positions.shape == shape and cache.positions.dtype == np.int64
            assert cache.valid.shape == shape
            assert not np.isnan(cache.keys).any() and not np.isnan(cache.values).any()
            np.testing.assert_array_equal(cache.lengths, seen)
            np.testing.assert_array_equal(
                cache.positions[..., cfg.sink + cfg.recent :], topk_at_prefill
            )

        for b in range(sc.batch):
            n = int(seen[b])
            for h in range(sc.kv_heads):
                # Same (position, key, value) triples, and they are the right tokens.
                r_pos, r_k, r_v = _triples(ring, b, h)
                n_pos, n_k, n_v = _triples(naive, b, h)
                np.testing.assert_array_equal(r_pos, n_pos)
                np.testing.assert_array_equal(r_k, n_k)
                np.testing.assert_array_equal(r_v, n_v)
                np.testing.assert_array_equal(r_k, stream_k[b, h, r_pos])
                np.testing.assert_array_equal(r_v, stream_v[b, h, r_pos])
                # Sinks sit at their own slots; the ring holds exactly the last tokens, each at
                # the slot given by the ring formula.
                sink_pos = ring.positions[b, h, : cfg.sink]
                expected_sink = np.where(np.arange(cfg.sink) < n, np.arange(cfg.sink), -1)
                np.testing.assert_array_equal(sink_pos, expected_sink)
                ring_pos = ring.positions[b, h, cfg.sink : cfg.sink + cfg.recent]
                live = ring_pos[ring_pos >= 0]
                assert sorted(live.tolist()) == list(range(max(cfg.sink, n - cfg.recent), n))
                np.testing.assert_array_equal(
                    cfg.sink + np.flatnonzero(ring_pos >= 0), cfg.ring_slot(live)
                )
                # The naive recent window is chronological.
                naive_recent = naive.positions[b, h, cfg.sink : cfg.sink + cfg.recent]
                naive_live = naive_recent[naive_recent >= 0]
                assert np.all(np.diff(naive_live) == 1)

        q = rng.standard_normal((sc.batch, sc.kv_heads * sc.group, 1, sc.head_dim))
        out = attend(q, ring)
        assert out.shape == (sc.batch, sc.kv_heads * sc.group, 1, sc.v_dim)
        np.testing.assert_allclose(out, attend(q, naive), rtol=1e-10, atol=1e-12)
        # Nothing evicted yet: the compressed cache is exact.
        full = full_attention(q, stream_k, stream_v, lengths=seen)
        for b in np.flatnonzero(seen <= cfg.sink + cfg.recent):
            np.testing.assert_allclose(out[b], full[b], rtol=1e-10, atol=1e-12)

        if step == sc.steps:
            break
        new_k = stream_k[rows, :, seen][:, :, None, :]
        new_v = stream_v[rows, :, seen][:, :, None, :]
        ring_before = ring.positions[:, 0, cfg.sink : cfg.sink + cfg.recent].copy()
        evicted_ring = ring.append(new_k, new_v)
        evicted_naive = naive.append(new_k, new_v)
        np.testing.assert_array_equal(evicted_ring, evicted_naive)
        for b in range(sc.batch):
            if seen[b] >= cfg.sink + cfg.recent:
                # Overflow: the victim is the oldest recent token.
                assert evicted_ring[b] == ring_before[b].min() == seen[b] - cfg.recent
            else:
                assert evicted_ring[b] == -1


@PROPERTY
@given(scenarios(max_seq=32), st.sampled_from(VoteNormalisation))
def test_batched_lengths_match_single_prompts(sc: Scenario, rule: VoteNormalisation) -> None:
    q_obs, k, v, _, _ = sc.tensors()
    batched = SnapStreamCache.prefill(
        q_obs, k, v, sc.config, shared_selection=sc.shared, lengths=sc.lengths, normalisation=rule
    )
    for b, length in enumerate(sc.lengths):
        single = SnapStreamCache.prefill(
            q_obs[b : b + 1],
            k[b : b + 1, :, :length],
            v[b : b + 1, :, :length],
            sc.config,
            shared_selection=sc.shared,
            normalisation=rule,
        )
        np.testing.assert_array_equal(single.positions[0], batched.positions[b])
        np.testing.assert_array_equal(single.keys[0], batched.keys[b])
        np.testing.assert_array_equal(single.values[0], batched.values[b])


@settings(max_examples=100, deadline=None)
@given(
    sink=st.integers(0, 16),
    recent=st.integers(1, 16),
    position=st.integers(0, 10_000),
)
def test_ring_slot_matches_paper_formula(sink: int, recent: int, position: int) -> None:
    cfg = SnapStreamConfig(sink=sink, recent=recent, topk=0, obs_window=1)
    slot = cfg.ring_slot(position)
    if position >= sink:
        assert slot == sink + (position - sink) % recent
        # The decode listing's form of the same index.
        assert slot == (position - sink + recent) % recent + sink
        assert sink <= slot < sink + recent
    else:
        assert slot == position
    np.testing.assert_array_equal(cfg.ring_slot(np.array([position])), [slot])


# --------------------------------------------------------------------------------------------
# examples


def _needle_prompt(
    seq: int, needles: list[int], head_dim: int = 8, seed: int = 0, strength: float = 4.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random keys with a few planted keys that every observation query aligns with."""
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(head_dim)
    direction /= np.linalg.norm(direction)
    k = 0.3 * rng.standard_normal((1, 1, seq, head_dim))
    k[0, 0, needles] = strength * direction
    v = rng.standard_normal((1, 1, seq, head_dim))
    q_obs = strength * direction + 0.1 * rng.standard_normal((1, 1, 4, head_dim))
    return q_obs, k, v, direction


def test_planted_needles_are_kept() -> None:
    needles = [21, 34, 46]
    q_obs, k, v, _ = _needle_prompt(64, needles)
    cfg = SnapStreamConfig(sink=2, recent=8, topk=3, obs_window=4, pool_kernel=1)
    assert select_topk(q_obs, k, cfg).tolist() == [[needles]]
    cache = SnapStreamCache.prefill(q_obs, k, v, cfg)
    assert cache.positions[0, 0, -3:].tolist() == needles
    np.testing.assert_array_equal(cache.keys[0, 0, -3:], k[0, 0, needles])

    # With pooling a cluster of needles wins over an isolated one of the same strength.
    q_obs, k, v, _ = _needle_prompt(64, [20, 21, 22, 40])
    pooled = SnapStreamConfig(sink=2, recent=8, topk=3, obs_window=4, pool_kernel=3)
    assert select_topk(q_obs, k, pooled).tolist() == [[[20, 21, 22]]]


def test_needles_make_snapstream_beat_streaming_only() -> None:
    needles = [25, 26, 27]
    q_obs, k, v, direction = _needle_prompt(64, needles)
    q_next = (4.0 * direction)[None, None, None, :]
    snap = SnapStreamCache.prefill(q_obs, k, v, SnapStreamConfig(2, 8, 4, 4, 3))
    stream = SnapStreamCache.prefill(q_obs, k, v, SnapStreamConfig(2, 12, 0, 4, 3))
    exact = full_attention(q_next, k, v)
    err_snap = np.linalg.norm(attend(q_next, snap) - exact)
    err_stream = np.linalg.norm(attend(q_next, stream) - exact)
    assert err_snap < 0.1 * err_stream


def test_recent_region_holds_last_tokens_and_the_rest_stays_put() -> None:
    cfg = SnapStreamConfig(sink=2, recent=4, topk=3, obs_window=2, pool_kernel=1)
    rng = np.random.default_rng(3)
    k = rng.standard_normal((1, 1, 20, 4))
    v = rng.standard_normal((1, 1, 20, 4))
    cache = SnapStreamCache.prefill(rng.standard_normal((1, 1, 2, 4)), k, v, cfg)
    # Ring slot j holds the latest p with (p - 2) % 4 == j: 18, 19, 16, 17.
    assert cache.positions[0, 0].tolist()[:6] == [0, 1, 18, 19, 16, 17]
    sink_keys = cache.keys[0, 0, :2].copy()
    topk_before = cache.positions[0, 0, 6:].copy()
    topk_keys = cache.keys[0, 0, 6:].copy()
    for n in range(1, 11):
        evicted = cache.append(rng.standard_normal((1, 1, 1, 4)), rng.standard_normal((1, 1, 1, 4)))
        assert evicted.tolist() == [20 + n - 1 - 4]
        recent = cache.positions[0, 0, 2:6]
        assert sorted(recent.tolist()) == list(range(20 + n - 4, 20 + n))
        assert cache.positions[0, 0, :2].tolist() == [0, 1]
        np.testing.assert_array_equal(cache.keys[0, 0, :2], sink_keys)
        np.testing.assert_array_equal(cache.positions[0, 0, 6:], topk_before)
        np.testing.assert_array_equal(cache.keys[0, 0, 6:], topk_keys)


def test_worked_ring_example_sink1_recent4() -> None:
    # 26 prompt tokens (positions 0..25), one sink, a ring of four, no top-K.
    cfg = SnapStreamConfig(sink=1, recent=4, topk=0, obs_window=1)
    k = np.arange(26.0).reshape(1, 1, 26, 1)
    cache = SnapStreamCache.prefill(np.ones((1, 1, 1, 1)), k, k, cfg)
    assert cache.positions[0, 0].tolist() == [0, 25, 22, 23, 24]
    assert cache.append(np.full((1, 1, 1, 1), 26.0), np.full((1, 1, 1, 1), 26.0)).tolist() == [22]
    assert cache.positions[0, 0].tolist() == [0, 25, 26, 23, 24]
    assert cache.keys[0, 0, :, 0].tolist() == [0, 25, 26, 23, 24]


def test_short_prompt_keeps_everything_and_pads() -> None:
    cfg = SnapStreamConfig(sink=2, recent=4, topk=3, obs_window=2, pool_kernel=3)
    rng = np.random.default_rng(5)
    k = rng.standard_normal((1, 2, 5, 4))
    v = rng.standard_normal((1, 2, 5, 3))
    for cls in (SnapStreamCache, NaiveSnapStreamCache):
        cache = cls.prefill(rng.standard_normal((1, 2, 2, 4)), k, v, cfg)
        assert cache.positions[0, 0].tolist() == [0, 1, 2, 3, 4, -1, -1, -1, -1]
        assert cache.valid[0, 1].tolist() == [True] * 5 + [False] * 4
        np.testing.assert_array_equal(cache.keys[0, :, :5], k[0])
        assert not cache.keys[0, :, 5:].any()
        # Decoding fills the padding in order, then starts evicting.
        cache.append(np.zeros((1, 2, 1, 4)), np.zeros((1, 2, 1, 3)))
        assert cache.positions[0, 0].tolist() == [0, 1, 2, 3, 4, 5, -1, -1, -1]
        assert cache.append(np.zeros((1, 2, 1, 4)), np.zeros((1, 2, 1, 3))).tolist() == [2]


def test_prompt_shorter_than_sink() -> None:
    cfg = SnapStreamConfig(sink=4, recent=2, topk=1, obs_window=1)
    k = np.ones((1, 1, 2, 2))
    cache = SnapStreamCache.prefill(np.ones((1, 1, 1, 2)), k, k, cfg)
    assert cache.positions[0, 0].tolist() == [0, 1, -1, -1, -1, -1, -1]
    for _ in range(5):
        cache.append(np.ones((1, 1, 1, 2)), np.ones((1, 1, 1, 2)))
    assert cache.positions[0, 0].tolist() == [0, 1, 2, 3, 6, 5, -1]


def test_mla_shared_selection_is_identical_across_heads() -> None:
    rng = np.random.default_rng(7)
    seq, dim = 48, 8
    k = 0.2 * rng.standard_normal((1, 2, seq, dim))
    u = np.eye(dim)
    k[0, 0, 15] = 5 * u[0]  # head 0 looks for u0 ...
    k[0, 1, 30] = 5 * u[1]  # ... head 1 for u1, a little harder.
    q_obs = np.zeros((1, 2, 3, dim))
    q_obs[0, 0] = 3 * u[0]
    q_obs[0, 1] = 5 * u[1]
    cfg = SnapStreamConfig(sink=1, recent=4, topk=1, obs_window=3)
    assert select_topk(q_obs, k, cfg).tolist() == [[[15], [30]]]
    shared = select_topk(q_obs, k, cfg, shared_across_heads=True)
    assert shared.tolist() == [[[30], [30]]]
    cache = SnapStreamCache.prefill(q_obs, k, k, cfg, shared_selection=True)
    np.testing.assert_array_equal(cache.positions[0, 0], cache.positions[0, 1])
    np.testing.assert_array_equal(cache.keys[0, :, -1], k[0, :, 30])


def test_gqa_votes_sum_over_the_query_group() -> None:
    rng = np.random.default_rng(11)
    cfg = SnapStreamConfig(sink=2, recent=3, topk=4, obs_window=3, pool_kernel=3)
    q_obs = rng.standard_normal((2, 6, 3, 4))
    k = rng.standard_normal((2, 2, 30, 4))
    grouped = snapkv_scores(q_obs, k, cfg)
    as_mha = snapkv_scores(q_obs, np.repeat(k, 3, axis=1), cfg)
    np.testing.assert_allclose(grouped, as_mha.reshape(2, 2, 3, 30).sum(axis=2))

    # Planted: within group 0, two query heads each want a different key; both are kept.
    k = 0.1 * rng.standard_normal((1, 1, 30, 4))
    u = np.eye(4)
    k[0, 0, 10], k[0, 0, 20] = 6 * u[0], 6 * u[1]
    q_obs = np.zeros((1, 2, 2, 4))
    q_obs[0, 0], q_obs[0, 1] = 6 * u[0], 6 * u[1]
    cfg = SnapStreamConfig(sink=1, recent=3, topk=2, obs_window=2)
    assert select_topk(q_obs, k, cfg).tolist() == [[[10, 20]]]


def test_gqa_attention_maps_query_heads_to_their_kv_head() -> None:
    rng = np.random.default_rng(13)
    q = rng.standard_normal((1, 4, 2, 4))
    k = rng.standard_normal((1, 2, 6, 4))
    v = rng.standard_normal((1, 2, 6, 5))
    out = full_attention(q, k, v)
    for h in range(4):
        logits = q[0, h] @ k[0, h // 2].T / 2.0
        w = np.exp(logits - logits.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(out[0, h], (w / w.sum(-1, keepdims=True)) @ v[0, h // 2])
    valid = np.ones((1, 2, 6), dtype=bool)
    valid[0, :, 3:] = False
    np.testing.assert_allclose(
        masked_attention(q, k, v, valid), full_attention(q, k, v, lengths=[3])
    )


def test_state_is_read_only() -> None:
    rng = np.random.default_rng(0)
    k = rng.standard_normal((1, 1, 10, 4))
    cache = SnapStreamCache.prefill(
        rng.standard_normal((1, 1, 2, 4)), k, k, SnapStreamConfig(1, 3, 2, 2)
    )
    for arr in (cache.keys, cache.values, cache.positions, cache.valid, cache.lengths):
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[...] = 0


# --------------------------------------------------------------------------------------------
# configuration errors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sink": -1}, r"sink must be >= 0, got -1"),
        ({"recent": -3}, r"recent must be >= 1, got -3"),
        ({"recent": 0}, r"recent must be >= 1"),
        ({"topk": -2}, r"topk must be >= 0"),
        ({"obs_window": 0}, r"obs_window must be >= 1"),
        ({"pool_kernel": 0}, r"pool_kernel must be >= 1"),
        ({"pool_kernel": 4}, r"pool_kernel must be odd"),
    ],
)
def test_bad_config_names_the_parameter(kwargs: dict[str, int], match: str) -> None:
    base = {"sink": 2, "recent": 4, "topk": 3, "obs_window": 2, "pool_kernel": 3}
    with pytest.raises(ValueError, match=match):
        SnapStreamConfig(**{**base, **kwargs})


def test_config_basics() -> None:
    cfg = SnapStreamConfig(sink=np.int64(2), recent=4, topk=3, obs_window=2)
    assert cfg.slots == 9 and type(cfg.sink) is int and cfg.pool_kernel == 1
    assert cfg.candidates(20) == 14 and cfg.candidates(5) == 0
    with pytest.raises(TypeError, match="topk"):
        SnapStreamConfig(sink=2, recent=4, topk=2.5, obs_window=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sink"):
        SnapStreamConfig(sink=True, recent=4, topk=2, obs_window=2)
    with pytest.raises(AttributeError):
        cfg.sink = 3  # type: ignore[misc]


def test_validate_for_rules() -> None:
    cfg = SnapStreamConfig(sink=2, recent=4, topk=3, obs_window=5)
    with pytest.raises(ValueError, match="obs_window"):
        cfg.validate_for(4)
    with pytest.raises(ValueError, match="seq_len"):
        cfg.validate_for(0)
    for length in (5, 6, 7, 8, 9, 20):
        cfg.validate_for(length)  # padding is fine by default
    cfg.validate_for(6, strict=True)  # sink + recent: no selection needed
    cfg.validate_for(9, strict=True)  # exactly topk candidates
    for length in (7, 8):
        with pytest.raises(ValueError, match="topk"):
            cfg.validate_for(length, strict=True)


def test_prefill_rejects_bad_inputs() -> None:
    rng = np.random.default_rng(0)
    cfg = SnapStreamConfig(sink=1, recent=2, topk=4, obs_window=3)
    k = rng.standard_normal((1, 2, 8, 4))
    q_obs = rng.standard_normal((1, 4, 3, 4))
    with pytest.raises(ValueError, match="obs_window"):
        SnapStreamCache.prefill(q_obs, k[:, :, :2], k[:, :, :2], cfg)
    with pytest.raises(ValueError, match="obs_window"):
        SnapStreamCache.prefill(q_obs[:, :, :2], k, k, cfg)
    with pytest.raises(ValueError, match="q_heads"):
        SnapStreamCache.prefill(q_obs[:, :3], k, k, cfg)
    # Six tokens leave three candidates for four top-K slots: an error only when strict.
    with pytest.raises(ValueError, match="topk"):
        SnapStreamCache.prefill(q_obs, k[:, :, :6], k[:, :, :6], cfg, strict=True)
    SnapStreamCache.prefill(q_obs, k, k, cfg, strict=True)
    padded = SnapStreamCache.prefill(q_obs, k[:, :, :6], k[:, :, :6], cfg)
    assert padded.positions[0, 0, -4:].tolist() == [1, 2, 3, -1]
    with pytest.raises(ValueError, match="lengths"):
        SnapStreamCache.prefill(q_obs, k, k, cfg, lengths=[9])
    with pytest.raises(ValueError, match="obs_window"):
        SnapStreamCache.prefill(q_obs, k, k, cfg, lengths=[2])
    cache = SnapStreamCache.prefill(q_obs, k, k[..., :3], cfg)
    with pytest.raises(ValueError, match="k must have shape"):
        cache.append(np.zeros((1, 2, 2, 4)), np.zeros((1, 2, 1, 3)))
    with pytest.raises(ValueError, match="v must have shape"):
        cache.append(np.zeros((1, 2, 1, 4)), np.zeros((1, 2, 1, 4)))
