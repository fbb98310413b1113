"""A decode step's drafter as compiled: a draft model's weights and cache charged to HBM (against
the draft's bytes worked out by hand from its config), the step as k draft steps plus one
verification (each observed with the simulator on its own), and DeepSeek's MTP module as the
same path with the model's own module drafting."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from rdusim.compiler.capacity import max_batch
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import DRAFTING_ROLES, ExtraRole, Program
from rdusim.errors import SpecError
from rdusim.sim.model import simulate
from rdusim.spec.mapping import MappingSpec, load_mapping, resolve_spec
from rdusim.spec.speculation import Drafter

PLAIN = ["seq_len=8192", "snapstream.enabled=false"]
DRAFT = ["speculative.draft=llama-3.2-1b", "speculative.acceptance=0.8"]
SOCKETS = 16

# Llama-3.2-1B's config (meta-llama/Llama-3.2-1B): hidden 2048, 16 layers, 32 query heads and 8
# KV heads of 64, intermediate 8192, vocabulary 128256, LM head tied to the embedding; BF16.
H, LAYERS, KV_HEADS, HEAD_DIM, FFN, VOCAB, BF16 = 2048, 16, 8, 64, 8192, 128256, 2
KV = KV_HEADS * HEAD_DIM
MATRIX_PARAMS = LAYERS * (H * H + 2 * H * KV + H * H + 3 * H * FFN) + VOCAB * H  # q,k,v,o,FFN
NORM_PARAMS = (2 * LAYERS + 1) * H  # two RMSNorms a layer and the final one
KV_BYTES_PER_TOKEN = 2 * LAYERS * KV * BF16  # K and V of every layer


def _program(*overrides: str, batch: int = 1, mapping: str = "llama31_70b_decode") -> Program:
    return compile_mapping(load_mapping(mapping, [f"batch={batch}", *PLAIN, *overrides]))


def test_the_draft_s_weights_and_cache_are_charged_to_hbm() -> None:
    # 16 sequences over 16 sockets: attention is data-parallel, so each socket caches one
    # sequence of the draft (8192 positions); the matrices are split over the 16 sockets and
    # the norm vectors kept whole on each
    plain = _program(batch=16)
    spec = _program(*DRAFT, "speculative.draft_tokens=4", batch=16)
    weights = MATRIX_PARAMS * BF16 / SOCKETS + NORM_PARAMS * BF16
    kv = 16 * 8192 * KV_BYTES_PER_TOKEN / SOCKETS
    assert MATRIX_PARAMS + NORM_PARAMS == 1_235_814_400  # the published 1.24B parameters
    assert spec.hbm.weights - plain.hbm.weights == pytest.approx(weights, rel=1e-12)
    assert spec.hbm.kv_cache - plain.hbm.kv_cache == pytest.approx(kv, rel=1e-12)
    assert (spec.hbm.draft_weights, spec.hbm.draft_kv_cache) == pytest.approx((weights, kv))
    assert (plain.hbm.draft_weights, plain.hbm.draft_kv_cache) == (0.0, 0.0)


def test_the_draft_lowers_the_largest_batch_that_fits() -> None:
    # Llama-3.1-405B's weights leave little HBM: the 8B draft's 1 GB of weights per socket and
    # its cache push batch 32 over the capacity
    base = ["seq_len=131072"]
    plain = load_mapping("llama31_405b_decode", base)
    spec = load_mapping("llama31_405b_decode_spec", base)
    assert max_batch(plain)[0] == 32
    assert max_batch(spec)[0] == 16
    at_32 = compile_mapping(spec, batch=32).hbm
    assert not at_32.fits and compile_mapping(plain, batch=32).hbm.fits
    assert at_32.used - at_32.draft_weights - at_32.draft_kv_cache < at_32.capacity


def _draft_alone(batch: int) -> float:
    """One decode step of Llama-3.2-1B on its own, mapped as the 70B's mapping maps it: the
    70B's Decoder kernel, looped, on the same node."""
    target = load_mapping("llama31_70b_decode").spec
    data: dict[str, Any] = {
        "name": "draft alone",
        "model": "llama-3.2-1b",
        "hardware": target.hardware,
        "phase": "decode",
        "batch": batch,
        "seq_len": 8192,
        "orchestration": target.orchestration.value,
        "kernel_looping": True,
        "kernels": target.model_dump(mode="json")["kernels"],
    }
    rm = resolve_spec(MappingSpec.model_validate(data), "draft.yaml", None, None)
    return simulate(compile_mapping(rm), rm.hardware).total_latency_s


