"""Maximum decode batch from the per-socket memory plan, and why a plan does not fit.

Rule: a static-graph deployment compiles one decode graph per batch size, and we take batch
sizes that are powers of two (the paper's 16 ... 256), so the maximum is the largest power of
two whose plan (weight shards + the KV cache of the sequences each socket holds + workspace)
fits every socket's tiers: usable HBM, and DDR for what `placement:` puts there (and whose
kernels fit in SRAM).
"""

from __future__ import annotations

import math

from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Program
from rdusim.errors import InfeasibleError, SpecError, SpecErrors
from rdusim.ir.model import summarize
from rdusim.spec.mapping import ResolvedMapping
from rdusim.spec.placement import PARTS, Tier, model_parts

# The largest power-of-two batch `max_batch` compiles (and `validation.measures` prices): a
# plan that still fits there is reported at it.
LARGEST_BATCH_TRIED = 1 << 16


def max_batch(rm: ResolvedMapping, used: dict[int, float] | None = None) -> tuple[int, Program]:
    """The largest power-of-two batch that fits, with its compiled program; `used`, if given,
    gets the HBM bytes per socket of every batch compiled on the way."""
    best: tuple[int, Program] | None = None
    b = 1
    while b <= LARGEST_BATCH_TRIED:
        try:
            prog = compile_mapping(rm, batch=b)
        except (SpecError, SpecErrors):
            if best is None:
                raise  # the mapping itself is wrong: report it
            break  # a larger batch overflows a kernel's SRAM: it does not fit either
        if used is not None:
            used[b] = prog.hbm.used
        if not prog.fits:
            break
        best = (b, prog)
        b *= 2
    if best is None:
        raise not_even_one(rm, compile_mapping(rm, batch=1))
    return best


def hbm_by_batch(
    rm: ResolvedMapping, ceiling_bytes: float, known: dict[int, float] | None = None
) -> dict[int, float]:
    """HBM bytes per socket of each power-of-two batch, from 1 up to the first that needs more
    than `ceiling_bytes` or whose kernels no longer build (batches in `known` are not
    compiled again): what the largest batch that fits any usable capacity up to the ceiling
    is read from (`largest_batch`)."""
    out = dict(known or {})
    b = 1
    while b <= LARGEST_BATCH_TRIED:
        if b not in out:
            try:
                prog = compile_mapping(rm, batch=b)
            except (SpecError, SpecErrors):
                break
            if not prog.ddr.fits:  # DDR's capacity is no calibrated figure: no member fits it
                break
            out[b] = prog.hbm.used
        if out[b] > ceiling_bytes:
            break
        b *= 2
    return out


def largest_batch(used: dict[int, float], capacity_bytes: float) -> int:
    """The largest batch of `used` (HBM bytes per socket by batch, as `hbm_by_batch` gives it)
    whose plan fits `capacity_bytes`; 0 if none does."""
    return max((b for b, u in used.items() if u <= capacity_bytes), default=0)


def not_even_one(rm: ResolvedMapping, prog: Program) -> InfeasibleError:
    """Why batch 1 does not fit, and what would make it: the weights alone, or the cache too."""
    if not prog.ddr.fits:
        return ddr_does_not_fit(rm, prog)
    hbm = prog.hbm
    if hbm.weights > hbm.capacity:
        return _weights_do_not_fit(rm, prog)
    problem = (
        f"not even batch 1 fits: {hbm.used / 1e9:.1f} GB of HBM needed per socket (weights "
        f"{hbm.weights / 1e9:.1f}, KV cache {hbm.kv_cache / 1e9:.1f}), "
        f"{hbm.capacity / 1e9:.1f} GB usable ({(hbm.used - hbm.capacity) / 1e9:.1f} GB over)"
    )
    fix = remedies(rm, "shorten seq_len", "use more sockets", *ddr_placements(rm, weights=False))
    return InfeasibleError(problem, file=rm.source.file, key="batch", fix=fix)


