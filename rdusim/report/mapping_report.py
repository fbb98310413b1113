"""Human-readable rendering of the `rdusim map` report (kernels table, HBM budget, timing)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rdusim.report.console import (
    columns_to_show,
    number_with,
    seconds,
    seconds_with,
    si,
    table_blocks,
    terminal_width,
    wrap_items,
    wrap_text,
)

KERNEL_HEADERS = (
    "kernel",
    "sharding",
    "PCUs",
    "PMUs",
    "SRAM",
    "collectives",
    "call",
    "latency",
    "share",
    "bottleneck",
)
KERNEL_ALIGN = "<<>>><>>><"
# columns that wrap when the table is too wide, first shrunk first (or the other way round,
# when that wraps fewer rows)
KERNEL_WRAP = (9, 0)
# columns left out, in this order, when the table does not fit even so; sharding moves to the
# ops line under each kernel ("ops (tp16): ...")
KERNEL_DROP = (5, 3, 4, 1)
SHARDING = 1
LEGEND = (
    "per socket: SRAM, collectives (count: bytes, rounds); call: part of latency; "
    "op [dp16]: sharded unlike its kernel"
)


def _collectives(k: dict[str, Any]) -> str:
    """'6: 7.03 MB, 7 rounds': how many collectives, their bytes and rounds per socket."""
    coll = k["collectives"]
    if not coll:
        return "-"
    total = sum(c["bytes"] for c in coll)
    rounds = sum(c.get("rounds", 1) for c in coll)
    return f"{len(coll)}: {si(total, 'B')}, {rounds} round{'s' if rounds != 1 else ''}"


def _collective_list(k: dict[str, Any]) -> list[str]:
    """Each collective: kind, tensor, bytes per socket (and rounds when more than one)."""
    out = []
    for c in k["collectives"]:
        rounds = c.get("rounds", 1)
        words = [c["kind"], c.get("tensor") or "", si(c["bytes"], "B")]
        more = f" ({rounds} rounds)" if rounds != 1 else ""
        out.append(" ".join(w for w in words if w) + more)
    return out


def _op_sharding(k: dict[str, Any]) -> dict[str, str]:
    """Each op's sharding; the kernel's label for every op when the report has no per-op map."""
    return k.get("op_sharding") or dict.fromkeys(k["ops"], k["sharding"])


def main_sharding(k: dict[str, Any]) -> str:
    """The sharding most of the kernel's ops run with (ties: the earliest op's)."""
    labels = list(_op_sharding(k).values())
    if not labels:
        return str(k["sharding"])
    counts = Counter(labels)
    return max(labels, key=lambda label: (counts[label], -labels.index(label)))


def sharding_cell(k: dict[str, Any]) -> str:
    """The main sharding, and attention's where it differs: 'tp16 (attention sp16)'."""
    main = main_sharding(k)
    attention = _op_sharding(k).get("attention")
    if attention is not None and attention != main:
        return f"{main} (attention {attention})"
    return main


def _ops_line(k: dict[str, Any], width: int, folded: bool = False) -> list[str]:
    """The kernel's ops in order, an op whose sharding differs from the main one marked; the
    main sharding in the prefix when the table has no sharding column (`folded`)."""
    main = main_sharding(k)
    sharding = _op_sharding(k)
    items = [op if sharding.get(op, main) == main else f"{op} [{sharding[op]}]" for op in k["ops"]]
    return wrap_items(items, width, prefix=f"  ops ({main}): " if folded else "  ops: ")


def _kernel_row(k: dict[str, Any]) -> list[str]:
    return [
        k["name"],
        sharding_cell(k),
        str(k["pcus"]),
        str(k["pmus"]),
        si(k["sram_bytes"], "B"),
        _collectives(k),
        seconds(k["call_s"]) if k["call_s"] is not None else "-",
        seconds(k["latency_s"]),
        f"{100 * k['share']:.2f}%" if k["share"] is not None else "-",
        k["bottleneck"] or "-",
    ]


def kernel_columns(r: dict[str, Any], width: int) -> list[int]:
    """The kernel table's columns that fit `width`, the same for every layer kind: all of
    them, or without collectives, PMUs, SRAM and sharding, in that order, as far as needed."""
    rows = [_kernel_row(k) for layer in r["layers"].values() for k in layer["kernels"]]
    return columns_to_show(KERNEL_HEADERS, rows, width, drop=KERNEL_DROP, wrap=KERNEL_WRAP)