@pytest.mark.parametrize(("k", "batch"), [(4, 1), pytest.param(2, 8, marks=pytest.mark.slow)])
def test_a_step_is_k_draft_steps_and_one_verification(k: int, batch: int) -> None:
    program = _program(*DRAFT, f"speculative.draft_tokens={k}", batch=batch)
    result = simulate(program, load_mapping("llama31_70b_decode").hardware)
    hw = load_mapping("llama31_70b_decode").hardware
    verify_only = dataclasses.replace(
        program,
        extras={n: e for n, e in program.extras.items() if e.role not in DRAFTING_ROLES},
    )
    verify = simulate(verify_only, hw).total_latency_s
    draft = _draft_alone(batch)
    assert result.total_latency_s == pytest.approx(k * draft + verify, rel=1e-9)
    # verifying k + 1 tokens a sequence costs at least the plain one-token step
    plain = simulate(_program(batch=batch), hw).total_latency_s
    assert verify >= plain * (1 - 1e-9)
    assert program.workload.seq == k + 1


def test_draft_parts_run_k_times_and_the_draft_layers_loop_like_the_target() -> None:
    program = _program(*DRAFT, "speculative.draft_tokens=3")
    parts = {n: e for n, e in program.extras.items() if e.role in DRAFTING_ROLES}
    assert list(parts) == ["draft_embedding", "draft_dense", "draft_head"]
    assert {e.runs for e in parts.values()} == {3}
    layers = parts["draft_dense"]
    assert (layers.count, layers.looped, layers.role) == (16, True, ExtraRole.DRAFT_LAYER)
    assert [k.name for k in layers.kernels] == ["Decoder"]  # the target's kernel
    assert program.speculation.drafter == Drafter.MODEL
    assert program.speculation.draft == "llama-3.2-1b"
    assert program.tokens_per_step == pytest.approx(1 + 0.8 + 0.64 + 0.512)


def _qwen3_draft(tmp_path: Path) -> Path:
    """A Qwen3-style draft (its attention normalises q and k: ops a Llama kernel does not list)
    with Llama-3's vocabulary, so that it passes the tokenizer check."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
    cfg = json.loads((fixtures / "qwen3-8b.json").read_text(encoding="utf-8"))
    cfg |= {"vocab_size": 128256, "num_hidden_layers": 2}
    path = tmp_path / "qwen3-draft.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def test_a_draft_whose_ops_the_target_kernels_miss_is_a_located_error(tmp_path: Path) -> None:
    draft = _qwen3_draft(tmp_path)
    overrides = [f"speculative.draft={draft}", "speculative.draft_tokens=2", DRAFT[1]]
    with pytest.raises(SpecError) as info:
        _program(*overrides)
    err = info.value
    assert err.key == "speculative.kernels" and "q_norm" in err.problem
    assert err.fix and "speculative.kernels: auto" in err.fix
    program = _program(*overrides, "speculative.kernels=auto")  # the fix compiles
    assert program.extras["draft_dense"].runs == 2


def test_mtp_drafts_through_the_same_path() -> None:
    program = compile_mapping(load_mapping("r1_decode", ["batch=1", "seq_len=8192"]))
    sp = program.speculation
    assert (sp.drafter, sp.draft_tokens, sp.acceptance) == (Drafter.MTP, 2, 0.8)
    assert program.tokens_per_step == pytest.approx(1 + 0.8 + 0.64)
    assert program.workload.seq == 3
    drafting = [n for n, e in program.extras.items() if e.role in DRAFTING_ROLES]
    assert drafting == ["mtp0_proj", "mtp0_layer", "mtp_embedding", "mtp_head"]
    own = [program.extras[n] for n in ("mtp0_proj", "mtp0_layer")]
    weights = sum(sum(p.weight_bytes for k in e.kernels for p in k.ops) for e in own)
    assert program.hbm.draft_weights == pytest.approx(weights)
    assert program.hbm.draft_kv_cache > 0  # the module's MoE layer caches its positions too
