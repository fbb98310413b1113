"""The compiler driver: mapping → IR graphs → fuse → shard → plan memory → allocate → Program."""

from __future__ import annotations

import math

from rdusim.compiler.allocate import allocate
from rdusim.compiler.auto import auto_kernels
from rdusim.compiler.fusion import FusedKernel, fuse
from rdusim.compiler.memory import check_sram, plan_hbm, plan_sram
from rdusim.compiler.program import Kernel, LayerProgram, Program
from rdusim.compiler.sharding import shard
from rdusim.errors import SpecError
from rdusim.ir.graph import Graph, Workload
from rdusim.ir.model import build_model
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import KernelSpec, ResolvedMapping, Sharding, snapstream_sizes

# Rows of a streamed prefill tile unless a kernel's `tiling.tile_tokens` says otherwise: large
# enough to keep a 32x6 systolic PCU busy, small enough that a kernel's double buffers stay well
# inside SRAM (the paper's kernels use 35-290 MB of 520 MB with it).
DEFAULT_TILE_TOKENS = 2048
# A decode step's activations are a few rows; its kernels stream weight chunks, simulated as this
# many pipeline steps (the same resolution as MAX_SIM_TILES).
DECODE_TILES = 64


def workload_for(phase: str, batch: int, seq_len: int, ss: SnapStreamConfig | None) -> Workload:
    if phase == "prefill":
        evict = ss.candidates(seq_len) if ss else 0
        return Workload(batch, seq_len, seq_len, evict)
    return Workload(batch, 1, ss.slots if ss else seq_len)


def _tiles(fk_spec: KernelSpec, wl: Workload, phase: str) -> tuple[int, int]:
    """(tiles, tokens per tile) for a kernel: prefill streams token tiles; decode
    streams weight chunks, so it is cut into a fixed number of pipeline steps."""
    if phase == "decode":
        return DECODE_TILES, wl.tokens
    tile = fk_spec.tiling.tile_tokens or DEFAULT_TILE_TOKENS
    return max(1, math.ceil(wl.tokens / tile)), tile


def build_kernels(
    graph: Graph,
    fused: list[FusedKernel],
    kind: str,
    wl: Workload,
    hw: Hardware,
    phase: str,
    check: bool = True,
) -> list[Kernel]:
    sharded = shard(
        graph,
        fused,
        kind,
        wl,
        hw.sockets,
        {fk.spec.name: fk.spec.tiling.kv_block for fk in fused},
        hw.links.topology,
    )
    kernels: list[Kernel] = []
    for fk in fused:
        tiles, tile_tokens = _tiles(fk.spec, wl, phase)
        k = Kernel(
            fk.spec.name,
            [sharded.ops[n] for n in fk.ops],
            tiles=tiles,
            tile_tokens=min(tile_tokens, wl.tokens),
            kv_block=fk.spec.tiling.kv_block,
        )
        members = set(fk.ops)
        k.edges = [(a, b) for a, b in graph.dag.edges if a in members and b in members]
        k.collectives = [c for i, c in enumerate(sharded.collectives) if sharded.host[i] in members]
        plan_sram(k, graph, wl, hw)
        if check:
            check_sram(k, kind, fk.index, hw)
        allocate(k, hw)
        kernels.append(k)
    return kernels


def _auto(graph: Graph, kind: str, wl: Workload, hw: Hardware, phase: str) -> list[KernelSpec]:
    def estimate(ops: list[str]) -> float:
        sub = graph.subgraph(ops)
        fk = FusedKernel(
            KernelSpec(name="trial", ops=ops, sharding=Sharding(tp=hw.sockets)), 0, tuple(ops)
        )
        try:
            ks = build_kernels(sub, [fk], kind, wl, hw, phase, check=False)
        except SpecError:
            return math.inf
        return ks[0].sram_bytes

    return auto_kernels(graph, phase, hw.sockets, estimate, hw.socket.sram_bytes)


def _snapstream_op_names(rm: ResolvedMapping, kind: str, plain: Graph) -> set[str]:
    """Names SnapStream would add to `plain` (a mapping may list them while it is disabled)."""
    probe = build_model(rm.model, "prefill", SnapStreamConfig(1, 1, 1, 1, 1))
    return set(probe.layers[kind].ops) - set(plain.ops)


def compile_mapping(rm: ResolvedMapping, batch: int | None = None) -> Program:
    """Compile a resolved mapping for a concrete batch (decode's `max` is resolved by serving)."""
    spec, hw = rm.spec, rm.hardware
    b = batch if batch is not None else spec.batch
    if not isinstance(b, int):
        raise SpecError(
            "batch 'max' must be resolved before compiling",
            key="batch",
            fix="use rdusim.serving.capacity.max_batch or give a number",
        )
    try:
        ss = snapstream_sizes(spec, rm.source.file)
        graphs = build_model(rm.model, spec.phase, ss)
        wl = workload_for(spec.phase, b, spec.seq_len, ss)
        layers: dict[str, LayerProgram] = {}
        for kind, graph in graphs.layers.items():
            if spec.kernels == "auto":
                kspecs = _auto(graph, kind, wl, hw, spec.phase)
            else:
                if kind not in spec.kernels:
                    raise SpecError(
                        f"no kernels for the {kind} layers of {rm.model.name}",
                        key="kernels",
                        path=("kernels",),
                        fix=f"add a `{kind}:` list of kernels, or use `kernels: auto`",
                    )
                kspecs = spec.kernels[kind]
            known = (
                _snapstream_op_names(rm, kind, graph)
                if ss is None and spec.phase == "prefill"
                else set()
            )
            fused = fuse(graph, kspecs, kind, known)
            kernels = build_kernels(graph, fused, kind, wl, hw, spec.phase)
            layers[kind] = LayerProgram(kind, graphs.layer_counts[kind], graph, kernels)
        extras: dict[str, LayerProgram] = {}
        extra_graphs = {"embedding": graphs.embedding, "head": graphs.head}
        if spec.phase == "decode":
            extra_graphs.update(graphs.mtp)
        for name, g in extra_graphs.items():
            ewl = wl if name != "head" or spec.phase == "decode" else Workload(b, 1, 1)
            if name.endswith("_layer") and spec.kernels != "auto" and "moe" in spec.kernels:
                # the MTP module's decoder layer is a MoE layer: map it like the others
                kspecs = spec.kernels["moe"]
            else:
                kspecs = _auto(g, name, ewl, hw, spec.phase)
            fused = fuse(g, kspecs, name)
            extras[name] = LayerProgram(
                name, 1, g, build_kernels(g, fused, name, ewl, hw, spec.phase)
            )
    except SpecError as exc:
        raise rm.source.locate(exc) from None
    hbm = plan_hbm(
        [
            *layers.values(),
            *[e for n, e in extras.items() if n.startswith("mtp")],
            extras["embedding"],
            extras["head"],
        ],
        hw,
        wl,
        spec.phase,
        ss.slots if ss else None,
    )
    return Program(
        mapping=spec.name or rm.source.file,
        model=rm.model.name,
        hardware=hw.name,
        phase=spec.phase,
        seq_len=spec.seq_len,
        workload=wl,
        sockets=hw.sockets,
        layers=layers,
        extras=extras,
        hbm=hbm,
        kv_len=wl.kv if spec.phase == "decode" else (ss.slots if ss else spec.seq_len),
        snapstream=ss is not None,
        tokens_per_step=spec.tokens_per_step,
    )
