"""The report of `rdusim model`: parameter counts, KV bytes per token, one layer's op table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rdusim.errors import SpecError
from rdusim.ir.graph import Workload
from rdusim.ir.model import build_model, summarize
from rdusim.ir.ops import op_table
from rdusim.report.console import si, table, terminal_width, wrap_text
from rdusim.spec.model import load_model_config


def model_report(
    path: str | Path, *, phase: str = "prefill", seq_len: int = 4096, batch: int = 1
) -> dict[str, Any]:
    if seq_len < 1:
        raise SpecError(
            f"must be >= 1, got {seq_len}", key="--seq-len", fix="pass a positive length"
        )
    if batch < 1:
        raise SpecError(f"must be >= 1, got {batch}", key="--batch", fix="pass a positive batch")
    cfg = load_model_config(path)
    s = summarize(cfg)
    graphs = build_model(cfg, phase)
    kind = "moe" if "moe" in graphs.layers else "dense"
    wl = Workload(batch, seq_len if phase == "prefill" else 1, seq_len)
    return {
        "model": s.name,
        "family": s.family,
        "params_total": s.params_total,
        "params_active": s.params_active,
        "params_mtp": s.params_mtp,
        "kv_bytes_per_token": s.kv_bytes_per_token,
        "num_layers": sum(s.num_layers.values()),
        "layers_by_kind": s.num_layers,
        "weight_bytes": s.weight_bytes,
        "dtypes": cfg.dtypes.model_dump()
        | {"weights": cfg.dtypes.weights or cfg.default_weight_dtype},
        "layer": {
            "kind": kind,
            "phase": phase,
            "batch": batch,
            "seq_len": seq_len,
            "ops": op_table(graphs.layers[kind], wl),
        },
    }


def render_model_report(r: dict[str, Any], width: int | None = None) -> str:
    """Parameters, weights, KV bytes and one layer's op table, within `width` columns."""
    width = width or terminal_width()
    lines = [
        f"{r['model']} ({r['family']})",
        f"  parameters      {si(r['params_total'])} total, {si(r['params_active'])} active per token"
        + (f", MTP {si(r['params_mtp'])} (separate)" if r["params_mtp"] else ""),
        f"  weights         {si(r['weight_bytes'], 'B')} ({r['dtypes']['weights']})",
        f"  KV cache        {r['kv_bytes_per_token']:.0f} bytes per token ({r['dtypes']['kv_cache']})",
        "  layers          " + ", ".join(f"{n} {k}" for k, n in r["layers_by_kind"].items()),
        "",
        wrap_text(
            f"one {r['layer']['kind']} layer, {r['layer']['phase']}, batch "
            f"{r['layer']['batch']}, seq_len {r['layer']['seq_len']}:",
            width,
        ),
    ]
    rows = [
        [
            o["op"],
            o["kind"],
            si(o["flops"], "FLOP"),
            si(o["bytes_read"], "B"),
            si(o["bytes_written"], "B"),
            si(o["weight_bytes"], "B"),
        ]
        for o in r["layer"]["ops"]
    ]
    headers = ["op", "kind", "flops", "read", "written", "weights"]
    lines.append(table(headers, rows, "<<>>>>", width=width))
    return "\n".join(lines)
