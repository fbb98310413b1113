"""Routed-expert streaming and busiest-socket work, against oracles written here: the closed form
E(1 - (1 - k/E)^n) of experts touched by uniform routing, marginals found by bisection for skewed
routing, and a seeded Monte Carlo of uniform top-k routing for expert parallelism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.experts import ExpertLoading, Routing, expert_share
from rdusim.spec.mapping import load_mapping
from tests.compiler.oracles import capped_inclusion

REPO = Path(__file__).resolve().parents[2]
MAPPINGS = REPO / "mappings"
E, K, D = 256, 8, 16  # DeepSeek-R1: 256 routed experts, 8 per token; 16 sockets
VERIFIED = 3  # r1_decode.yaml: 2 MTP drafts + the token itself per sequence
EXPERT_OPS = ("experts_up_proj", "experts_down_proj")
# FP8 weights of all 256 experts: gate+up 7168 -> 2 x 2048, down 2048 -> 7168
EXPERT_WEIGHTS = {"experts_up_proj": E * 7168 * 4096, "experts_down_proj": E * 2048 * 7168}
# |model - Monte Carlo mean| <= Z_TOL standard errors; the seeds are fixed, so a pass repeats
Z_TOL = 4.5


def touched_fraction(tokens: float, experts: int = E, top_k: int = K) -> float:
    """P(a given expert receives at least one of n tokens), uniform routing: 1 - (1 - k/E)^n."""
    return 1.0 - (1.0 - top_k / experts) ** tokens


def busiest_socket_samples(seed: int, tokens: int, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """Uniform top-k routing of `tokens` tokens, E experts in D contiguous blocks (one per
    socket): per trial, the experts touched and the token-slots on the busiest block."""
    rng = np.random.default_rng(seed)
    touched, slots = [], []
    rows = max(1, 2_000_000 // (tokens * E))
    for first in range(0, trials, rows):
        chunk = min(rows, trials - first)
        keys = rng.random((chunk, tokens, E))
        picks = np.argpartition(keys, K - 1, axis=2)[:, :, :K]  # k distinct experts per token
        hit = np.zeros(keys.shape, dtype=bool)
        np.put_along_axis(hit, picks, True, axis=2)
        blocks = hit.sum(axis=1).reshape(chunk, D, E // D)
        touched.append((blocks > 0).sum(axis=2).max(axis=1))
        slots.append(blocks.sum(axis=2).max(axis=1))
    return np.concatenate(touched), np.concatenate(slots)


def assert_mc(value: float, samples: np.ndarray) -> None:
    mean = float(samples.mean())
    se = float(samples.std(ddof=1)) / math.sqrt(samples.size)
    assert abs(value - mean) <= Z_TOL * se + 1e-12, (value, mean, se)


# --------------------------------------------------------------------------------------------
# expert_share on its own


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.floats(0.0, 1e6),
    experts=st.sampled_from([8, 64, 256]),
    top_k=st.integers(1, 8),
    degree=st.sampled_from([1, 2, 4, 8, 16]),
    strategy=st.sampled_from(["tp", "replicate", "dp"]),
)
def test_slices_of_every_expert_stream_the_touched_ones(tokens, experts, top_k, degree, strategy):
    share = expert_share(Routing(), experts, top_k, tokens, strategy, degree)
    frac = touched_fraction(tokens, experts, top_k)
    assert share.weight_read_fraction == pytest.approx(frac, rel=1e-9, abs=1e-12)
    assert share.experts_touched == pytest.approx(experts * frac, rel=1e-9, abs=1e-9)
    # every socket holds a slice of every expert: tp splits each slot's work evenly
    assert share.work_fraction == (1 / degree if strategy == "tp" and degree > 1 else 1.0)


@pytest.mark.parametrize("strategy", ["tp", "ep", "replicate"])
@pytest.mark.parametrize("tokens", [1, 48, 4096])
def test_loading_all_streams_every_expert(strategy, tokens):
    touched = expert_share(Routing(), E, K, tokens, strategy, D)
    full = expert_share(Routing(loading=ExpertLoading.ALL), E, K, tokens, strategy, D)
    assert full.weight_read_fraction == 1.0
    # what the step computes and touches does not depend on how the weights are loaded
    assert full.work_fraction == touched.work_fraction
    assert full.experts_touched == touched.experts_touched


@pytest.mark.parametrize("tokens", [16, 48])
def test_ep_busiest_socket_matches_monte_carlo(tokens):
    share = expert_share(Routing(), E, K, tokens, "ep", D)
    busiest_touched, busiest_slots = busiest_socket_samples(1000 + tokens, tokens, 4000)
    # a socket holds E/D whole experts and streams the touched ones; the busiest sets the pace
    assert_mc(share.weight_read_fraction * (E // D), busiest_touched)
    assert_mc(share.work_fraction * tokens * K, busiest_slots)
    assert share.experts_touched == pytest.approx(E * touched_fraction(tokens), rel=1e-12)


def test_ep_over_one_socket_is_the_whole_layer():
    one = expert_share(Routing(), E, K, 48, "ep", 1)
    assert one.weight_read_fraction == pytest.approx(touched_fraction(48), rel=1e-12)
    assert one.work_fraction == 1.0


@settings(max_examples=60, deadline=None)
@given(tokens=st.floats(0.0, 2e5), degree=st.sampled_from([2, 4, 8, 16]))
def test_the_busiest_socket_is_at_least_the_mean(tokens, degree):
    tp = expert_share(Routing(), E, K, tokens, "tp", degree)
    ep = expert_share(Routing(), E, K, tokens, "ep", degree)
    assert tp.weight_read_fraction <= ep.weight_read_fraction * (1 + 1e-9) + 1e-12
    assert 0.0 <= ep.weight_read_fraction <= 1.0
    if tokens > 0:
        assert 1 / degree * (1 - 1e-9) <= ep.work_fraction <= 1.0 + 1e-12


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0.0, 1e5), b=st.floats(0.0, 1e5))
def test_more_tokens_touch_more_experts(a, b):
    lo, hi = sorted((a, b))
    for strategy in ("tp", "ep"):
        x = expert_share(Routing(), E, K, lo, strategy, D)
        y = expert_share(Routing(), E, K, hi, strategy, D)
        assert x.experts_touched <= y.experts_touched + 1e-9
        assert x.weight_read_fraction <= y.weight_read_fraction + 1e-9


@pytest.mark.parametrize("tokens", [1, 16, 300])
def test_skewed_routing_touches_fewer_experts(tokens):
    zipf = [(i + 1) ** -1.0 for i in range(E)]
    pi = capped_inclusion(zipf, K)
    expected = sum(1 - (1 - p) ** tokens for p in pi)
    share = expert_share(Routing("zipf", 1.0), E, K, tokens, "tp", D)
    assert share.experts_touched == pytest.approx(expected, rel=1e-9)
    assert share.experts_touched < E * touched_fraction(tokens)
    loads = tuple(float(i + 1) for i in range(E))  # light enough that no expert is capped
    pi = [K * w / sum(loads) for w in loads]
    share = expert_share(Routing("histogram", loads=loads), E, K, tokens, "tp", D)
    assert share.experts_touched == pytest.approx(sum(1 - (1 - p) ** tokens for p in pi), rel=1e-9)


# --------------------------------------------------------------------------------------------
# compiled R1 layers


def r1_decode(*sets: str, path: Path = MAPPINGS / "r1_decode.yaml"):
    return compile_mapping(load_mapping(path, ["seq_len=8192", *sets]))


def expert_plans(prog, kind="moe"):
    return {p.name: p for k in prog.layers[kind].kernels for p in k.ops if p.name in EXPERT_OPS}


@pytest.mark.parametrize("batch", [1, 16, 256])
def test_decode_streams_the_touched_experts(batch):
    prog = r1_decode(f"batch={batch}")
    n = batch * VERIFIED
    frac = 1 - (1 - 8 / 256) ** n
    for name, p in expert_plans(prog).items():
        assert p.sharding_label == "tp16"
        assert p.weight_bytes == EXPERT_WEIGHTS[name] / 16  # a slice of every expert
        assert p.weight_read_bytes == pytest.approx(p.weight_bytes * frac, rel=1e-12), name
        assert p.streamed_weight_bytes == p.weight_read_bytes
        assert p.experts_touched == pytest.approx(256 * frac, rel=1e-12)
    assert prog.layers["moe"].experts_touched == pytest.approx(256 * frac, rel=1e-12)
    # the MTP module's layer drafts one token per sequence a run
    mtp = prog.extras["mtp0_layer"]
    assert mtp.experts_touched == pytest.approx(256 * (1 - (1 - 8 / 256) ** batch), rel=1e-12)
    # dense layers have no routed experts
    assert prog.layers["dense"].experts_touched is None


def test_other_ops_stream_their_whole_shard():
    prog = r1_decode("batch=16")
    for lp in prog.all_layers():
        for k in lp.kernels:
            for p in k.ops:
                if p.name in EXPERT_OPS:
                    continue
                assert p.weight_read_bytes is None, p.name
                want = 0.0 if p.cost_class == "memory" else p.weight_bytes
                assert p.streamed_weight_bytes == want, p.name
    # the embedding is a lookup table: it streams nothing, whatever it holds
    (emb,) = [p for k in prog.extras["embedding"].kernels for p in k.ops if p.weight_bytes > 0]
    assert emb.cost_class == "memory" and emb.streamed_weight_bytes == 0.0


@pytest.mark.parametrize("batch", [1, 16])
def test_expert_loading_all_streams_the_whole_shard(batch):
    prog = r1_decode(f"batch={batch}", "moe.expert_loading=all")
    for p in expert_plans(prog).values():
        assert p.weight_read_bytes == p.weight_bytes
        # the routing still touches what it touches
        frac = 1 - (1 - 8 / 256) ** (batch * VERIFIED)
        assert p.experts_touched == pytest.approx(256 * frac, rel=1e-12)


def test_zipf_routing_from_the_mapping():
    prog = r1_decode("batch=16", "moe.routing.distribution=zipf", "moe.routing.exponent=1.2")
    pi = capped_inclusion([(i + 1) ** -1.2 for i in range(E)], K)
    touched = sum(1 - (1 - p) ** (16 * VERIFIED) for p in pi)
    for p in expert_plans(prog).values():
        assert p.experts_touched == pytest.approx(touched, rel=1e-9)
        assert p.weight_read_bytes == pytest.approx(p.weight_bytes * touched / E, rel=1e-9)


def test_histogram_routing_from_the_mapping(tmp_path):
    text = (MAPPINGS / "r1_decode.yaml").read_text(encoding="utf-8")
    text += "moe:\n  routing: {distribution: histogram, file: loads.txt}\n"
    (tmp_path / "loads.txt").write_text("\n".join(str(i + 1) for i in range(E)), encoding="utf-8")
    path = tmp_path / "histogram.yaml"
    path.write_text(text, encoding="utf-8")
    prog = r1_decode("batch=4", path=path)
    pi = [K * (i + 1) / (E * (E + 1) / 2) for i in range(E)]
    touched = sum(1 - (1 - p) ** (4 * VERIFIED) for p in pi)
    for p in expert_plans(prog).values():
        assert p.experts_touched == pytest.approx(touched, rel=1e-9)


@pytest.fixture(scope="module")
def ep_mapping(tmp_path_factory) -> Path:
    """r1_decode.yaml with the routed experts of the MoE layers expert-parallel over 16 sockets."""
    text = (MAPPINGS / "r1_decode.yaml").read_text(encoding="utf-8")
    ffn = '      ops: ["shared_*", "experts_*", ffn_residual]\n      sharding: {tp: 16}\n'
    assert text.count(ffn) == 1
    text = text.replace(ffn, ffn + '      overrides:\n        "experts_*": {ep: 16}\n')
    path = tmp_path_factory.mktemp("ep") / "r1_decode_ep.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_ep_streams_the_busiest_sockets_experts(ep_mapping):
    prog = r1_decode("batch=16", path=ep_mapping)
    n = 16 * VERIFIED
    busiest_touched, busiest_slots = busiest_socket_samples(7, n, 4000)
    for name, p in expert_plans(prog).items():
        assert p.sharding_label == "ep16"
        assert p.weight_bytes == EXPERT_WEIGHTS[name] / 16  # 16 whole experts per socket
        # the socket's 16 experts, of which the busiest socket touches busiest_touched
        assert_mc(p.weight_read_bytes / p.weight_bytes * 16, busiest_touched)
        assert_mc(p.flops / p.full_flops * n * K, busiest_slots)
        assert p.experts_touched == pytest.approx(256 * touched_fraction(n), rel=1e-12)


def test_prefill_streams_every_expert():
    prog = compile_mapping(load_mapping(MAPPINGS / "r1_prefill.yaml"))
    assert prog.workload.tokens == 131072
    frac = 1 - (1 - 8 / 256) ** 131072  # 1 - e^-4160: every expert, to double precision
    assert frac == 1.0
    for p in expert_plans(prog).values():
        assert p.weight_read_bytes == p.weight_bytes * frac
        assert p.experts_touched == pytest.approx(256.0, rel=1e-12)