def _kernel_table(kernels: Sequence[dict[str, Any]], width: int, show: list[int]) -> list[str]:
    """One row per kernel, its ops on the lines below it."""
    rows = [_kernel_row(k) for k in kernels]
    head, blocks = min(
        (
            table_blocks(KERNEL_HEADERS, rows, KERNEL_ALIGN, width=width, wrap=wrap, show=show)
            for wrap in (KERNEL_WRAP, KERNEL_WRAP[::-1])
        ),
        key=lambda table: sum(len(block) for block in table[1]),
    )
    lines = list(head)
    for k, block in zip(kernels, blocks, strict=True):
        lines += block
        lines += _ops_line(k, width, folded=SHARDING not in show)
    return lines


def _legend(show: list[int], width: int) -> str:
    """What the columns mean; below the full table's width, what was left out and where it is."""
    if len(show) == len(KERNEL_HEADERS):
        return LEGEND
    per_socket = [
        word for i, word in ((4, "SRAM"), (5, "collectives (count: bytes, rounds)")) if i in show
    ]
    parts = [f"per socket: {', '.join(per_socket)}"] if per_socket else []
    parts.append("call: part of latency")
    if SHARDING in show:
        parts.append("op [dp16]: sharded unlike its kernel")
    else:
        parts.append("ops (tp16): the kernel's sharding, op [dp16]: an op sharded otherwise")
    left = [KERNEL_HEADERS[i] for i in KERNEL_DROP if i not in show and i != SHARDING]
    if left:
        where = "; --ops lists the collectives" if 5 not in show else ""
        parts.append(f"not shown in {width} columns: {', '.join(left)} (--json has them{where})")
    return "; ".join(parts)


def _layer_title(r: dict[str, Any], kind: str, layer: dict[str, Any]) -> str:
    lat = layer["latency_s"]
    title = f"{kind} layers x{layer['count']}" + (f": {seconds(lat)} each" if lat else "")
    if layer.get("looped"):
        title += f" (one looped call; `call` is its cost shared over the {layer['count']})"
    touched = layer.get("experts_touched")
    if touched is not None and r["phase"] == "decode":
        title += f", {touched:.1f} experts touched per step"
        if r.get("expert_loading") == "all":
            title += " (every expert streamed: expert_loading all)"
    return title


def render_map_report(r: dict[str, Any], width: int | None = None) -> str:
    """The kernels of each layer kind, the HBM budget and the timing, within `width` columns
    (default: the terminal's)."""
    width = width or terminal_width()
    head = (
        f"{r['model']} on {r['hardware']} ({r['sockets']} sockets), {r['phase']}, "
        f"batch {r['batch']}, seq_len {r['seq_len']}, {_snapstream_words(r)}; "
        f"mapping {r['mapping']}"
    )
    show = kernel_columns(r, width)
    lines = [wrap_text(head, width, subsequent="  "), wrap_text(_legend(show, width), width), ""]
    for kind, layer in r["layers"].items():
        lines.append(wrap_text(_layer_title(r, kind, layer), width, subsequent="  "))
        lines += _kernel_table(layer["kernels"], width, show)
        lines.append("")
    lines += _extras_lines(r, width)
    lines += _auto_lines(r, width)
    lines += _reference_lines(r, width)
    summary = [wrap_text(text, width, subsequent="  ") for text in _summary(r)]
    lines += [*summary[:-1], *_calibration_lines(r, width), summary[-1]]
    return "\n".join(lines)


def _snapstream_words(r: dict[str, Any]) -> str:
    """'SnapStream on (kv_len 32768, 4x compressed)', or why the cache is not compressed."""
    ss = r["snapstream"]
    if not ss["enabled"]:
        return "SnapStream off"
    kv_len, seq_len = ss["kv_len"], r["seq_len"]
    if kv_len is None or kv_len >= seq_len:
        return f"SnapStream enabled, cache not compressed (kv_len {kv_len} >= seq_len {seq_len})"
    return f"SnapStream on (kv_len {kv_len}, {seq_len / kv_len:.3g}x compressed)"


