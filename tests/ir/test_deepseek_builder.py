"""DeepSeek-R1 layer graphs against hand-written closed forms.

Every expected value here is written from the architecture (DESIGN.md §3), not read back from the
builder, so a change in a shape or a formula shows up as a number that no longer matches.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.ir.attrs import CacheIndex, ScatterAttrs
from rdusim.ir.builders import deepseek
from rdusim.ir.graph import CostClass, TensorKind, Workload
from rdusim.ir.ops import attrs_as, bytes_read, bytes_written, cost_class_of, flops
from rdusim.snapstream.config import SnapStreamConfig, VoteNormalisation

# DeepSeek-R1 dimensions, written out independently of the spec file
H = 7168  # hidden
NH = 128  # attention heads
QL = 1536  # q_lora_rank
R = 512  # kv_lora_rank (latent)
ROPE = 64  # qk_rope_head_dim
NOPE = 128  # qk_nope_head_dim
QK = NOPE + ROPE  # 192
VD = 128  # v_head_dim
E = 256  # routed experts
K = 8  # experts per token
W = 2048  # expert FFN width
DENSE_W = 18432  # dense-layer FFN width
VOCAB = 129280

PREFILL_MOE_OPS = [
    "attn_norm",
    "q_a_proj",
    "q_a_norm",
    "q_b_proj",
    "kv_a_proj",
    "kv_a_norm",
    "rope_q",
    "rope_k",
    "kv_cache_write",
    "kv_b_proj",
    "attention",
    "o_proj",
    "attn_residual",
    "ffn_norm",
    "router_gate",
    "router_topk",
    "token_group",
    "shared_up_proj",
    "shared_silu_mul",
    "shared_down_proj",
    "experts_up_proj",
    "experts_silu_mul",
    "experts_down_proj",
    "experts_combine",
    "ffn_residual",
]

DECODE_MOE_OPS = [
    "attn_norm",
    "q_a_proj",
    "q_a_norm",
    "q_b_proj",
    "q_absorb",
    "rope_q",
    "kv_a_proj",
    "kv_a_norm",
    "rope_k",
    "kv_cache_write",
    "attention",
    "v_absorb",
    "o_proj",
    "attn_residual",
    "ffn_norm",
    "router_gate",
    "router_topk",
    "token_group",
    "shared_up_proj",
    "shared_silu_mul",
    "shared_down_proj",
    "experts_up_proj",
    "experts_silu_mul",
    "experts_down_proj",
    "experts_combine",
    "ffn_residual",
]

DENSE_FFN_OPS = ["ffn_norm", "ffn_up_proj", "ffn_silu_mul", "ffn_down_proj", "ffn_residual"]

SNAPSTREAM_PREFILL_OPS = {
    "ring_sink_gather",
    "ring_range1_gather_latent",
    "ring_range1_gather_rope",
    "ring_range2_gather_latent",
    "ring_range2_gather_rope",
    "ring_select",
    "snapkv_qk",
    "snapkv_softmax",
    "snapkv_reduce",
    "snapkv_pool",
    "snapkv_topk",
    "snapkv_gather_latent",
    "snapkv_gather_rope",
    "snapkv_concat_latent",
    "snapkv_concat_rope",
}

SS = SnapStreamConfig(sink=4, recent=2048, topk=30720, obs_window=32, pool_kernel=7)

# attention-side weights of one layer (both MLA forms store the same matrices)
ATTN_PARAMS = (
    H  # attn_norm
    + H * QL  # q_a_proj
    + QL  # q_a_norm
    + QL * NH * QK  # q_b_proj
    + H * (R + ROPE)  # kv_a_proj
    + R  # kv_a_norm
    + R * NH * (NOPE + VD)  # kv_b_proj (W_UK and W_UV)
    + NH * VD * H  # o_proj
)
MOE_FFN_PARAMS = (
    H  # ffn_norm
    + H * E  # router gate
    + 3 * H * W  # shared expert: gate, up, down
    + E * 3 * H * W  # routed experts
)
DENSE_FFN_PARAMS = H + 3 * H * DENSE_W


@pytest.fixture(scope="module")
def prefill(r1):
    return deepseek.build_layer(r1, "moe", "prefill")


@pytest.fixture(scope="module")
def decode(r1):
    return deepseek.build_layer(r1, "moe", "decode")


# --------------------------------------------------------------------------------------------
# op names (mappings refer to them: a rename must be deliberate)


def test_prefill_moe_op_names(prefill):
    assert prefill.order() == PREFILL_MOE_OPS


def test_decode_moe_op_names(decode):
    assert decode.order() == DECODE_MOE_OPS


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_dense_layer_shares_attention_and_has_a_dense_ffn(r1, phase):
    g = deepseek.build_layer(r1, "dense", phase)
    ops = PREFILL_MOE_OPS if phase == "prefill" else DECODE_MOE_OPS
    attention = ops[: ops.index("attn_residual") + 1]
    assert g.order() == attention + DENSE_FFN_OPS


def test_graph_names(r1, prefill):
    assert prefill.name == "deepseek-r1.moe.prefill"
    assert deepseek.build_layer(r1, "dense", "decode").name == "deepseek-r1.dense.decode"


def test_every_prefill_op_has_a_cost_class(prefill):
    assert cost_class_of(prefill.ops["attention"]) == CostClass.ATTENTION
    for name in ("q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "o_proj", "router_gate"):
        assert cost_class_of(prefill.ops[name]) == CostClass.SYSTOLIC
    assert cost_class_of(prefill.ops["router_topk"]) == CostClass.SIMD
    assert cost_class_of(prefill.ops["kv_cache_write"]) == CostClass.MEMORY


def test_bad_kind_or_phase(r1):
    with pytest.raises(ValueError, match="kind"):
        deepseek.build_layer(r1, "sparse", "prefill")
    with pytest.raises(ValueError, match="phase"):
        deepseek.build_layer(r1, "moe", "train")


# --------------------------------------------------------------------------------------------
# prefill FLOPs


def test_prefill_attention_flops_at_128k(prefill):
    L = 131072
    expected = 2 * NH * (L * (L + 1) / 2) * (QK + VD)  # causal MHA: QK^T (192) + PV (128)
    got = flops(prefill.ops["attention"], prefill, Workload(1, L, L))
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == pytest.approx(7.0369e14, rel=1e-4)  # ≈ 704 TFLOP per layer


@pytest.mark.parametrize(
    ("name", "k", "n", "count"),
    [
        ("q_a_proj", H, QL, 1),
        ("q_b_proj", QL, NH * QK, 1),
        ("kv_a_proj", H, R + ROPE, 1),
        ("kv_b_proj", R, NH * (NOPE + VD), 1),
        ("o_proj", NH * VD, H, 1),
        ("router_gate", H, E, 1),
        ("shared_up_proj", H, 2 * W, 1),
        ("shared_down_proj", W, H, 1),
        ("experts_up_proj", H, 2 * W, K),  # each token runs its 8 experts
        ("experts_down_proj", W, H, K),
    ],
)
def test_prefill_gemm_flops(prefill, name, k, n, count):
    b, s = 2, 4096
    expected = 2 * b * s * k * n * count
    assert flops(prefill.ops[name], prefill, Workload(b, s, s)) == expected


def test_prefill_layer_gemm_flops_per_token(prefill):
    """Sum of projection FLOPs per token: 2 x (parameters a token multiplies with)."""
    per_token = 2 * (
        H * QL
        + QL * NH * QK
        + H * (R + ROPE)
        + R * NH * (NOPE + VD)
        + NH * VD * H
        + H * E
        + 3 * H * W * (1 + K)
    )
    wl = Workload(1, 1, 1)
    got = sum(flops(op, prefill, wl) for op in prefill.ops.values() if op.kind == "gemm")
    assert got == per_token


def test_prefill_cache_write(prefill, r1):
    L = 8192
    wl = Workload(1, L, L)
    op = prefill.ops["kv_cache_write"]
    assert bytes_written(op, prefill, wl) == L * (R + ROPE) * 2  # BF16 latent + rope key
    assert set(op.outputs) == {"latent_cache", "rope_cache"}


# --------------------------------------------------------------------------------------------
# decode (absorbed MLA)


@pytest.mark.parametrize(("b", "t"), [(1, 1), (16, 131072), (64, 32768), (3, 1000)])
def test_decode_absorbed_attention_flops(decode, b, t):
    wl = Workload(b, 1, t)
    # scores against 512 latent + 64 rope, then the weighted sum of the 512-wide latent
    assert flops(decode.ops["attention"], decode, wl) == 2 * b * NH * t * (R + ROPE + R)
    assert flops(decode.ops["q_absorb"], decode, wl) == 2 * b * NH * NOPE * R
    assert flops(decode.ops["v_absorb"], decode, wl) == 2 * b * NH * R * VD


def test_decode_attention_reads_the_latent_cache_once(decode):
    b, t = 16, 131072
    wl = Workload(b, 1, t)
    assert bytes_read(decode.ops["attention"], decode, wl) == b * t * (R + ROPE) * 2


def test_decode_cache_write_is_one_token(decode):
    wl = Workload(32, 1, 65536)
    op = decode.ops["kv_cache_write"]
    assert bytes_written(op, decode, wl) == 32 * (R + ROPE) * 2
    assert attrs_as(op, ScatterAttrs).index == CacheIndex.POSITION


def test_snapstream_decode_writes_at_the_ring_index(r1):
    g = deepseek.build_layer(r1, "moe", "decode", SS)
    assert attrs_as(g.ops["kv_cache_write"], ScatterAttrs).index == CacheIndex.RING
    assert g.order() == DECODE_MOE_OPS  # SnapStream changes the index, not the ops


def test_absorbed_weights_equal_kv_b(prefill, decode):
    absorbed = decode.ops["q_absorb"].weight_params() + decode.ops["v_absorb"].weight_params()
    assert absorbed == prefill.ops["kv_b_proj"].weight_params() == R * NH * (NOPE + VD)


# --------------------------------------------------------------------------------------------
# parameters and cache


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_moe_layer_weight_params(r1, phase):
    g = deepseek.build_layer(r1, "moe", phase)
    assert g.weight_params() == ATTN_PARAMS + MOE_FFN_PARAMS
    assert 11.4e9 < g.weight_params() < 11.6e9


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_dense_layer_weight_params(r1, phase):
    g = deepseek.build_layer(r1, "dense", phase)
    assert g.weight_params() == ATTN_PARAMS + DENSE_FFN_PARAMS


def test_weight_precisions(prefill):
    """FP8 matrices (1 byte), BF16 norms and router gate (2 bytes), per the R1 spec's dtypes."""
    for name in ("q_a_proj", "q_b_proj", "kv_b_proj", "o_proj", "experts_up_proj"):
        op = prefill.ops[name]
        assert op.weight_bytes() == op.weight_params(), name
    for name in ("attn_norm", "ffn_norm", "router_gate"):
        op = prefill.ops[name]
        assert op.weight_bytes() == 2 * op.weight_params(), name


