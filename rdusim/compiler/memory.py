"""Memory planning: on-chip buffers per op and kernel (SRAM), and the HBM and DDR budgets per
socket (each op's weights and the KV cache in the tier `placement:` gives them)."""

from __future__ import annotations

from rdusim.compiler.program import DDRPlan, HBMPlan, Kernel, LayerProgram, OpPlan
from rdusim.compiler.sharding import cache_share, kv_input_share
from rdusim.errors import InfeasibleError
from rdusim.ir.attrs import AttentionAttrs
from rdusim.ir.graph import CostClass, Graph, Op, Phase, TensorKind, Workload
from rdusim.ir.model import attention_window, cache_bytes
from rdusim.spec.hardware import Hardware
from rdusim.spec.placement import Tier
from rdusim.spec.yamlio import kernel_key

# A blocking op (softmax over a whole row, a sort) holds its entire input before emitting; an
# input larger than this fraction of SRAM is spilled: written to HBM and read back. A quarter
# leaves the rest of the chip to the kernel's other stages (which stream, double-buffered).
SPILL_FRACTION = 0.25

# Weights up to this size stay resident in SRAM for the kernel; larger ones stream through a
# double buffer one matrix (an expert's or head's slice) or one tile-sized chunk at a time.
# 16 MB is 32 PMUs' worth (3% of SRAM): every per-socket shard of R1's attention projections fits,
# no expert bank does.
RESIDENT_WEIGHT_BYTES = 16e6


def _weight_buffer(op_weight: float, matrices: int, tiles: int) -> float:
    if op_weight <= RESIDENT_WEIGHT_BYTES:
        return op_weight
    chunks = max(matrices, tiles, 1)
    return 2 * op_weight / chunks


def plan_sram(kernel: Kernel, graph: Graph, wl: Workload, hw: Hardware) -> None:
    """Fill each op's and the kernel's SRAM bytes (double-buffered tiles + weight buffers)."""
    total = 0.0
    for p in kernel.ops:
        op = graph.ops[p.name]
        # expert-grouped streams carry a token's k routed slots one expert at a time
        routed = op.routed
        tiles = kernel.tiles * (routed.slots if routed else 1)
        io = (p.stream_in + p.stream_out + p.hbm_write) / tiles
        a = op.attrs
        if isinstance(a, AttentionAttrs) and a.causal and wl.seq > 1:
            buf = _flash_buffers(kernel, p, op, a, graph, wl, tiles)
        elif p.blocking and p.stream_in > SPILL_FRACTION * hw.socket.sram_bytes:
            p.spill_bytes = 2 * p.stream_in
            buf = 2 * (io + p.hbm_read / tiles)
        elif p.blocking:
            buf = p.stream_in + 2 * (p.stream_out + p.hbm_write + p.hbm_read) / tiles
        else:
            buf = 2 * (io + p.hbm_read / tiles)
        matrices = op.weights[0].shape[0] if op.weights and len(op.weights[0].shape) == 3 else 1
        if p.cost_class != CostClass.MEMORY:  # a lookup table is read row by row, not buffered
            buf += _weight_buffer(p.weight_bytes, int(matrices), tiles)
        p.sram_bytes = buf
        total += buf
    kernel.sram_bytes = total


def _flash_buffers(
    kernel: Kernel,
    p: OpPlan,
    op: Op,
    a: AttentionAttrs,
    graph: Graph,
    wl: Workload,
    tiles: int,
) -> float:
    """Flash-style attention holds a query tile, a double-buffered K/V block and one score tile
    in flight."""
    heads = a.heads / max(p.degree, 1)
    block = kernel.kv_block or wl.kv
    act = graph.tensors[op.inputs[0]].dtype_bytes
    q_tile = kernel.tile_tokens * heads * a.qk_dim * act
    # one position of every K/V input this socket holds (a rope key shared by all heads is held
    # once), double-buffered
    env = Workload(1, 1, 1).env()
    row = sum(
        graph.tensors[t].nbytes(env) * kv_input_share(graph, t, p.strategy, p.degree, 1 / p.degree)
        for t in op.inputs[1:]
    )
    kv = 2 * block * row
    scores = kernel.tile_tokens * block * act
    return 2 * q_tile + kv + scores + 2 * p.stream_out / tiles