def _auto_lines(r: dict[str, Any], width: int) -> list[str]:
    """What the auto-mapper chose and why: objective, plans, each kernel boundary's reason,
    and the runner-ups it simulated."""
    a = r.get("auto_mapping")
    if not a:
        return []
    plans = "; ".join(f"{kind}: {label}" for kind, label in a["sharding_plans"].items())
    head = (
        f"auto-mapping: objective {a['objective']}, batch {a['batch']}, "
        f"{'kernel looping, ' if a['kernel_looping'] else ''}plans ({plans}); "
        f"{a['candidate_kernels_built']} candidate kernels costed in closed form, "
        f"{a['mappings_simulated']} mappings simulated"
        + (f", {a['search_seconds']:.1f} s" if a.get("search_seconds") is not None else "")
    )
    lines = [wrap_text(head, width, subsequent="  ")]
    lines += _gain_lines(a, width)
    for kind, bounds in a["boundaries"].items():
        for b in bounds:
            text = f"  {kind}: cut {b['after']} | {b['before']}: {b['reason']}"
            if b["detail"]:
                text += f" ({b['detail']})"
            lines.append(wrap_text(text, width, subsequent="      "))
    # each runner-up says only how it differs from the chosen mapping: looping, plans, kernels
    chosen_kernels = {
        kind: [k["name"] for k in layer["kernels"]] for kind, layer in r["layers"].items()
    }
    for i, alt in enumerate(r.get("alternatives") or [], start=1):
        key = "throughput_tokens_per_s" if "throughput_tokens_per_s" in alt else "total_latency_s"
        value = (
            f"{alt[key]:.0f} tokens/s" if key == "throughput_tokens_per_s" else seconds(alt[key])
        )
        looping = ""
        if alt["kernel_looping"] != a["kernel_looping"]:
            looping = ", looped" if alt["kernel_looping"] else ", not looped"
        differs = [
            f"{kind} plan: {label}"
            for kind, label in (alt.get("sharding_plans") or {}).items()
            if label != a["sharding_plans"].get(kind)
        ]
        same_kernels = True
        for kind, ks in alt["kernels"].items():
            names = [k["name"] for k in ks]
            if names != chosen_kernels.get(kind):
                differs.append(f"{kind}: " + ", ".join(names))
                same_kernels = False
        if same_kernels:
            differs.append("the same kernels" + (" and plans" if len(differs) == 0 else ""))
        lines.append(
            wrap_text(
                f"  alternative {i}: {value}{looping}; " + "; ".join(differs),
                width,
                subsequent="      ",
            )
        )
    return [*lines, ""]


def _reference_lines(r: dict[str, Any], width: int) -> list[str]:
    """How the run differs from the mapping it names as its reference."""
    ref = r.get("reference")
    if not ref:
        return []
    diffs = [
        f"{d['key']} {_shown(d['this'])} (there: {_shown(d['reference'])})"
        for d in ref["differences"]
    ]
    if not diffs:
        return [f"runs as its reference {ref['mapping']} does", ""]
    return [*wrap_items(diffs, width, prefix=f"differs from {ref['mapping']}: ", sep="; "), ""]


def _shown(v: Any) -> str:
    if isinstance(v, dict | list):
        return "(its own kernels)" if v else "-"
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _gain_lines(a: dict[str, Any], width: int) -> list[str]:
    """The pick against the mapping's own kernels, over the calibration ensemble, in a line."""
    if a.get("note"):
        return [
            wrap_text(f"  against the mapping's own kernels: {a['note']}", width, subsequent="    ")
        ]
    gain = a.get("gain_vs_hand")
    if not gain:
        return []
    text = (
        f"  against the mapping's own kernels: {gain['p50']:.2f}x better "
        f"({gain['p05']:.2f}–{gain['p95']:.2f} over the calibration ensemble), better in "
        f"{a['p_better']:.0%} of it; ranked by the objective's {a.get('ranked_by', 'mean')}"
    )
    return [wrap_text(text, width, subsequent="    ")]


def _extras_lines(r: dict[str, Any], width: int) -> list[str]:
    """Embedding, head, MTP: one execution's latency each."""
    extras = [
        f"{name} x{e['runs']}: {seconds(e['latency_s'])}"
        for name, e in r["extras"].items()
        if e["runs"] and e["latency_s"] is not None
    ]
    if not extras:
        return []
    return [*wrap_items(extras, width, prefix="other kernels (each run): "), ""]


