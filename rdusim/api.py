"""The Python API behind `rdusim map`: load → (max batch) → compile → simulate → report.

    import rdusim
    m = rdusim.load_mapping("r1_prefill")
    m.move_op("attn_residual", to="Output Proj", layer="moe")
    rdusim.run(m, seq_len=65536).total_latency_s

`run` returns a typed `Report`; `run_mapping` (a path and `--set` strings, as the command line
takes them) returns the program and simulation result as well, with the report as a dict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdusim.compiler.capacity import (
    ddr_placements,
    does_not_fit,
    hbm_by_batch,
    max_batch,
    remedies,
)
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Program
from rdusim.errors import SpecError, SpecErrors, SpecTypeError
from rdusim.report.schema import build_report
from rdusim.sim.model import SimResult, simulate
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import ResolvedMapping, load_mapping

if TYPE_CHECKING:
    from rdusim.mapping_api import Mapping
    from rdusim.report.typed import Report
    from rdusim.search.mapper import AutoMapping, SearchOptions


@dataclass
class MapRun:
    mapping: ResolvedMapping  # with kernels written out when the auto-mapper chose them
    program: Program
    result: SimResult | None
    report: dict[str, Any]
    auto: AutoMapping | None = None  # the search behind `kernels: auto`


def clear_caches() -> None:
    """Forget what runs in this process keep for later ones (kernel timings, ensemble prices,
    greedy auto-mappings, expert shares, parsed spec files): the next run starts as a fresh process does. Every
    kept result is a pure function of its key, so this changes no answer, only the time; the
    benchmarks call it to time cold runs."""
    from rdusim.compiler.compile import clear_greedy
    from rdusim.compiler.experts import expert_share
    from rdusim.sim.model import clear_timings
    from rdusim.spec.yamlio import clear_parsed
    from rdusim.uncertainty.pricing import clear_prices

    clear_timings()
    clear_prices()
    clear_parsed()
    clear_greedy()
    expert_share.cache_clear()


def calibration_summary(rm: ResolvedMapping) -> dict[str, Any]:
    """Each calibrated parameter's value in this run's hardware, with what the shipped posterior
    says of it: its 90% interval and the evidence items that pin it."""
    from rdusim.uncertainty.ensemble import shipped_ensemble
    from rdusim.uncertainty.parameters import PARAMETERS

    ensemble = shipped_ensemble()
    out: dict[str, Any] = {}
    for p in PARAMETERS:
        known = ensemble.parameters.get(p.name, {}) if ensemble else {}
        out[p.name] = {
            "value": p.get(rm.hardware),
            "p05": known.get("p05"),
            "p95": known.get("p95"),
            "pinned_by": known.get("pinned_by", []),
        }
    return out


def run(
    mapping: Mapping | str | Path | dict[str, Any],
    *,
    set: dict[str, Any] | None = None,  # dotted keys, as `--set` takes them
    **overrides: Any,
) -> Report:
    """Compile and simulate a mapping (an edited `Mapping`, a path, a shipped name or a dict)
    as `rdusim map` does. Keyword overrides and `set={"dotted.key": value}` apply to a copy,
    as `--set` would (`hardware.*` and `calibration.*` to the hardware it loads)."""
    from rdusim.mapping_api import load_mapping as load_editable
    from rdusim.report.typed import Report

    m = load_editable(mapping)
    rm = _with_changes(m, {**overrides, **_set_argument(set, m.name)})
    return Report.model_validate(run_resolved(rm).report)


def uncertainty_report(result: SimResult, hw: Hardware) -> dict[str, Any]:
    """The report's `intervals`, `drivers` and `uncertainty` sections (empty without a shipped
    ensemble)."""
    from rdusim.uncertainty.ensemble import shipped_ensemble
    from rdusim.uncertainty.summary import assess

    ensemble = shipped_ensemble()
    if ensemble is None:
        return {}
    u = assess(result, hw, ensemble)
    return {
        "intervals": u.intervals,
        "drivers": u.drivers(ensemble, result.total_latency_s),
        "uncertainty": {
            "members": u.members,
            "discrepancy": u.discrepancy,
            "method": ensemble.method,
            "covers": "the calibrated parameters' posterior given the evidence, with the "
            "mapping, batch and kernels as compiled; not the model's discrepancy",
        },
    }


def _set_argument(value: Any, name: str) -> dict[str, Any]:
    """`run`'s `set=`: a dict from dotted field names to values (None: no changes)."""
    from collections.abc import Mapping as AbcMapping

    call = "rdusim.run(m, set={'snapstream.enabled': False}) (or a keyword: seq_len=65536)"
    if value is None:
        return {}
    if not isinstance(value, AbcMapping):
        hint = f" ({value!r} looks like --set text)" if isinstance(value, str) else ""
        raise SpecTypeError(
            f"set= takes a dict of dotted field names and values, not {type(value).__name__}"
            + hint,
            file=f"<{name}>",
            key="set",
            fix=f"e.g. {call}",
        )
    for key in value:
        if not isinstance(key, str):
            raise SpecTypeError(
                f"set= key {key!r} is not a string ({type(key).__name__}); keys are dotted "
                "field names",
                file=f"<{name}>",
                key="set",
                fix=f"e.g. {call}",
            )
    return dict(value)


