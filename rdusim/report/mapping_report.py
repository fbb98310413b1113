"""Human-readable rendering of the `rdusim map` report (kernels table, HBM budget, timing)."""

from __future__ import annotations

from typing import Any

from rdusim.report.console import seconds, si, table


def _collectives(k: dict[str, Any]) -> str:
    if not k["collectives"]:
        return "-"
    return ", ".join(f"{c['kind']} {si(c['bytes'], 'B')}" for c in k["collectives"])


def render_map_report(r: dict[str, Any]) -> str:
    ss = r["snapstream"]
    head = (
        f"{r['mapping']}: {r['model']} on {r['hardware']} ({r['sockets']} sockets), {r['phase']}, "
        f"batch {r['batch']}, seq_len {r['seq_len']}, SnapStream "
        + (f"on (kv_len {ss['kv_len']})" if ss["enabled"] else "off")
    )
    lines = [head, ""]
    for kind, layer in r["layers"].items():
        lat = layer["latency_s"]
        title = f"{kind} layers x{layer['count']}" + (f": {seconds(lat)} each" if lat else "")
        if layer.get("looped"):
            title += f" (one looped call; `call` is its cost shared over the {layer['count']})"
        touched = layer.get("experts_touched")
        if touched is not None and r["phase"] == "decode":
            title += f", {touched:.1f} experts touched per step"
            if r.get("expert_loading") == "all":
                title += " (every expert streamed: expert_loading all)"
        lines.append(title)
        rows = []
        for k in layer["kernels"]:
            ops = ", ".join(k["ops"])
            if len(ops) > 44:
                ops = ops[:41] + "..."
            rows.append(
                [
                    k["name"],
                    ops,
                    k["sharding"],
                    k["pcus"],
                    k["pmus"],
                    si(k["sram_bytes"], "B"),
                    _collectives(k),
                    seconds(k["call_s"]) if k["call_s"] is not None else "-",
                    seconds(k["latency_s"]),
                    f"{100 * k['share']:.2f}%" if k["share"] is not None else "-",
                    k["bottleneck"] or "-",
                ]
            )
        lines.append(
            table(
                [
                    "kernel",
                    "ops",
                    "sharding",
                    "PCUs",
                    "PMUs",
                    "SRAM/socket",
                    "collectives/socket",
                    "call",
                    "latency",
                    "share",
                    "bottleneck",
                ],
                rows,
                "<<<>>><<>>><",
            )
        )
        lines.append("")
    extras = [
        f"{name} x{e['runs']}: {seconds(e['latency_s'])}"
        for name, e in r["extras"].items()
        if e["runs"] and e["latency_s"] is not None
    ]
    if extras:
        lines.append("other kernels (each run): " + ", ".join(extras))
        lines.append("")
    hbm = r["hbm_bytes"]
    used = hbm["weights"] + hbm["kv_cache"] + hbm["workspace"]
    lines.append(
        f"HBM per socket: weights {si(hbm['weights'], 'B')}, KV cache {si(hbm['kv_cache'], 'B')}, "
        f"workspace {si(hbm['workspace'], 'B')} = {si(used, 'B')} of {si(hbm['capacity'], 'B')} usable"
    )
    lines.append(f"SRAM peak per socket: {si(r['sram_peak_bytes'], 'B')}")
    if r["total_latency_s"] is not None:
        what = "time to first token" if r["phase"] == "prefill" else "decode step"
        lines.append(f"{what}: {seconds(r['total_latency_s'])}")
    if r.get("kernel_call_time_s") is not None:
        looping = ", kernel looping" if r.get("kernel_looping") else ""
        lines.append(
            f"kernel calls: {r['kernel_calls']} ({r['orchestration']} orchestration{looping}), "
            f"{seconds(r['kernel_call_time_s'])} of it"
        )
    if r["phase"] == "decode":
        if r["max_batch_size"] is not None:
            lines.append(f"max batch size (power of two that fits HBM): {r['max_batch_size']}")
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
        lines.append(f"multi-token prediction: {how}")
        if r["throughput_tokens_per_s"] is not None:
            lines.append(
                f"throughput: {r['throughput_tokens_per_s']:.0f} tokens/s "
                f"(batch {r['batch']} x {r['tokens_per_step']:.3g} tokens per step)"
            )
        if r.get("tpot_s"):
            lines.append(
                f"time per output token: {seconds(r['tpot_s'])} "
                f"({1.0 / r['tpot_s']:.1f} tokens/s per user)"
            )
        upd = ss.get("decode_update_sram_bytes")
        if upd:
            lines.append(
                f"decode cache update on chip ({upd['kernel']} kernel): naive {si(upd['naive'], 'B')}"
                f" vs ring buffer {si(upd['ring'], 'B')} ({upd['ratio']:.1f}x; naive indexing alone "
                f"{si(upd['naive_indexing'], 'B')})"
            )
    if r["traffic_bytes"]:
        t = r["traffic_bytes"]
        lines.append(f"traffic per socket: HBM {si(t['hbm'], 'B')}, P2P {si(t['p2p'], 'B')}")
    lines.append(
        "calibration: "
        + ", ".join(f"{k}={v['value']:g}" for k, v in (r.get("calibration") or {}).items())
    )
    lines.append(
        "(shares and throughputs are predictions of the model; see `rdusim validate` "
        "for which published figures the calibration was fitted on)"
    )
    return "\n".join(lines)


def render_op_timing(r: dict[str, Any]) -> str:
    """Per-op busy and stall time, PCUs and what bounds each stage, kernel by kernel."""
    lines = []
    for kind, layer in r["layers"].items():
        for k in layer["kernels"]:
            if not k["op_timing"]:
                continue
            call = f"; call {seconds(k['call_s'])}" if k.get("call_s") else ""
            lines.append(
                f"{kind} / {k['name']}: {seconds(k['latency_s'])} (pipeline "
                f"{seconds(k['pipeline_s'])}{call}), bottleneck {k['bottleneck']}"
            )
            rows = [
                [
                    o["op"],
                    o["pcus"],
                    seconds(o["busy_s"]),
                    seconds(o["hbm_s"]),
                    seconds(o["stall_s"]),
                    o["bound"],
                ]
                for o in k["op_timing"]
            ]
            lines.append(table(["op", "PCUs", "busy", "HBM", "stall", "bound"], rows, "<>>>><"))
            lines.append("")
    return "\n".join(lines)