def _summary(r: dict[str, Any]) -> list[str]:
    """The run's totals, one paragraph each: memory, time, decode throughput, calibration."""
    hbm = r["hbm_bytes"]
    used = hbm["weights"] + hbm["kv_cache"] + hbm["workspace"]
    out = [
        f"HBM per socket: weights {si(hbm['weights'], 'B')}, KV cache {si(hbm['kv_cache'], 'B')}, "
        f"workspace {si(hbm['workspace'], 'B')} = {si(used, 'B')} of {si(hbm['capacity'], 'B')} "
        "usable",
        *_ddr_lines(r),
        f"SRAM peak per socket: {si(r['sram_peak_bytes'], 'B')}",
    ]
    iv = r.get("intervals") or {}
    if r["total_latency_s"] is not None:
        what = "time to first token" if r["phase"] == "prefill" else "decode step"
        out.append(f"{what}: {seconds_with(r['total_latency_s'], iv.get('total_latency_s'))}")
    if r.get("kernel_call_time_s") is not None:
        looping = ", kernel looping" if r.get("kernel_looping") else ""
        calls = seconds_with(r["kernel_call_time_s"], iv.get("kernel_call_time_s"))
        out.append(
            f"kernel calls: {r['kernel_calls']} ({r['orchestration']} orchestration{looping}), "
            f"{calls} of it"
        )
    if r["phase"] == "decode":
        out += _decode_summary(r)
    if r["traffic_bytes"]:
        t = r["traffic_bytes"]
        ddr = f", DDR {si(t['ddr'], 'B')}" if t.get("ddr") else ""
        per = " per step" if r["phase"] == "decode" else ""
        out.append(
            f"traffic per socket{per}: HBM {si(t['hbm'], 'B')}{ddr}, P2P {si(t['p2p'], 'B')}"
        )
    out += _rests_on(r)
    return out


def _ddr_lines(r: dict[str, Any]) -> list[str]:
    """DDR per socket and what `placement:` put there; nothing when everything is in HBM."""
    placement = r.get("placement") or {}
    in_ddr = [part for part, tier in (placement.get("weights") or {}).items() if tier == "ddr"]
    kv = placement.get("kv_cache") == "ddr"
    if not in_ddr and not kv:
        return []
    ddr = r["ddr_bytes"]
    used = ddr["weights"] + ddr["kv_cache"]
    placed = [f"{', '.join(in_ddr)} weights"] if in_ddr else []
    placed += ["KV cache"] if kv else []
    return [
        f"DDR per socket ({' and '.join(placed)}): weights {si(ddr['weights'], 'B')}, KV cache "
        f"{si(ddr['kv_cache'], 'B')} = {si(used, 'B')} of {si(ddr['capacity'], 'B')}"
    ]


TERM_NAMES = {
    "calls": "kernel calls",
    "hbm": "HBM streaming",
    "ddr": "DDR streaming",
    "compute": "compute",
    "links": "collectives",
    "fill_drain": "fill/drain",
}


def _rests_on(r: dict[str, Any]) -> list[str]:
    """What the time rests on: its split by cost term, largest first, each with the parameter
    it moves with most and whether any evidence pins that parameter."""
    drivers = r.get("drivers")
    unc = r.get("uncertainty")
    if not drivers or not unc:
        return ["(no calibration ensemble: intervals unavailable)"]
    parts = []
    terms = sorted(drivers["terms"].items(), key=lambda kv: -kv[1]["share"])
    for name, t in terms:
        if t["share"] < 0.005:
            continue
        text = f"{TERM_NAMES.get(name, name)} {t['share']:.0%}"
        rests = [x for x in t["rests_on"] if x.get("elasticity") is not None]
        if rests:
            top = max(rests, key=lambda x: abs(x["elasticity"]))
            pinned = (
                "datasheet"  # not calibrated (DDR's bandwidth)
                if top["parameter"] not in (r.get("calibration") or {})
                else "pinned by evidence"
                if top["pinned_by"] and (top["narrowing"] or 1) < 0.8
                else "prior only"
            )
            text += f" ({top['parameter']}, {pinned})"
        parts.append(text)
    return [
        "rests on: " + ", ".join(parts),
        f"(intervals: 5th–95th percentile over {unc['members']} calibrated parameter sets; "
        f"beyond them the model's own error is ~{unc['discrepancy']:.0%}; `rdusim validate` "
        "shows the evidence)",
    ]


def _calibration_lines(r: dict[str, Any], width: int) -> list[str]:
    values = [f"{k}={v['value']:g}" for k, v in (r.get("calibration") or {}).items()]
    return wrap_items(values, width, prefix="calibration: ")


