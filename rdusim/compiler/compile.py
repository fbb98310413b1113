"""The compiler driver: mapping → IR graphs → fuse → shard → plan memory → allocate → Program."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from rdusim.compiler.allocate import allocate, check_units
from rdusim.compiler.auto import auto_kernels
from rdusim.compiler.collectives import Topology
from rdusim.compiler.experts import ExpertLoading, Routing
from rdusim.compiler.fusion import FusedKernel, check_overrides, fuse
from rdusim.compiler.memory import check_sram, plan_memory, plan_sram
from rdusim.compiler.program import (
    DRAFTER_DEPLOYED_ROLES,
    Collective,
    DDRPlan,
    ExtraRole,
    HBMPlan,
    Kernel,
    LayerProgram,
    OpPlan,
    Program,
)
from rdusim.compiler.sharding import (
    BaseKey,
    OpBase,
    ShardContext,
    fused_shardings,
    sharding_errors,
    walk,
)
from rdusim.compiler.tiers import Placement, part_of, place
from rdusim.errors import InfeasibleError, SpecError, SpecErrors
from rdusim.ir.graph import Graph, Phase, Workload
from rdusim.ir.model import ModelGraphs, build_model
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import (
    DraftKernels,
    KernelSpec,
    MappingSpec,
    ResolvedMapping,
    Sharding,
    Tiling,
    snapstream_sizes,
)
from rdusim.spec.model import ModelSpec
from rdusim.spec.placement import Tier
from rdusim.spec.speculation import Drafter, Speculation

# A decode step's activations are a few rows; its kernels stream weights (and the cache) in
# chunks a PMU holds, so a kernel has as many tiles as its largest op has PMU-sized chunks, and at
# least this many.
MIN_DECODE_TILES = 64


def prefill_tile_tokens(hidden: int, act_bytes: float, pmu_bytes: int) -> int:
    """Rows of a streamed prefill tile: as many rows of the hidden state as one PMU holds,
    rounded down to a power of two (32 for R1's 7168-wide BF16 rows in a 500 kB PMU)."""
    rows = max(1, int(pmu_bytes // (hidden * act_bytes)))
    return 1 << (rows.bit_length() - 1)


def workload_for(
    phase: Phase, batch: int, seq_len: int, ss: SnapStreamConfig | None, verified: int = 1
) -> Workload:
    """Shape symbols of the main model's layers: the prompt in prefill; in decode, `verified`
    tokens per sequence (1, or k + 1 with k MTP drafts) against the cache."""
    if phase == Phase.PREFILL:
        evict = ss.candidates(seq_len) if ss else 0
        return Workload(batch, seq_len, seq_len, evict)
    return Workload(batch, verified, ss.slots if ss else seq_len)


@dataclass(frozen=True)
class CompileContext:
    """Settings every layer of one compile shares."""

    hw: Hardware
    phase: Phase
    tile_tokens: int  # default prefill tile rows
    routing: Routing = field(default_factory=Routing)
    placement: Placement = field(default_factory=Placement)


def _tiles(tiling: Tiling, ops: list[OpPlan], wl: Workload, ctx: CompileContext) -> tuple[int, int]:
    """(tiles, tokens per tile) for a kernel: prefill streams token tiles; decode streams its
    ops' HBM bytes in PMU-sized chunks, the largest op setting the count. A prefill kernel whose
    tokens fit one tile (the head, which reads only the last position) is a matrix-vector
    product like a decode kernel, and streams its weights in chunks the same way."""
    largest = max((p.memory_in_bytes for p in ops), default=0.0)
    chunks = math.ceil(largest / ctx.hw.socket.pmu_bytes)
    if ctx.phase == Phase.DECODE:
        return max(MIN_DECODE_TILES, chunks), wl.tokens
    tile = tiling.tile_tokens or ctx.tile_tokens
    token_tiles = max(1, math.ceil(wl.tokens / tile))
    if token_tiles == 1:
        return max(1, chunks), wl.tokens
    return token_tiles, tile


def shard_context(fused: list[FusedKernel], wl: Workload, ctx: CompileContext) -> ShardContext:
    """What the sharding pass needs for one layer's fused kernels."""
    hw = ctx.hw
    return ShardContext(
        workload=wl,
        sockets=hw.sockets,
        prefill=ctx.phase == Phase.PREFILL,
        topology=Topology(hw.links.topology),
        kv_blocks={fk.spec.name: fk.spec.tiling.kv_block for fk in fused},
        routing=ctx.routing,
    )


def build_kernels(
    graph: Graph,
    fused: list[FusedKernel],
    kind: str,
    wl: Workload,
    ctx: CompileContext,
    check: bool = True,
    part: str | None = None,
    units: bool = True,
    bases: dict[BaseKey, OpBase] | None = None,
) -> list[Kernel]:
    """The kernels of one layer graph; `part` is the placement part whose tier holds the
    weights (default: `kind`, a layer kind); without `units` the kernels' PCUs and PMUs are
    not allocated (a caller that reads only their SRAM); `bases` keeps the sharding walk's ops
    for walks of other subgraphs (`walk`)."""
    sctx = shard_context(fused, wl, ctx)
    sharded = walk(graph, fused_shardings(fused, kind, sctx), sctx, bases)
    weights, cache = ctx.placement.weights_of(part or kind), ctx.placement.kv_cache
    kernels: list[Kernel] = []
    for fk in fused:
        plans = sharded.kernel_plans(fk.ops, sctx.kv_blocks.get(fk.spec.name))
        collectives = sharded.kernel_collectives(plans)
        ops = list(plans.values())
        place(ops, weights, cache)
        where = KernelPlace(fk.spec.name, fk.index, kind, fk.spec.tiling)
        kernels.append(assemble_kernel(graph, where, ops, collectives, wl, ctx, check, units))
    return kernels


@dataclass(frozen=True)
class KernelPlace:
    """Where a kernel sits in its mapping (name, position in its kind's list, the kind: what
    its errors name) and its tiling."""

    name: str
    index: int
    kind: str
    tiling: Tiling


def assemble_kernel(
    graph: Graph,
    where: KernelPlace,
    ops: list[OpPlan],
    collectives: list[Collective],
    wl: Workload,
    ctx: CompileContext,
    check: bool = True,
    units: bool = True,
) -> Kernel:
    """One kernel from its ops' sharded plans and the collectives it hosts: tiles, SRAM plan,
    the checks that it fits a socket (`check`), and its PCUs and PMUs (`units`)."""
    hw = ctx.hw
    tiles, tile_tokens = _tiles(where.tiling, ops, wl, ctx)
    k = Kernel(
        where.name,
        ops,
        tiles=tiles,
        tile_tokens=min(tile_tokens, wl.tokens),
        kv_block=where.tiling.kv_block,
    )
    members = {p.name for p in ops}
    k.edges = graph.edges_within(members)
    k.collectives = collectives
    plan_sram(k, graph, wl, hw)
    if check:
        check_sram(k, where.kind, where.index, hw)
        check_units(k, where.kind, where.index, hw)
    if units:
        allocate(k, hw)
    return k


# The greedy auto-mapping of a graph (the seed of the search, and every extra graph of every
# program) at a workload: compiled again and again by capacity searches and the auto-mapper's
# finalists, so kept by its full input.
AUTO_CACHE_SIZE = 256
_auto_specs: dict[tuple[str, str, Workload, CompileContext], list[KernelSpec]] = {}


def clear_greedy() -> None:
    """Forget the kept greedy auto-mappings."""
    _auto_specs.clear()


def _auto(graph: Graph, kind: str, wl: Workload, ctx: CompileContext) -> list[KernelSpec]:
    key = (graph.fingerprint(), kind, wl, ctx)
    if key not in _auto_specs:
        if len(_auto_specs) >= AUTO_CACHE_SIZE:
            _auto_specs.pop(next(iter(_auto_specs)))
        _auto_specs[key] = _greedy(graph, kind, wl, ctx)
    return list(_auto_specs[key])


def _greedy(graph: Graph, kind: str, wl: Workload, ctx: CompileContext) -> list[KernelSpec]:
    sockets = ctx.hw.sockets
    # the trial kernels are subgraphs of `graph` that grow an op at a time: most of their ops'
    # sharded plans are the last trial's (`walk`'s `bases`)
    bases: dict[BaseKey, OpBase] = {}

    def estimate(ops: list[str]) -> float:
        sub = graph.subgraph(ops)
        fk = FusedKernel(
            KernelSpec(name="trial", ops=ops, sharding=Sharding(tp=sockets)), 0, tuple(ops)
        )
        try:
            ks = build_kernels(sub, [fk], kind, wl, ctx, check=False, units=False, bases=bases)
        except SpecError:
            return math.inf
        return ks[0].sram_bytes

    return auto_kernels(graph, ctx.phase, sockets, estimate, ctx.hw.socket.sram_bytes)


def _snapstream_op_names(model: ModelSpec, kind: str, plain: Graph) -> set[str]:
    """Names SnapStream would add to `plain` (a mapping may list them while it is disabled)."""
    probe = build_model(model, Phase.PREFILL, SnapStreamConfig(1, 1, 1, 1, 1))
    return set(probe.layers[kind].ops) - set(plain.ops)


def compile_context(rm: ResolvedMapping) -> CompileContext:
    """The settings every layer of a mapping's compile shares."""
    hw = rm.hardware
    tile = prefill_tile_tokens(
        rm.model.hidden_size, rm.model.bytes_of("activations"), hw.socket.pmu_bytes
    )
    return CompileContext(
        hw, Phase(rm.spec.phase), tile, _routing(rm), Placement.of(rm.spec.placement)
    )


def layer_workload(rm: ResolvedMapping, batch: int) -> Workload:
    """The decoder layers' workload of a mapping at `batch`."""
    spec = rm.spec
    phase = Phase(spec.phase)
    ss = snapstream_sizes(spec, rm.source.file)
    verified = spec.speculation.verified_tokens if phase == Phase.DECODE else 1
    return workload_for(phase, batch, spec.seq_len, ss, verified)


def _routing(rm: ResolvedMapping) -> Routing:
    r = rm.spec.moe.routing
    return Routing(
        distribution=r.distribution,
        exponent=r.exponent or 0.0,
        loads=rm.expert_loads,
        loading=ExpertLoading(rm.spec.moe.expert_loading),
    )


def _layer_kernels(
    spec: MappingSpec,
    rm: ResolvedMapping,
    graph: Graph,
    kind: str,
    wl: Workload,
    ctx: CompileContext,
) -> list[Kernel]:
    """The mapping's kernels for one layer kind (or the auto-mapper's)."""
    if spec.kernels == "auto":
        kspecs = _auto(graph, kind, wl, ctx)
    elif kind not in spec.kernels:
        raise SpecError(
            f"no kernels for the {kind} layers of {rm.model.name}",
            key="kernels",
            path=("kernels",),
            fix=f"add a `{kind}:` list of kernels, or use `kernels: auto`",
        )
    else:
        kspecs = spec.kernels[kind]
    known = (
        _snapstream_op_names(rm.model, kind, graph)
        if spec.snapstream.enabled is False and ctx.phase == Phase.PREFILL
        else set()
    )
    fused = fuse(graph, kspecs, kind, known)
    check_overrides(fused, kind, known)
    errors = sharding_errors(graph, fused, kind, shard_context(fused, wl, ctx))
    if len(errors) > 1:
        raise SpecErrors(errors)
    if errors:
        raise errors[0]
    return build_kernels(graph, fused, kind, wl, ctx)


def _together(errors: list[SpecError]) -> SpecError | SpecErrors:
    """The layer kinds' errors as one: the mistakes together, or, when every error is a
    request that does not fit (which a sweep records and goes on), the first of them."""
    mistakes = [e for e in errors if not isinstance(e, InfeasibleError)]
    if not mistakes:
        return errors[0]
    unique = list({(e.key, e.problem): e for e in mistakes}.values())
    return unique[0] if len(unique) == 1 else SpecErrors(unique)


def looped_form(kernel: Kernel, hw: Hardware) -> Kernel:
    """`kernel` as a looped call runs it: streaming the next iteration's weights during this
    one when one more iteration's worth fits in SRAM beside the kernel (Koeplinger et al.'s
    pipelined outer loop), else as is."""
    extra = kernel.streamed_weight_bytes
    if kernel.sram_bytes + extra > hw.socket.sram_bytes:
        return kernel
    return dataclasses.replace(
        kernel, prefetch_iteration=True, sram_bytes=kernel.sram_bytes + extra
    )


def _check_looping(kind: str, kernels: list[Kernel]) -> None:
    if len(kernels) > 1:
        names = ", ".join(k.name for k in kernels)
        raise SpecError(
            f"kernel looping runs consecutive calls of one kernel as one call, and the {kind} "
            f"layer is {len(kernels)} kernels ({names})",
            key="kernel_looping",
            path=("kernel_looping",),
            fix=f"fuse the {kind} layer into one kernel, or set kernel_looping: false",
        )


@dataclass(frozen=True)
class _Extra:
    """An extra graph to compile: its name in the program, role, workload and runs per step
    (`count` identical layers of a draft model's kind, `looped` as one call when the mapping
    loops its layers)."""

    name: str
    role: ExtraRole
    graph: Graph
    workload: Workload
    runs: int = 1
    module: int | None = None
    count: int = 1
    looped: bool = False
    kernels: list[KernelSpec] | None = None  # None: auto-mapped


def _planned_extras(
    rm: ResolvedMapping, graphs: ModelGraphs, main_wl: Workload, phase: Phase
) -> list[_Extra]:
    """Embedding and LM head (once per prompt or step), and in decode the drafter's parts."""
    b = main_wl.batch
    decode = phase == Phase.DECODE
    head_wl = main_wl if decode else Workload(b, 1, 1)
    plan = [
        _Extra("embedding", ExtraRole.EMBEDDING, graphs.embedding, main_wl),
        _Extra("head", ExtraRole.HEAD, graphs.head, head_wl),
    ]
    if not decode:
        return plan
    drafter = rm.spec.speculation.drafter
    return plan + DRAFTERS[drafter](rm, graphs, Workload(b, 1, main_wl.kv))


def _no_drafter(rm: ResolvedMapping, graphs: ModelGraphs, one: Workload) -> list[_Extra]:
    return []


def _mtp_parts(rm: ResolvedMapping, graphs: ModelGraphs, one: Workload) -> list[_Extra]:
    """The MTP module drafts one token per run; with D modules in a chain, draft j is made by
    module j mod D. Its runs see one token per sequence; a `scaled` step does not run it, but its
    weights and cache stay deployed (they count in the HBM plan). Its decoder layer is a MoE
    layer, mapped like the others when the mapping lists MoE kernels."""
    if not graphs.mtp:
        return []
    spec = rm.spec
    moe = spec.kernels.get("moe") if isinstance(spec.kernels, dict) else None
    modules = len(graphs.mtp)
    drafts = spec.speculation.draft_runs
    plan = []
    for i, module in enumerate(graphs.mtp):
        runs = len(range(i, drafts, modules))
        plan += [
            _Extra(f"mtp{i}_proj", ExtraRole.MTP_PROJECTION, module.projection, one, runs, i),
            _Extra(f"mtp{i}_layer", ExtraRole.MTP_LAYER, module.layer, one, runs, i, kernels=moe),
        ]
    if drafts:
        # each draft embeds the token it extends and reads logits for the next
        plan += [
            _Extra("mtp_embedding", ExtraRole.MTP_EMBEDDING, graphs.embedding, one, drafts),
            _Extra("mtp_head", ExtraRole.MTP_HEAD, graphs.head, one, drafts),
        ]
    return plan


def _draft_model_parts(rm: ResolvedMapping, graphs: ModelGraphs, one: Workload) -> list[_Extra]:
    """A draft model's decode step, k times per step: its embedding, its decoder layers and its
    head at the batch, one token per sequence, over caches of the target's length (SnapStream's
    compressed length when it is on: the draft keeps the same positions). Its layers run the
    target mapping's kernels for their kind (`speculative.kernels: target`; a kind the mapping
    does not list is auto-mapped) and loop as the target's do; `auto` auto-maps them all."""
    spec, draft = rm.spec, rm.draft
    assert spec.speculative is not None and draft is not None
    k = spec.speculative.draft_tokens
    ss = snapstream_sizes(spec, rm.source.file)
    dg = build_model(draft, Phase.DECODE, ss)
    target_kernels = spec.speculative.kernels == DraftKernels.TARGET
    listed = spec.kernels if isinstance(spec.kernels, dict) and target_kernels else {}
    plan = [_Extra("draft_embedding", ExtraRole.DRAFT_EMBEDDING, dg.embedding, one, k)]
    for kind, graph in dg.layers.items():
        count = dg.layer_counts[kind]
        plan.append(
            _Extra(
                f"draft_{kind}",
                ExtraRole.DRAFT_LAYER,
                graph,
                one,
                k,
                count=count,
                looped=spec.kernel_looping and count > 1,
                kernels=listed.get(kind),
            )
        )
    plan.append(_Extra("draft_head", ExtraRole.DRAFT_HEAD, dg.head, one, k))
    return plan


# One planner per drafter: what a decode step runs besides the target to draft its tokens.
DRAFTERS: dict[Drafter, Callable[[ResolvedMapping, ModelGraphs, Workload], list[_Extra]]] = {
    Drafter.NONE: _no_drafter,
    Drafter.MTP: _mtp_parts,
    Drafter.MODEL: _draft_model_parts,
}


def _extra_program(rm: ResolvedMapping, e: _Extra, ctx: CompileContext) -> LayerProgram:
    """One extra's kernels: the mapping's where the plan names them, else auto-mapped. A draft
    layer loops only as one kernel (an auto-mapped layer of several kernels runs unlooped)."""
    g, wl = e.graph, e.workload
    kspecs = e.kernels if e.kernels is not None else _auto(g, e.name, wl, ctx)
    try:
        part = part_of(e.name, e.role)
        kernels = build_kernels(g, fuse(g, kspecs, e.name), e.name, wl, ctx, part=part)
    except (SpecError, SpecErrors) as exc:
        if e.role != ExtraRole.DRAFT_LAYER or e.kernels is None:
            raise
        raise _draft_kernels_error(rm, e, exc) from None
    looped = e.looped and len(kernels) == 1
    if looped:
        kernels = [looped_form(k, ctx.hw) for k in kernels]
    return LayerProgram(
        e.name, e.count, g, kernels, wl, runs=e.runs, looped=looped, role=e.role, module=e.module
    )


def _draft_kernels_error(rm: ResolvedMapping, e: _Extra, exc: SpecError | SpecErrors) -> SpecError:
    first = exc.errors[0] if isinstance(exc, SpecErrors) else exc
    kind = e.name.removeprefix("draft_")
    name = rm.draft.name if rm.draft is not None else "the draft"
    return SpecError(
        f"the draft {name}'s {kind} layers cannot run the mapping's {kind} kernels: "
        f"{first.problem}",
        key="speculative.kernels",
        path=("speculative",),
        fix="set speculative.kernels: auto (the draft's graphs auto-mapped), or choose a draft "
        "whose layers have the target's op names (a smaller model of the same family)",
    )


def _extras(
    rm: ResolvedMapping, graphs: ModelGraphs, main_wl: Workload, ctx: CompileContext
) -> dict[str, LayerProgram]:
    """The extras' kernels, by name in the program."""
    return {
        e.name: _extra_program(rm, e, ctx) for e in _planned_extras(rm, graphs, main_wl, ctx.phase)
    }


def _deployed(
    layers: dict[str, LayerProgram], extras: dict[str, LayerProgram]
) -> list[LayerProgram]:
    """What holds weights (and cache) in HBM: the layers, the drafter's own parts (MTP modules,
    a draft model), embedding and head."""
    by_role = {e.role: e for e in extras.values()}
    return [
        *layers.values(),
        *_drafter_deployed(extras),
        by_role[ExtraRole.EMBEDDING],
        by_role[ExtraRole.HEAD],
    ]


def _drafter_deployed(extras: dict[str, LayerProgram]) -> list[LayerProgram]:
    return [e for e in extras.values() if e.role in DRAFTER_DEPLOYED_ROLES]


def _memory(
    layers: dict[str, LayerProgram],
    extras: dict[str, LayerProgram],
    hw: Hardware,
    wl: Workload,
    phase: Phase,
    snap_kv: int | None,
    kv_tier: Tier,
) -> tuple[HBMPlan, DDRPlan]:
    """The HBM and DDR plans of everything deployed, with the drafter's own weights and cache
    in HBM named."""
    hbm, ddr = plan_memory(_deployed(layers, extras), hw, wl, phase, snap_kv, kv_tier)
    drafter = _drafter_deployed(extras)
    if not drafter:
        return hbm, ddr
    own, _ = plan_memory(drafter, hw, wl, phase, snap_kv, kv_tier)
    return dataclasses.replace(hbm, draft_weights=own.weights, draft_kv_cache=own.kv_cache), ddr


def _speculation(rm: ResolvedMapping) -> Speculation:
    """The step's speculation as compiled: a draft model named by its model name."""
    sp = rm.spec.speculation
    if sp.drafter == Drafter.MODEL and rm.draft is not None:
        return dataclasses.replace(sp, draft=rm.draft.name)
    return sp


def compile_mapping(rm: ResolvedMapping, batch: int | None = None) -> Program:
    """Compile a resolved mapping for a concrete batch (decode's `max` is resolved by serving)."""
    spec, hw = rm.spec, rm.hardware
    b = batch if batch is not None else spec.batch
    if not isinstance(b, int):
        raise SpecError(
            "batch 'max' must be resolved before compiling",
            key="batch",
            fix="use rdusim.compiler.capacity.max_batch or give a number",
        )
    phase = Phase(spec.phase)
    errors: list[SpecError] = []  # every layer kind's, reported together
    try:
        ss = snapstream_sizes(spec, rm.source.file)
        graphs = build_model(rm.model, phase, ss)
        wl = layer_workload(rm, b)
        ctx = compile_context(rm)
        layers: dict[str, LayerProgram] = {}
        for kind, graph in graphs.layers.items():
            try:
                kernels = _layer_kernels(spec, rm, graph, kind, wl, ctx)
                if spec.kernel_looping:
                    _check_looping(kind, kernels)
            except SpecErrors as many:
                errors += many.errors
                continue
            except SpecError as exc:
                errors.append(exc)
                continue
            count = graphs.layer_counts[kind]
            looped = spec.kernel_looping and count > 1
            if looped:
                kernels = [looped_form(k, hw) for k in kernels]
            layers[kind] = LayerProgram(kind, count, graph, kernels, wl, looped=looped)
        if errors:
            raise _together(errors)
        extras = _extras(rm, graphs, wl, ctx)
    except SpecErrors as many:
        raise SpecErrors([rm.source.locate(e) for e in many.errors]) from None
    except SpecError as exc:
        raise rm.source.locate(exc) from None
    deployed = _deployed(layers, extras)
    kv_tier = rm.spec.placement.kv_cache
    hbm, ddr = _memory(layers, extras, hw, wl, phase, ss.slots if ss else None, kv_tier)
    return Program(
        mapping=spec.name or rm.source.file,
        model=rm.model.name,
        hardware=hw.name,
        phase=phase,
        seq_len=spec.seq_len,
        workload=wl,
        sockets=hw.sockets,
        layers=layers,
        extras=extras,
        hbm=hbm,
        ddr=ddr,
        kv_len=wl.kv if phase == Phase.DECODE else (ss.slots if ss else spec.seq_len),
        snapstream=ss is not None,
        tokens_per_step=spec.tokens_per_step,
        orchestration=spec.orchestration.value,
        mtp_mode=spec.mtp.mode.value,
        draft_tokens=spec.mtp.draft_tokens,
        speculation=_speculation(rm),
        expert_loading=spec.moe.expert_loading.value,
        weight_tiers={
            part_of(lp.kind, lp.role): ctx.placement.weights_of(part_of(lp.kind, lp.role))
            for lp in deployed
        },
        kv_tier=kv_tier,
    )