def test_latent_cache_tensors(decode):
    for name, width in (("latent_cache", R), ("rope_cache", ROPE)):
        t = decode.tensors[name]
        assert t.kind == TensorKind.CACHE
        assert t.shape == ("B", "T", width)
        assert t.dtype_bytes == 2
    per_token = sum(
        t.nbytes({"B": 1, "T": 1}) for t in decode.tensors.values() if t.kind == TensorKind.CACHE
    )
    assert per_token == 1152


def test_embedding_head_and_mtp(r1):
    emb = deepseek.build_embedding(r1)
    head = deepseek.build_head(r1)
    mtp = deepseek.build_mtp_projection(r1)
    assert emb.weight_params() == VOCAB * H
    assert head.weight_params() == H + H * VOCAB  # final norm + LM head
    assert mtp.weight_params() == 2 * H + 2 * H * H  # two norms + eh_proj
    assert head.order() == ["final_norm", "lm_head", "sample"]
    assert emb.order() == ["embed"]
    assert mtp.order() == ["mtp_hnorm", "mtp_enorm", "mtp_concat", "mtp_eh_proj"]
    assert flops(head.ops["lm_head"], head, Workload(4, 1, 1)) == 2 * 4 * H * VOCAB


# --------------------------------------------------------------------------------------------
# SnapStream prefill