def _decode_summary(r: dict[str, Any]) -> list[str]:
    """Batch, multi-token prediction, throughput and the on-chip cache update of a decode step."""
    out = []
    iv = r.get("intervals") or {}
    if r["max_batch_size"] is not None:
        q = iv.get("max_batch_size")
        spread = f" ({q['p05']}–{q['p95']})" if q and q["p05"] != q["p95"] else ""
        tiers = "HBM and DDR" if _ddr_lines(r) else "HBM"
        out.append(
            f"max batch size (power of two that fits {tiers}): {r['max_batch_size']}{spread}"
        )
    out += _speculation_lines(r)
    if r["throughput_tokens_per_s"] is not None:
        tput = number_with(r["throughput_tokens_per_s"], iv.get("throughput_tokens_per_s"))
        out.append(
            f"throughput: {tput} tokens/s "
            f"(batch {r['batch']} x {r['tokens_per_step']:.3g} tokens per step)"
        )
    if r.get("tpot_s"):
        out.append(
            f"time per output token: {seconds_with(r['tpot_s'], iv.get('tpot_s'))} "
            f"({1.0 / r['tpot_s']:.1f} tokens/s per user)"
        )
    upd = r["snapstream"].get("decode_update_sram_bytes")
    if upd:
        out.append(
            f"decode cache update on chip ({upd['kernel']} kernel): naive {si(upd['naive'], 'B')}"
            f" vs ring buffer {si(upd['ring'], 'B')} ({upd['ratio']:.1f}x; naive indexing alone "
            f"{si(upd['naive_indexing'], 'B')})"
        )
    return out


def _speculation_lines(r: dict[str, Any]) -> list[str]:
    """The step's drafter: the MTP module's line as before, or the draft model's k, a, accepted
    tokens, time share and HBM."""
    sp = r.get("speculation") or {}
    if sp.get("drafter") == "model":
        share = sp.get("draft_share")
        timing = (
            f"; drafting {seconds(sp['draft_time_s'])} ({share:.0%} of the step), verifying "
            f"{seconds(sp['verify_s'])}"
            if share is not None
            else ""
        )
        return [
            f"speculative decoding: draft {sp['draft']}, {sp['draft_tokens']} drafts at "
            f"acceptance {sp['acceptance']:g} (assumed) -> {sp['tokens_per_step']:.4g} "
            f"tokens/step{timing}; draft HBM per socket: weights "
            f"{si(sp['draft_weights_bytes'], 'B')}, KV cache {si(sp['draft_kv_cache_bytes'], 'B')}"
        ]
    mtp = r.get("mtp") or {}
    if mtp.get("mode") == "scaled":
        how = f"{r['tokens_per_step']:g} tokens/step, a reported multiplier on a plain step"
    elif mtp.get("draft_tokens"):
        how = (
            f"{r['tokens_per_step']:.2f} tokens/step accepted: {mtp['draft_tokens']} drafts "
            f"verified ({mtp['verified_tokens']} tokens per sequence)"
        )
    else:
        how = "none (1 token per step)"
    return [f"multi-token prediction: {how}"]


OP_HEADERS = ("op", "sharding", "PCUs", "busy", "HBM", "stall", "bound")


def _streams_ddr(k: dict[str, Any]) -> bool:
    return any(o.get("ddr_s") for o in k["op_timing"])


def _op_headers(k: dict[str, Any]) -> tuple[str, ...]:
    """The op table's columns: a DDR column after HBM's when the kernel streams from DDR."""
    if not _streams_ddr(k):
        return OP_HEADERS
    return (*OP_HEADERS[:5], "DDR", *OP_HEADERS[5:])


def _op_rows(k: dict[str, Any]) -> list[list[object]]:
    sharding = _op_sharding(k)
    ddr = _streams_ddr(k)
    return [
        [
            o["op"],
            sharding.get(o["op"], "-"),
            o["pcus"],
            seconds(o["busy_s"]),
            seconds(o["hbm_s"]),
            *([seconds(o["ddr_s"])] if ddr else []),
            seconds(o["stall_s"]),
            o["bound"],
        ]
        for o in k["op_timing"]
    ]


def render_op_timing(r: dict[str, Any], width: int | None = None) -> str:
    """Per-op sharding, busy and stall time, PCUs and what bounds each stage, kernel by kernel,
    with each kernel's collectives listed one by one."""
    width = width or terminal_width()
    lines = []
    for kind, layer in r["layers"].items():
        for k in layer["kernels"]:
            if not k["op_timing"]:
                continue
            call = f"; call {seconds(k['call_s'])}" if k.get("call_s") else ""
            title = (
                f"{kind} / {k['name']}: {seconds(k['latency_s'])} (pipeline "
                f"{seconds(k['pipeline_s'])}{call}), bottleneck {k['bottleneck']}"
            )
            lines.append(wrap_text(title, width, subsequent="  "))
            if k["collectives"]:
                prefix = "  collectives per socket: "
                lines += wrap_items(_collective_list(k), width, prefix=prefix)
            headers = _op_headers(k)
            align = "<<" + ">" * (len(headers) - 3) + "<"
            head, blocks = table_blocks(headers, _op_rows(k), align, width=width)
            lines += [*head, *(line for b in blocks for line in b), ""]
    return "\n".join(lines)