def check_sram(kernel: Kernel, kind: str, index: int | None, hw: Hardware) -> None:
    if kernel.sram_bytes > hw.socket.sram_bytes:
        path: tuple[str | int, ...] = (
            ("kernels", kind, index, "tiling") if index is not None else ()
        )
        over = kernel.sram_bytes - hw.socket.sram_bytes
        raise InfeasibleError(
            f"kernel {kernel.name!r} needs {kernel.sram_bytes / 1e6:.3g} MB of SRAM per socket, "
            f"more than the {hw.socket.sram_bytes / 1e6:.3g} MB a socket has "
            f"({over / 1e6:.3g} MB over)",
            key=kernel_key(path, kernel.name) if index is not None else None,
            path=path or None,
            fix="use smaller tiles (tiling.tile_tokens, tiling.kv_block), shard wider, "
            "or split the kernel",
            limit="SRAM",
        )


def kv_share(layer: LayerProgram, sockets: int, wl: Workload) -> float:
    """Fraction of the layer's KV cache one socket stores (see `sharding.cache_share`)."""
    for k in layer.kernels:
        for p in k.ops:
            if p.traits.is_attention:
                return cache_share(
                    layer.graph.ops[p.name], p.strategy, p.degree, wl.batch, p.seq_split
                )
    return 1.0 / sockets


def plan_hbm(
    layers: list[LayerProgram], hw: Hardware, wl: Workload, phase: Phase, snap_kv: int | None
) -> HBMPlan:
    """Weights (shards), KV cache and inter-kernel workspace per socket, all in HBM."""
    return plan_memory(layers, hw, wl, phase, snap_kv)[0]


def plan_memory(
    layers: list[LayerProgram],
    hw: Hardware,
    wl: Workload,
    phase: Phase,
    snap_kv: int | None,
    kv_tier: Tier = Tier.HBM,
) -> tuple[HBMPlan, DDRPlan]:
    """Per socket, HBM's weights, KV cache and workspace, and DDR's weights and KV cache: each
    op's weight shard in its op's tier, the cache in `kv_tier`, the workspace in HBM. HBM is
    what the runtime leaves usable (`calibration.hbm_usable_fraction`); DDR counts whole, since
    no published figure says what the runtime keeps of it."""
    weights = {
        tier: sum(
            lp.count
            * sum(p.weight_bytes for k in lp.kernels for p in k.ops if p.weight_tier == tier)
            for lp in layers
        )
        for tier in Tier
    }
    kv = _kv_bytes(layers, hw, wl, phase, snap_kv)
    workspace = _workspace_bytes(layers)
    capacity = hw.socket.hbm.capacity_bytes * hw.calibration.hbm_usable_fraction
    in_hbm = kv_tier == Tier.HBM
    hbm = HBMPlan(
        capacity=capacity,
        weights=weights[Tier.HBM],
        kv_cache=kv if in_hbm else 0.0,
        workspace=workspace,
    )
    ddr = DDRPlan(
        capacity=hw.socket.ddr.capacity_bytes,
        weights=weights[Tier.DDR],
        kv_cache=0.0 if in_hbm else kv,
    )
    return hbm, ddr


def _kv_bytes(
    layers: list[LayerProgram], hw: Hardware, wl: Workload, phase: Phase, snap_kv: int | None
) -> float:
    """The KV cache per socket: decode's sequences, or the prompt's finished cache."""
    kv = 0.0
    for lp in layers:
        if not any(p.traits.is_attention for k in lp.kernels for p in k.ops):
            continue
        if phase == Phase.DECODE:
            kv += lp.count * cache_bytes(lp.graph, wl) * kv_share(lp, hw.sockets, wl)
        else:
            # the prompt's cache (compressed, with SnapStream; at most a sliding window) waits in
            # its tier for the decode node
            kept = snap_kv if snap_kv is not None else wl.kv
            window = attention_window(lp.graph)
            kept = kept if window is None else min(kept, window)
            per_tok = cache_bytes(lp.graph, Workload(1, 1, 1))
            kv += lp.count * wl.batch * kept * per_tok / hw.sockets
    return kv


def _workspace_bytes(layers: list[LayerProgram]) -> float:
    """The largest layer's inter-kernel activations written to HBM (caches aside)."""
    return max(
        (
            sum(
                p.hbm_write
                for k in lp.kernels
                for p in k.ops
                if not any(
                    lp.graph.tensors[t].kind == TensorKind.CACHE
                    for t in lp.graph.ops[p.name].outputs
                )
            )
            for lp in layers
        ),
        default=0.0,
    )