def run_mapping(
    path: str | Path | Mapping | dict[str, Any],
    overrides: list[str] | None = None,
    *,
    simulate_it: bool = True,
    trace: bool = False,
    sockets: int = 1,
    hardware: Hardware | None = None,
    search: SearchOptions | None = None,
    progress: Callable[[str], None] | None = None,
    uncertainty: bool = True,
) -> MapRun:
    """Compile and simulate a mapping file, shipped name, `Mapping` or dict, with `--set`-style
    `overrides`; `hardware` replaces the one the mapping names (what-ifs, calibration);
    `uncertainty` adds intervals and drivers over the shipped ensemble."""
    overrides = _override_list(overrides)

    def resolve(items: list[str]) -> ResolvedMapping:
        if isinstance(path, str | Path):
            return load_mapping(path, items)
        return _resolve_editable(path, items)

    rm = resolve(overrides)
    hand = None
    if rm.spec.kernels == "auto" and AUTO_KERNELS in overrides:
        # the mapping's own kernels, for the auto-mapper's gain against them
        plain = resolve([o for o in overrides if o != AUTO_KERNELS])
        hand = plain if plain.spec.kernels != "auto" else None
    return run_resolved(
        rm,
        simulate_it=simulate_it,
        trace=trace,
        sockets=sockets,
        hardware=hardware,
        search=search,
        progress=progress,
        uncertainty=uncertainty,
        hand=hand,
    )


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "kernels":
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


# mapping fields that name a mapping rather than say how it runs
NOT_COMPARED = frozenset({"name", "reference"})


def reference_differences(rm: ResolvedMapping) -> dict[str, Any]:
    """How the mapping, as run, differs from the one it names as its reference: each differing
    field's value here and there (kernels compared whole)."""
    assert rm.spec.reference is not None
    from rdusim.spec.catalog import resolve_mapping

    base = Path(rm.source.file).parent
    candidate = base / rm.spec.reference
    ref = load_mapping(candidate if candidate.exists() else resolve_mapping(rm.spec.reference))
    here = _flat(rm.spec.model_dump(mode="json"))
    there = _flat(ref.spec.model_dump(mode="json"))
    keys = [k for k in {**here, **there} if k not in NOT_COMPARED]
    return {
        "mapping": ref.spec.name or rm.spec.reference,
        "differences": [
            {"key": k, "this": here.get(k), "reference": there.get(k)}
            for k in keys
            if here.get(k) != there.get(k)
        ],
    }


AUTO_KERNELS = "kernels=auto"  # the `--set` that hands a mapping's kernels to the search


def _override_list(overrides: Any) -> list[str]:
    """`run_mapping`'s `overrides`: `--set` strings in a list (None: none)."""
    if overrides is None:
        return []
    if isinstance(overrides, str) or not isinstance(overrides, list | tuple):
        raise SpecTypeError(
            f"overrides takes a list of key=value strings, not {type(overrides).__name__}",
            key="overrides",
            fix="e.g. run_mapping('r1_prefill', ['seq_len=65536'])",
        )
    bad = [o for o in overrides if not isinstance(o, str)]
    if bad:
        raise SpecTypeError(
            f"overrides holds {bad[0]!r}, a {type(bad[0]).__name__}; each is a key=value string",
            key="overrides",
            fix="e.g. run_mapping('r1_prefill', ['seq_len=65536'])",
        )
    return list(overrides)


def _resolve_editable(mapping: Mapping | dict[str, Any], overrides: list[str]) -> ResolvedMapping:
    """A `Mapping` or dict with `key=value` overrides applied, values read as `--set` reads them."""
    from rdusim.mapping_api import load_mapping as load_editable
    from rdusim.spec.yamlio import parse_value

    changes: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise SpecError(
                f"an override is key=value, got {item!r}", key="overrides", fix="e.g. seq_len=65536"
            )
        key, value = item.split("=", 1)
        changes[key.strip()] = parse_value(value)
    return _with_changes(load_editable(mapping), changes)


def _with_changes(m: Mapping, changes: dict[str, Any]) -> ResolvedMapping:
    """`m` resolved with `changes` applied as `--set` applies them: mapping fields to the
    mapping, `hardware.*` and `calibration.*` to the hardware it loads."""
    from rdusim.spec.overrides import Override, apply_hardware_overrides

    fields: dict[str, Any] = {}
    hardware: list[Override] = []
    for key, value in changes.items():
        parts = key.split(".")
        if parts[0] == "calibration" and len(parts) > 1:
            hardware.append(Override(key, parts, value))
        elif parts[0] == "hardware" and len(parts) > 1:
            hardware.append(Override(key, parts[1:], value))
        else:
            fields[key] = value
    if fields:
        m.set(**fields)
    rm = m.resolve()
    if hardware:
        rm = replace(rm, hardware=apply_hardware_overrides(rm.hardware, hardware, rm.source.file))
    return rm


