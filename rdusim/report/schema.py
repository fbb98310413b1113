"""The JSON report shared by `rdusim map` and the simulator (keys are kept stable).

Per-socket figures are per socket; `share` is a kernel's fraction of its layer's latency;
`total_latency_s` is time to first token for prefill and one step for decode. A figure the
current run cannot compute is null, never invented.
"""

from __future__ import annotations

from typing import Any

from rdusim.compiler.program import DRAFTING_ROLES, Kernel, Program
from rdusim.sim.kernel import KernelTiming
from rdusim.sim.model import SimResult
from rdusim.spec.speculation import Drafter

# 2: kernel calls, MTP, expert routing, collective rounds; since, added keys only (memory tiers:
# `ddr_bytes`, `placement`, DDR traffic)
SCHEMA_VERSION = 2


def build_report(
    program: Program,
    result: SimResult | None = None,
    *,
    snapstream_extra: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
) -> dict[str, Any]:
    total_latency = result.total_latency_s if result else None
    ss: dict[str, Any] = {"enabled": program.snapstream, "kv_len": program.kv_len}
    ss.update(snapstream_extra or {})
    return {
        "schema_version": SCHEMA_VERSION,
        "mapping": program.mapping,
        "model": program.model,
        "hardware": program.hardware,
        "sockets": program.sockets,
        "phase": program.phase,
        "batch": program.workload.batch,
        "seq_len": program.seq_len,
        "snapstream": ss,
        "layers": _layers(program, result),
        "extras": _extras(program, result),
        "sram_peak_bytes": program.sram_peak_bytes,
        "hbm_bytes": {
            "capacity": program.hbm.capacity,
            "weights": program.hbm.weights,
            "kv_cache": program.hbm.kv_cache,
            "workspace": program.hbm.workspace,
        },
        "ddr_bytes": {
            "capacity": program.ddr.capacity,
            "weights": program.ddr.weights,
            "kv_cache": program.ddr.kv_cache,
        },
        "placement": {
            "weights": {part: tier.value for part, tier in program.weight_tiers.items()},
            "kv_cache": program.kv_tier.value,
        },
        "traffic_bytes": {
            "hbm": result.traffic("hbm"),
            "ddr": result.traffic("ddr"),
            "p2p": result.traffic("p2p"),
        }
        if result
        else None,
        "total_latency_s": total_latency,
        "kernel_calls": result.kernel_calls
        if result
        else sum(lp.calls for lp in program.all_layers()),
        "kernel_call_time_s": result.kernel_call_time_s if result else None,
        "orchestration": program.orchestration,
        "expert_loading": program.expert_loading,
        "kernel_looping": any(lp.looped for lp in program.layers.values()),
        "experts_touched": {
            kind: lp.experts_touched
            for kind, lp in program.layers.items()
            if lp.experts_touched is not None
        },
        "max_batch_size": None,
        **_decode_fields(program, total_latency),
        "speculation": _speculation(program, result),
        "throughput_tokens_per_s": result.throughput_tokens_per_s if result else None,
        "calibration": calibration,
    }


def _layers(program: Program, result: SimResult | None) -> dict[str, Any]:
    """One entry per layer kind: its count, latency, calls and kernels."""
    layers: dict[str, Any] = {}
    for kind, lp in program.layers.items():
        lr = result.layers[kind] if result else None
        total = lr.latency_s if lr else None
        kernels = [
            _kernel(k, lr.kernels[i] if lr else None, total) for i, k in enumerate(lp.kernels)
        ]
        layers[kind] = {
            "count": lp.count,
            "latency_s": total,
            "total_s": lr.total_s if lr else None,
            "calls": lp.calls,
            "looped": lp.looped,
            "experts_touched": lp.experts_touched,
            "kernels": kernels,
        }
    return layers


def _kernel(k: Kernel, kt: KernelTiming | None, total: float | None) -> dict[str, Any]:
    """One kernel's row: what it holds, and how long it took when it was simulated."""
    return {
        "name": k.name,
        "ops": [p.name for p in k.ops],
        "sharding": k.sharding,
        "op_sharding": {p.name: p.sharding_label for p in k.ops},
        "pcus": k.pcus,
        "pmus": k.pmus,
        "sram_bytes": k.sram_bytes,
        "collectives": [
            {"kind": c.kind, "tensor": c.tensor, "bytes": c.bytes, "rounds": c.rounds}
            for c in k.collectives
        ],
        "flops": sum(p.flops for p in k.ops),
        "hbm_traffic_bytes": sum(p.hbm_bytes for p in k.ops),
        "ddr_traffic_bytes": k.ddr_bytes,
        "latency_s": kt.latency_s if kt else None,
        "call_s": kt.call_share_s if kt else None,
        "pipeline_s": kt.pipeline_s if kt else None,
        "share": kt.latency_s / total if kt and total else None,
        "bottleneck": kt.bottleneck if kt else None,
        "op_timing": [
            {
                "op": o.name,
                "busy_s": o.busy_s,
                "hbm_s": o.hbm_s,
                "ddr_s": o.ddr_s,
                "stall_s": o.stall_s,
                "pcus": o.pcus,
                "bound": o.bound,
            }
            for o in kt.ops
        ]
        if kt
        else None,
    }


def _extras(program: Program, result: SimResult | None) -> dict[str, Any]:
    """The graphs run besides the layers (embedding, LM head, MTP), one entry each."""
    return {
        name: {
            "runs": lp.executions,
            "latency_s": result.extras[name].latency_s if result and lp.runs else None,
            "total_s": result.extras[name].total_s if result else None,
            "calls": lp.calls,
            "experts_touched": lp.experts_touched,
            "kernels": [k.name for k in lp.kernels],
        }
        for name, lp in program.extras.items()
    }


def _decode_fields(program: Program, total_latency: float | None) -> dict[str, Any]:
    """`mtp`, `speculation`, `tokens_per_step` and `tpot_s`: null outside decode (`mtp` is
    null too when a draft model drafts)."""
    decode = program.phase == "decode"
    mtp = decode and program.speculation.drafter != Drafter.MODEL
    return {
        "mtp": {
            "mode": program.mtp_mode,
            "draft_tokens": program.draft_tokens,
            "verified_tokens": program.workload.seq,
        }
        if mtp
        else None,
        "tokens_per_step": program.tokens_per_step if decode else None,
        "tpot_s": total_latency / program.tokens_per_step if decode and total_latency else None,
    }


def _speculation(program: Program, result: SimResult | None) -> dict[str, Any] | None:
    """A decode step's drafter, k and a, the accepted tokens, the step split into drafting (k
    drafter runs) and verifying (the target over k + 1 tokens), and the drafter's own HBM."""
    if program.phase != "decode":
        return None
    sp = program.speculation
    drafting = verify = share = None
    if result is not None:
        drafting = sum(lr.total_s for lr in result.extras.values() if lr.role in DRAFTING_ROLES)
        verify = result.total_latency_s - drafting
        share = drafting / result.total_latency_s if result.total_latency_s else None
    runs = sp.draft_runs
    return {
        "drafter": sp.drafter.value,
        "draft": sp.draft,
        "draft_tokens": sp.draft_tokens,
        "acceptance": sp.acceptance if sp.draft_tokens else None,
        "verified_tokens": program.workload.seq,
        "tokens_per_step": sp.accepted_tokens,
        "draft_step_s": drafting / runs if drafting is not None and runs else None,
        "draft_time_s": drafting,
        "verify_s": verify,
        "draft_share": share,
        "draft_weights_bytes": program.hbm.draft_weights,
        "draft_kv_cache_bytes": program.hbm.draft_kv_cache,
    }