def _weights_do_not_fit(rm: ResolvedMapping, prog: Program) -> InfeasibleError:
    """The weights alone overflow a socket's HBM: the model's weights against what the node
    holds, and whether sharding wider could help at all."""
    hbm, sockets = prog.hbm, prog.sockets
    total = hbm.weights * sockets if sockets else hbm.weights
    model_total = summarize(rm.model).weight_bytes
    whose, verb = f"{rm.model.name}'s weights", "do"
    if prog.ddr.weights:  # only the part placed in HBM counts against it
        model_total *= hbm.weights / (hbm.weights + prog.ddr.weights)
        whose, verb = f"the part of {whose} placed in HBM", "does"
    dtype = rm.model.dtypes.weights or rm.model.default_weight_dtype
    node = f"{rm.hardware.name}'s {sockets} socket{'s' if sockets != 1 else ''}"
    if model_total > hbm.capacity * sockets:
        needed = math.ceil(model_total / hbm.capacity)
        return InfeasibleError(
            f"{whose} ({model_total / 1e9:.0f} GB in {dtype}) {verb} not fit "
            f"{node}: they hold {hbm.capacity * sockets / 1e9:.0f} GB usable "
            f"({hbm.capacity / 1e9:.1f} GB each), and sharded over all of them the weights need "
            f"{hbm.weights / 1e9:.1f} GB per socket",
            file=rm.source.file,
            key="hardware",
            fix=f"use a node with at least {needed} sockets of this kind"
            + (" (--set hardware=sn40l-16)" if sockets < 16 and needed <= 16 else "")
            + ", a narrower weight dtype (dtypes.weights in a copy of the model file)"
            + "".join(f", {w}" for w in ddr_placements(rm, kv=False)),
        )
    return InfeasibleError(
        f"the weights need {hbm.weights / 1e9:.1f} GB per socket ({total / 1e9:.0f} GB over "
        f"{node}, against {model_total / 1e9:.0f} GB of {whose}: some are "
        f"kept in copies), and {hbm.capacity / 1e9:.1f} GB are usable",
        file=rm.source.file,
        key="kernels",
        fix="shard every weight-holding op over all of the node's sockets (a degree below the "
        "socket count keeps copies; `tp: all` is every socket), use a node with more sockets, "
        "or a narrower weight dtype",
    )


def ddr_placements(rm: ResolvedMapping, *, weights: bool = True, kv: bool = True) -> list[str]:
    """The DDR placements that would free HBM and are not made yet: weights of every part
    (the whole model) and the KV cache."""
    p = rm.spec.placement
    out = []
    in_hbm = [x for x in PARTS if x in model_parts(rm.model) and p.weights_of(x) == Tier.HBM]
    if weights and in_hbm:
        how = "--set placement.weights=ddr"
        if "moe" in in_hbm:  # the experts are most of a MoE model's weights
            how = "--set placement.moe=ddr, or placement.weights=ddr"
        out.append(f"place weights in DDR ({how})")
    if kv and p.kv_cache != Tier.DDR:
        out.append("place the KV cache in DDR (--set placement.kv_cache=ddr)")
    return out


def ddr_does_not_fit(rm: ResolvedMapping, program: Program) -> InfeasibleError:
    """The weights and KV cache `placement:` puts in DDR overflow a socket's DDR."""
    ddr = program.ddr
    return InfeasibleError(
        f"DDR overflows: batch {program.workload.batch} places {ddr.used / 1e9:.1f} GB in DDR "
        f"per socket (weights {ddr.weights / 1e9:.1f}, KV cache {ddr.kv_cache / 1e9:.1f}), and "
        f"a socket has {ddr.capacity / 1e9:.1f} GB ({(ddr.used - ddr.capacity) / 1e9:.1f} GB "
        "over)",
        file=rm.source.file,
        key="placement",
        fix="place less in DDR (placement: hbm for some parts), use a smaller batch, or more "
        "sockets",
    )


def remedies(rm: ResolvedMapping, *options: str, snapstream_helps: bool = True) -> str:
    """A fix offering `options` ("a, b, or c"), with "enable snapstream" second when SnapStream
    is off and would help (a compressed cache is smaller); never when it is already on."""
    items = list(options)
    if snapstream_helps and not rm.spec.snapstream.enabled:
        items.insert(1, "enable snapstream")
    if len(items) <= 2:
        return " or ".join(items)
    return ", ".join(items[:-1]) + f", or {items[-1]}"


def does_not_fit(rm: ResolvedMapping, program: Program, fix: str | None = None) -> InfeasibleError:
    """Why a compiled program overflows memory: what `placement:` puts in DDR, the weights alone
    in HBM (`not_even_one`), or the batch's cache and workspace beside them, with `fix` saying
    what to change (by default a smaller batch)."""
    if not program.ddr.fits:
        return ddr_does_not_fit(rm, program)
    hbm = program.hbm
    if hbm.weights > hbm.capacity:
        return not_even_one(rm, program)
    return InfeasibleError(
        f"batch {program.workload.batch} needs {hbm.used / 1e9:.1f} GB of HBM per socket "
        f"(weights {hbm.weights / 1e9:.1f}, KV cache {hbm.kv_cache / 1e9:.1f}, workspace "
        f"{hbm.workspace / 1e9:.1f}); {hbm.capacity / 1e9:.1f} GB are usable "
        f"({(hbm.used - hbm.capacity) / 1e9:.1f} GB over)",
        file=rm.source.file,
        key="batch",
        fix=fix
        or remedies(
            rm,
            "use a smaller batch (`batch: max` finds the largest that fits)",
            "shorten seq_len",
            *ddr_placements(rm, weights=False),
        ),
    )