def run_resolved(
    rm: ResolvedMapping,
    *,
    simulate_it: bool = True,
    trace: bool = False,
    sockets: int = 1,
    hardware: Hardware | None = None,
    search: SearchOptions | None = None,
    progress: Callable[[str], None] | None = None,
    uncertainty: bool = True,
    hand: ResolvedMapping | None = None,
) -> MapRun:
    """Compile (resolving `batch: max`) and simulate an already loaded mapping; `kernels: auto`
    is resolved by the auto-mapper's search first (`search` sets its objective and how many
    alternatives it reports), and compared with `hand`, the mapping's own kernels, when given. With `uncertainty`, the report carries each headline number's
    interval over the shipped calibration ensemble and what each time rests on."""
    if hardware is not None:
        rm = replace(rm, hardware=hardware)
    auto: AutoMapping | None = None
    if rm.spec.kernels == "auto":
        from rdusim.search.mapper import auto_map  # the search loads only when asked for

        auto = auto_map(rm, search, progress=progress)
        rm = auto.mapping
    used: dict[int, float] = {}  # HBM bytes per socket of each batch compiled on the way
    known = auto.capacity if auto is not None else None
    capacity_batch: int | None
    if known is not None and known.mapping is rm and rm.spec.batch == "max":
        capacity_batch, program = known.batch, known.program  # what `_compile` would find
        used.update(known.used)
    else:
        capacity_batch, program = _compile(rm, used)
    result = simulate(program, rm.hardware, trace=trace, sockets=sockets) if simulate_it else None
    extra: dict[str, Any] = {}
    if program.phase == "decode" and program.snapstream:
        from rdusim.snapstream.onchip import decode_update_sram

        extra["decode_update_sram_bytes"] = decode_update_sram(program)
    report = build_report(
        program, result, snapstream_extra=extra, calibration=calibration_summary(rm)
    )
    report["max_batch_size"] = capacity_batch
    if uncertainty and result is not None:
        report.update(uncertainty_report(result, rm.hardware))
        if capacity_batch is not None and "intervals" in report:
            report["intervals"]["max_batch_size"] = _max_batch_interval(rm, used)
    if rm.spec.reference:
        report["reference"] = reference_differences(rm)
    if auto is not None:
        report["auto_mapping"] = auto.summary()
        if hand is not None:
            from rdusim.search.mapper import gain_vs_hand

            report["auto_mapping"] |= gain_vs_hand(auto, hand)
        if search is not None and search.alternatives:
            report["alternatives"] = auto.alternatives_json()
    return MapRun(rm, program, result, report, auto)


def _compile(rm: ResolvedMapping, used: dict[int, float]) -> tuple[int | None, Program]:
    """The program, and for decode the largest power-of-two batch that fits HBM (capacity is
    arithmetic, so a decode report has it whether the mapping asks for `batch: max` or fixes
    its batch); None in prefill. `used` gets the HBM bytes of each batch compiled for it."""
    if rm.spec.batch == "max":
        return max_batch(rm, used)
    program = compile_mapping(rm)
    capacity_batch = _capacity(rm, program, used)
    if program.fits:
        return capacity_batch, program
    fix = (
        remedies(
            rm,
            f"use batch {capacity_batch} or less (`batch: max`)",
            "shorten seq_len",
            *ddr_placements(rm, weights=False),
        )
        if capacity_batch
        else "shorten seq_len or use more sockets"
    )
    raise does_not_fit(rm, program, fix)


def _capacity(rm: ResolvedMapping, program: Program, used: dict[int, float]) -> int | None:
    """The largest power-of-two decode batch that fits, or None (prefill, or the weights alone
    overflow HBM, or no batch fits)."""
    if program.phase != "decode" or program.hbm.weights > program.hbm.capacity:
        return None
    if program.ddr.weights > program.ddr.capacity:
        return None
    try:
        return max_batch(rm, used)[0]
    except (SpecError, SpecErrors):
        return None


def _max_batch_interval(rm: ResolvedMapping, used: dict[int, float]) -> dict[str, int] | None:
    """The max batch's interval over the shipped ensemble: each member's usable HBM holds its
    own largest batch (`used`: HBM bytes by batch known so far; larger batches are compiled
    only if a member's usable HBM could hold them)."""
    from rdusim.uncertainty.ensemble import shipped_ensemble
    from rdusim.uncertainty.summary import max_batch_interval, usable_hbm_bytes

    ensemble = shipped_ensemble()
    if ensemble is None:
        return None
    members = ensemble.applied(rm.hardware)
    table = hbm_by_batch(rm, max(usable_hbm_bytes(m) for m in members), known=used)
    return max_batch_interval(table, members)