def test_snapstream_prefill_adds_its_ops(r1):
    g = deepseek.build_layer(r1, "moe", "prefill", SS)
    names = g.order()
    assert set(names) - set(PREFILL_MOE_OPS) == SNAPSTREAM_PREFILL_OPS
    # the original ops keep their relative order
    assert [n for n in names if n in PREFILL_MOE_OPS] == PREFILL_MOE_OPS
    # compression reads the cache the layer writes
    pos = {n: i for i, n in enumerate(names)}
    assert pos["kv_cache_write"] < pos["ring_sink_gather"]
    assert pos["kv_cache_write"] < pos["snapkv_gather_latent"]


def test_snapstream_selection_is_shared_by_all_heads(r1):
    """MLA's heads share the latent, so one top-K selection per layer."""
    g = deepseek.build_layer(r1, "moe", "prefill", SS)
    assert g.tensors["snapkv_index"].shape == ("B", 1, SS.topk)
    assert g.tensors["compressed_latent"].shape == ("B", SS.slots, R)
    assert g.tensors["compressed_rope"].shape == ("B", SS.slots, ROPE)


@settings(max_examples=30, deadline=None)
@given(
    L=st.integers(SS.sink + SS.recent + 1, 1 << 17),
    b=st.integers(1, 4),
    norm=st.sampled_from(list(VoteNormalisation)),
)
def test_snapkv_score_recompute_flops(r1, L, b, norm):
    ss = replace(SS, normalisation=norm)
    g = deepseek.build_layer(r1, "moe", "prefill", ss)
    evict = ss.candidates(L)
    wl = Workload(b, L, L, evict=evict)
    # causal: a window query's softmax runs over every key it sees (the prompt); candidates:
    # over the eviction candidates only
    keys = L if norm == VoteNormalisation.CAUSAL else evict
    # Q_obs K^T over all heads, with the 192-wide query/key
    assert flops(g.ops["snapkv_qk"], g, wl) == 2 * b * ss.obs_window * QK * keys * NH
    assert bytes_read(g.ops["snapkv_qk"], g, wl) == b * keys * NH * QK * 2  # BF16 keys
    assert g.tensors["snapkv_probs"].numel(wl.env()) == b * NH * ss.obs_window * keys
    # the votes are always over the candidates, one selection shared by all heads
    assert g.tensors["snapkv_votes"].numel(wl.env()) == b * evict
    # and the compression is cheap next to attention
    assert flops(g.ops["snapkv_qk"], g, wl) < 0.05 * flops(g.ops["attention"], g, wl) + 1e12


def test_snapkv_scores_span_every_key_by_default(r1):
    g = deepseek.build_layer(r1, "moe", "prefill", SS)
    assert g.tensors["snapkv_scores"].shape == ("B", NH, SS.obs_window, "T")
    ss = replace(SS, normalisation=VoteNormalisation.CANDIDATES)
    g = deepseek.build_layer(r1, "moe", "prefill", ss)
    assert g.tensors["snapkv_scores"].shape == ("B", NH, SS.obs_window, "E")


def test_snapstream_does_not_change_weights(r1, prefill):
    g = deepseek.build_layer(r1, "moe", "prefill", SS)
    assert g.weight_params() == prefill.weight_params()
