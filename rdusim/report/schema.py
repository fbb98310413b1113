"""The JSON report shared by `rdusim map` and the simulator (keys are kept stable).

Per-socket figures are per socket; `share` is a kernel's fraction of its layer's latency;
`total_latency_s` is time to first token for prefill and one step for decode. A figure the
current run cannot compute is null, never invented.
"""

from __future__ import annotations

from typing import Any

from rdusim.compiler.program import Program
from rdusim.serving.decode import throughput as serving_throughput
from rdusim.sim.model import SimResult

SCHEMA_VERSION = 1


def build_report(
    program: Program,
    result: SimResult | None = None,
    *,
    snapstream_extra: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
) -> dict[str, Any]:
    wl = program.workload
    layers: dict[str, Any] = {}
    for kind, lp in program.layers.items():
        lr = result.layers[kind] if result else None
        total = lr.latency_s if lr else None
        kernels = []
        for i, k in enumerate(lp.kernels):
            kt = lr.kernels[i] if lr else None
            kernels.append(
                {
                    "name": k.name,
                    "ops": [p.name for p in k.ops],
                    "sharding": k.sharding,
                    "op_sharding": {
                        p.name: f"{p.strategy}{p.degree}" if p.degree > 1 else "replicate"
                        for p in k.ops
                    },
                    "pcus": k.pcus,
                    "pmus": k.pmus,
                    "sram_bytes": k.sram_bytes,
                    "collectives": [
                        {"kind": c.kind, "tensor": c.tensor, "bytes": c.bytes, "steps": c.steps}
                        for c in k.collectives
                    ],
                    "flops": sum(p.flops for p in k.ops),
                    "hbm_traffic_bytes": sum(
                        p.hbm_read
                        + p.hbm_write
                        + (p.weight_bytes if p.cost_class != "memory" else 0.0)
                        for p in k.ops
                    ),
                    "latency_s": kt.latency_s if kt else None,
                    "share": kt.latency_s / total if kt and total else None,
                    "bottleneck": kt.bottleneck if kt else None,
                    "op_timing": [
                        {
                            "op": o.name,
                            "busy_s": o.busy_s,
                            "hbm_s": o.hbm_s,
                            "stall_s": o.stall_s,
                            "pcus": o.pcus,
                            "bound": o.bound,
                        }
                        for o in kt.ops
                    ]
                    if kt
                    else None,
                }
            )
        layers[kind] = {"count": lp.count, "latency_s": total, "kernels": kernels}
    extras = {
        name: {
            "runs": result.extras[name].runs if result else 1,
            "latency_s": result.extras[name].latency_s if result else None,
            "kernels": [k.name for k in lp.kernels],
        }
        for name, lp in program.extras.items()
    }
    total_latency = result.total_latency_s if result else None
    throughput = serving_throughput(result) if result else None
    ss: dict[str, Any] = {"enabled": program.snapstream, "kv_len": program.kv_len}
    ss.update(snapstream_extra or {})
    return {
        "schema_version": SCHEMA_VERSION,
        "mapping": program.mapping,
        "model": program.model,
        "hardware": program.hardware,
        "sockets": program.sockets,
        "phase": program.phase,
        "batch": wl.batch,
        "seq_len": program.seq_len,
        "snapstream": ss,
        "layers": layers,
        "extras": extras,
        "sram_peak_bytes": program.sram_peak_bytes,
        "hbm_bytes": {
            "capacity": program.hbm.capacity,
            "weights": program.hbm.weights,
            "kv_cache": program.hbm.kv_cache,
            "workspace": program.hbm.workspace,
        },
        "traffic_bytes": {"hbm": result.traffic("hbm"), "p2p": result.traffic("p2p")}
        if result
        else None,
        "total_latency_s": total_latency,
        "max_batch_size": None,
        "tokens_per_step": program.tokens_per_step if program.phase == "decode" else None,
        "throughput_tokens_per_s": throughput,
        "calibration": calibration,
    }
