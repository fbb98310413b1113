"""SnapKV selection against a brute force written from the definition, for both normalisations.

The oracle below works on nested Python lists with plain loops and ``math`` only: for every
observation query of every head it computes the softmax by hand over the keys the rule allows
(all keys up to the query's own position for ``CAUSAL``; only the candidates among them for
``CANDIDATES``), adds the weights that land on candidates, pools with zero padding and ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.snapstream import (
    NaiveSnapStreamCache,
    SnapStreamCache,
    SnapStreamCacheBase,
    SnapStreamConfig,
    VoteNormalisation,
    select_topk,
    snapkv_scores,
)

PROPERTY = settings(max_examples=100, deadline=None)
RULES = list(VoteNormalisation)
TIE = 1e-9  # oracle scores closer than this may legitimately rank either way

Votes = dict[int, float]  # candidate position -> score


# --------------------------------------------------------------------------------------------
# brute-force oracle


def _softmax_by_hand(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


def _raw_votes(
    q: list[list[list[float]]],
    k: list[list[list[float]]],
    length: int,
    cfg: SnapStreamConfig,
    group: int,
    causal: bool,
) -> list[Votes]:
    """Unpooled votes of one prompt, one dict per KV head (``q``/``k`` are ``[head][pos][d]``)."""
    candidates = range(cfg.sink, length - cfg.recent)
    kv_heads = len(k)
    votes: list[Votes] = [dict.fromkeys(candidates, 0.0) for _ in range(kv_heads)]
    for qh in range(kv_heads * group):
        kh = qh // group
        for i in range(cfg.obs_window):
            q_pos = length - cfg.obs_window + i
            keys = [j for j in range(q_pos + 1) if causal or j in candidates]
            if not keys:
                continue
            query = q[qh][i]
            logits = [
                sum(a * b for a, b in zip(query, k[kh][j], strict=True)) / math.sqrt(len(query))
                for j in keys
            ]
            for j, w in zip(keys, _softmax_by_hand(logits), strict=True):
                if j in candidates:
                    votes[kh][j] += w
    return votes


def _pool_by_hand(votes: Votes, kernel: int) -> Votes:
    half = kernel // 2
    return {
        j: sum(votes.get(t, 0.0) for t in range(j - half, j + half + 1)) / kernel for j in votes
    }


def brute_force_scores(
    q_obs: np.ndarray,
    k: np.ndarray,
    cfg: SnapStreamConfig,
    lengths: list[int],
    *,
    shared: bool,
    causal: bool,
) -> list[list[Votes]]:
    """Pooled votes ``[b][kv_head]`` of every candidate, straight from the definition."""
    group = q_obs.shape[1] // k.shape[1]
    out = []
    for b, length in enumerate(lengths):
        votes = _raw_votes(q_obs[b].tolist(), k[b].tolist(), length, cfg, group, causal)
        if shared:
            total = {j: sum(head[j] for head in votes) for j in votes[0]}
            votes = [dict(total) for _ in votes]
        out.append([_pool_by_hand(head, cfg.pool_kernel) for head in votes])
    return out


def _rank_by_hand(scores: Votes, topk: int) -> list[int]:
    """The ``topk`` best candidates (ties to the earlier position), ascending."""
    best = sorted(scores, key=lambda j: (-scores[j], j))[:topk]
    return sorted(best)


# --------------------------------------------------------------------------------------------
# random inputs


@dataclass(frozen=True)
class Case:
    """Observation queries and padded prompt keys of a batch of prompts of mixed lengths."""

    config: SnapStreamConfig
    q_obs: np.ndarray
    k: np.ndarray
    lengths: list[int]
    shared: bool


def _scores(case: Case, rule: VoteNormalisation | str, k: np.ndarray | None = None) -> np.ndarray:
    """``snapkv_scores`` of a case, optionally with other keys."""
    return snapkv_scores(
        case.q_obs,
        case.k if k is None else k,
        case.config,
        shared_across_heads=case.shared,
        lengths=case.lengths,
        normalisation=rule,
    )


def _random_case(
    rng: np.random.Generator,
    config: SnapStreamConfig,
    lengths: list[int],
    *,
    kv_heads: int,
    group: int,
    head_dim: int,
    shared: bool = False,
    scale: float = 1.0,
) -> Case:
    """Gaussian queries and keys; keys past each prompt's length are NaN to expose leaks."""
    seq = max(lengths)
    q_obs = scale * rng.standard_normal(
        (len(lengths), kv_heads * group, config.obs_window, head_dim)
    )
    k = scale * rng.standard_normal((len(lengths), kv_heads, seq, head_dim))
    for b, length in enumerate(lengths):
        k[b, :, length:] = np.nan
    return Case(config, q_obs, k, lengths, shared)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    config = SnapStreamConfig(
        sink=draw(st.integers(0, 4)),
        recent=draw(st.integers(1, 6)),
        topk=draw(st.integers(0, 6)),
        obs_window=draw(st.integers(1, 6)),
        pool_kernel=draw(st.sampled_from([1, 3, 5])),
    )
    lengths = draw(st.lists(st.integers(config.obs_window, 24), min_size=1, max_size=3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return _random_case(
        rng,
        config,
        lengths,
        kv_heads=draw(st.integers(1, 2)),
        group=draw(st.integers(1, 3)),
        head_dim=draw(st.integers(1, 6)),
        shared=draw(st.booleans()),
        scale=draw(st.sampled_from([0.5, 1.0, 3.0])),
    )


# --------------------------------------------------------------------------------------------
# comparison


def _assert_row_matches(chosen: np.ndarray, scores: Votes, topk: int) -> None:
    """One head's ``select_topk`` row against the oracle's scores of that head."""
    picked = [int(p) for p in chosen if p >= 0]
    want = _rank_by_hand(scores, topk)
    assert len(picked) == len(want) == min(topk, len(scores))
    assert chosen.tolist() == picked + [-1] * (topk - len(picked))
    ranked = sorted(scores.values(), reverse=True)
    boundary_is_clear = topk == 0 or len(ranked) <= topk or ranked[topk - 1] - ranked[topk] > TIE
    if boundary_is_clear:
        assert picked == want
    else:  # a near-tie at the cut: any choice among the tied candidates is right
        rest = [scores[j] for j in scores if j not in picked]
        assert min(scores[j] for j in picked) >= max(rest) - TIE


def _assert_matches_oracle(case: Case, rule: VoteNormalisation) -> None:
    cfg = case.config
    scores = _scores(case, rule)
    chosen = select_topk(
        case.q_obs, case.k, cfg, case.shared, lengths=case.lengths, normalisation=rule
    )
    causal = rule is VoteNormalisation.CAUSAL
    oracle = brute_force_scores(
        case.q_obs, case.k, cfg, case.lengths, shared=case.shared, causal=causal
    )
    assert chosen.shape == (case.k.shape[0], case.k.shape[1], cfg.topk)
    for b, heads in enumerate(oracle):
        for h, want in enumerate(heads):
            cands = sorted(want)
            got = scores[b, h]
            np.testing.assert_allclose(got[cands], [want[j] for j in cands], rtol=1e-9, atol=1e-12)
            assert np.isneginf(np.delete(got, cands)).all()
            _assert_row_matches(chosen[b, h], want, cfg.topk)


# --------------------------------------------------------------------------------------------
# properties


@PROPERTY
@given(cases(), st.sampled_from(RULES))
def test_selection_matches_brute_force(case: Case, rule: VoteNormalisation) -> None:
    _assert_matches_oracle(case, rule)


@PROPERTY
@given(cases())
def test_causal_votes_never_exceed_candidate_votes(case: Case) -> None:
    # A causal softmax divides by a sum over a superset of the candidates' keys, so each weight
    # on a candidate can only shrink; pooling has non-negative weights and keeps the order.
    causal = _scores(case, "causal")
    renorm = _scores(case, "candidates")
    np.testing.assert_array_equal(np.isfinite(causal), np.isfinite(renorm))
    finite = np.isfinite(causal)
    assert (causal[finite] <= renorm[finite] * (1 + 1e-12) + 1e-15).all()


@PROPERTY
@given(cases(), st.integers(0, 2**32 - 1))
def test_only_causal_votes_depend_on_keys_outside_the_candidates(case: Case, seed: int) -> None:
    cfg = case.config
    changed = case.k.copy()
    rng = np.random.default_rng(seed)
    for b, length in enumerate(case.lengths):
        outside = [j for j in range(length) if not cfg.sink <= j < length - cfg.recent]
        changed[b, :, outside] = 3 * rng.standard_normal(changed[b, :, outside].shape)
    for rule in RULES:
        before = _scores(case, rule)
        after = _scores(case, rule, k=changed)
        finite = np.isfinite(before)
        if rule is VoteNormalisation.CANDIDATES:
            np.testing.assert_allclose(after[finite], before[finite], rtol=1e-12, atol=0)
        elif finite.any():
            # The last query always sees itself, a recent token whose key was redrawn.
            assert not np.allclose(after[finite], before[finite], rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------------------
# seeded examples


LAYOUTS = {  # kv_heads, query heads per KV head, one selection for all heads
    "mha": (3, 1, False),
    "gqa": (2, 3, False),
    "mla": (4, 1, True),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_mixed_lengths_match_brute_force(layout: str, rule: VoteNormalisation) -> None:
    kv_heads, group, shared = LAYOUTS[layout]
    cfg = SnapStreamConfig(sink=2, recent=5, topk=6, obs_window=6, pool_kernel=3)
    case = _random_case(
        np.random.default_rng(20),
        cfg,
        [40, 29, 11, 6],  # long, medium, fewer candidates than topk, no candidates at all
        kv_heads=kv_heads,
        group=group,
        head_dim=8,
        shared=shared,
        scale=1.5,
    )
    _assert_matches_oracle(case, rule)
    chosen = select_topk(
        case.q_obs, case.k, cfg, case.shared, lengths=case.lengths, normalisation=rule
    )
    if case.shared:
        assert (chosen == chosen[:, :1]).all()
    # A padded prompt is selected as if it were alone.
    for b, length in enumerate(case.lengths):
        alone = select_topk(
            case.q_obs[b : b + 1],
            case.k[b : b + 1, :, :length],
            cfg,
            case.shared,
            normalisation=rule,
        )
        np.testing.assert_array_equal(alone[0], chosen[b])


def test_normalisations_pick_different_positions() -> None:
    cfg = SnapStreamConfig(sink=2, recent=4, topk=4, obs_window=4, pool_kernel=3)
    case = _random_case(np.random.default_rng(1), cfg, [32], kv_heads=2, group=2, head_dim=8)
    picks = {
        rule: select_topk(case.q_obs, case.k, cfg, normalisation=rule).tolist() for rule in RULES
    }
    assert picks[VoteNormalisation.CAUSAL] != picks[VoteNormalisation.CANDIDATES]
    for rule in RULES:
        _assert_matches_oracle(case, rule)


def test_worked_example() -> None:
    # Five tokens, one head, head_dim 1: sink {0}, candidates {1, 2, 3}, recent {4}. The keys
    # are logs, so the window query +1 (at position 3) weighs key j by w_j and the window query
    # -1 (at position 4) by 1 / w_j, with w = (8, 4, 1, 1/2, 8/5).
    w = np.array([8, 4, 1, 1 / 2, 8 / 5])
    k = np.log(w).reshape(1, 1, 5, 1)
    q_obs = np.array([1.0, -1.0]).reshape(1, 1, 2, 1)
    cfg = SnapStreamConfig(sink=1, recent=1, topk=1, obs_window=2, pool_kernel=1)

    # CANDIDATES: query 3 (keys 1-3) gives (4, 1, 1/2) / (11/2) and query 4 gives (1/4, 1, 2) / (13/4).
    #   (8/11 + 1/13, 2/11 + 4/13, 1/11 + 8/13) = (115, 70, 101) / 143: position 1 wins.
    # CAUSAL: query 3 also divides by the sink's 8 (sum 27/2) and query 4 by the sink's 1/8 and
    #   the recent token's 5/8 (sum 4): (8/27 + 1/16, 2/27 + 1/4, 1/27 + 1/2)
    #   = (155, 140, 232) / 432. Query 3 spends most of its attention on the sink, so its
    #   preference for position 1 hardly counts and position 3 wins.
    want = {
        VoteNormalisation.CANDIDATES: ([115 / 143, 70 / 143, 101 / 143], [[[1]]]),
        VoteNormalisation.CAUSAL: ([155 / 432, 140 / 432, 232 / 432], [[[3]]]),
    }
    for rule, (scores, picked) in want.items():
        got = snapkv_scores(q_obs, k, cfg, normalisation=rule)[0, 0]
        np.testing.assert_allclose(got[1:4], scores, rtol=1e-12)
        assert np.isneginf(got[[0, 4]]).all()
        assert select_topk(q_obs, k, cfg, normalisation=rule).tolist() == picked

    # Pooling (kernel 3) sees zeros at the sink and the recent token, not their attention:
    # (0 + 155 + 140, 155 + 140 + 232, 140 + 232 + 0) / (3 * 432).
    pooled = SnapStreamConfig(sink=1, recent=1, topk=1, obs_window=2, pool_kernel=3)
    got = snapkv_scores(q_obs, k, pooled)[0, 0, 1:4]
    np.testing.assert_allclose(got, np.array([295, 527, 372]) / 1296, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# the option itself


@pytest.mark.parametrize("cls", [SnapStreamCache, NaiveSnapStreamCache])
def test_prefill_passes_the_normalisation_on(cls: type[SnapStreamCacheBase]) -> None:
    cfg = SnapStreamConfig(sink=2, recent=4, topk=4, obs_window=4, pool_kernel=3)
    case = _random_case(np.random.default_rng(1), cfg, [32, 21], kv_heads=2, group=2, head_dim=8)
    k = np.nan_to_num(case.k)
    kept = {}
    for rule in RULES:
        cache = cls.prefill(case.q_obs, k, k, cfg, lengths=case.lengths, normalisation=rule.value)
        want = select_topk(case.q_obs, k, cfg, lengths=case.lengths, normalisation=rule)
        np.testing.assert_array_equal(cache.positions[..., -cfg.topk :], want)
        kept[rule] = cache.positions.tolist()
    assert kept[VoteNormalisation.CAUSAL] != kept[VoteNormalisation.CANDIDATES]
    default = cls.prefill(case.q_obs, k, k, cfg, lengths=case.lengths)
    causal = cls.prefill(case.q_obs, k, k, cfg, lengths=case.lengths, normalisation="causal")
    np.testing.assert_array_equal(default.positions, causal.positions)


def test_unknown_normalisation_is_rejected() -> None:
    cfg = SnapStreamConfig(sink=1, recent=1, topk=1, obs_window=1)
    with pytest.raises(ValueError, match="normalisation must be one of 'causal', 'candidates'"):
        select_topk(np.ones((1, 1, 1, 2)), np.ones((1, 1, 4, 2)), cfg, normalisation="softmax")
