"""The SnapStream paper's Tables 4 and 5 and its text's figures, from the shipped mappings.

Each cell is an evidence item of `snapstream-paper.yaml` computed the way the item's measure
says, under the reading rdusim ships (the mapping's own settings), with the report's interval
over the calibration ensemble widened by the model's discrepancy and the item's precision into a
90% predictive interval. Published figures come from the evidence only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rdusim.api import MapRun, run_mapping
from rdusim.report.cells import Cell
from rdusim.spec.hardware import Hardware
from rdusim.uncertainty.ensemble import shipped_ensemble
from rdusim.validation.items import Evidence, Item, Metric, Use, shipped_evidence
from rdusim.validation.likelihood import sigma
from rdusim.validation.posterior import Z90

SOURCE = "snapstream-paper"
TABLE4 = (
    "table4-qkv",
    "table4-mha",
    "table4-output-proj",
    "table4-router",
    "table4-moe-ffn",
    "table4-snapkv-compression",
    "table4-streaming-ring-buffer",
)
TABLE5_PROMPTS = ((131072, "128k"), (65536, "64k"), (32768, "32k"))
SNAPSTREAM_SUM = "snapstream-kernels-share"
SNAPSTREAM_KERNELS = ("SnapKV Compression", "Streaming Ring Buffer")


class _Runs:
    def __init__(self, hardware: Hardware | None) -> None:
        self.hardware = hardware
        self._done: dict[tuple[str, tuple[str, ...]], MapRun] = {}

    def get(self, mapping: str, sets: list[str]) -> MapRun:
        key = (mapping, tuple(sets))
        if key not in self._done:
            self._done[key] = run_mapping(mapping, list(sets), hardware=self.hardware)
        return self._done[key]


def shipped_sets(evidence: Evidence, item_id: str) -> tuple[str, list[str]]:
    """The mapping and settings of an item's measure as rdusim ships it (no other reading)."""
    item = evidence.item(item_id)
    m = item.measure
    assert m is not None
    dep = evidence.deployment(item_id)
    mapping = dep.mapping if dep else m.mapping
    assert mapping is not None
    return mapping, [*(dep.set if dep else []), *m.set]


def _widen(
    item: Item, point: float, lo: float | None, hi: float | None
) -> tuple[float | None, float | None]:
    """A parameter interval widened into a predictive one by the model's discrepancy and the
    item's precision; a figure no parameter moves (an on-chip size, a ratio of two runs whose
    parameters cancel) gets the noise alone around its point."""
    ensemble = shipped_ensemble()
    if ensemble is None:
        return lo, hi
    if lo is None or hi is None:
        lo = hi = point
    k = math.exp(Z90 * sigma(item, ensemble.discrepancy))
    return lo / k, hi * k


def _value(
    item: Item, run: MapRun, base: MapRun | None
) -> tuple[float, float | None, float | None]:
    """(point, p05, p95) of the item's metric from the run's report."""
    m = item.measure
    assert m is not None
    r = run.report
    iv: dict[str, dict[str, float]] = r.get("intervals") or {}

    def pick(key: str, scale: float = 1.0) -> tuple[float, float | None, float | None]:
        q = iv.get(key)
        value = r.get(key)
        if value is None:
            value = q["p50"] if q else math.nan
        return (
            value * scale,
            q["p05"] * scale if q else None,
            q["p95"] * scale if q else None,
        )

    if m.metric == Metric.SHARE:
        assert m.kernels and m.layer
        kernels = {k["name"]: k for k in r["layers"][m.layer]["kernels"]}
        point = sum(100.0 * kernels[k]["share"] for k in m.kernels)
        qs = [iv.get(f"layers.{m.layer}.{k}.share") for k in m.kernels]
        if all(qs):
            return point, 100 * sum(q["p05"] for q in qs if q), 100 * sum(q["p95"] for q in qs if q)
        return point, None, None
    if m.metric == Metric.THROUGHPUT:
        return pick("throughput_tokens_per_s")
    if m.metric == Metric.MAX_BATCH:
        return float(r["max_batch_size"]), None, None
    if m.metric == Metric.OVERHEAD:
        assert base is not None
        return 100.0 * (r["total_latency_s"] / base.report["total_latency_s"] - 1.0), None, None
    upd = r["snapstream"]["decode_update_sram_bytes"]
    if m.metric == Metric.NAIVE_INDEXING_BYTES:
        return float(upd["naive_indexing"]), None, None
    if m.metric == Metric.NAIVE_SRAM_RATIO:
        return float(upd["ratio"]), None, None
    raise ValueError(f"no shipped value for metric {m.metric}")


def cell(
    evidence: Evidence,
    item_id: str,
    runs: _Runs,
    table: str,
    label: str,
    *,
    scale: float = 1.0,
    unit: str | None = None,
) -> Cell:
    """One evidence item as a comparison cell, under the shipped reading."""
    full = f"{SOURCE}/{item_id}"
    item = evidence.item(full)
    mapping, sets = shipped_sets(evidence, full)
    run = runs.get(mapping, sets)
    m = item.measure
    base = runs.get(mapping, [*sets, *m.base]) if m and m.base else None
    value, lo, hi = _value(item, run, base)
    if item.measure is None or item.measure.metric != Metric.MAX_BATCH:
        lo, hi = _widen(item, value, lo, hi)
    return Cell(
        table,
        label,
        value * scale,
        item.low * scale,
        unit or item.unit,
        item.use == Use.FIT,
        bound=item.bound.value,
        p05=lo * scale if lo is not None else None,
        p95=hi * scale if hi is not None else None,
        published_high=item.high * scale if item.bound.value == "range" else None,
        item_id=full,
        known_miss=item.reason if item.use in (Use.FIT, Use.HOLDOUT) else None,
    )


def table4(evidence: Evidence, runs: _Runs) -> list[Cell]:
    cells = []
    for item_id in TABLE4:
        item = evidence.item(f"{SOURCE}/{item_id}")
        assert item.measure and item.measure.kernels
        cells.append(cell(evidence, item_id, runs, "table4", item.measure.kernels[0]))
    parts = [c for c in cells if c.item in SNAPSTREAM_KERNELS]
    bound = evidence.item(f"{SOURCE}/{SNAPSTREAM_SUM}")
    cells.append(
        Cell(
            "table4",
            "SnapStream kernels (sum, must be below)",
            sum(c.simulated for c in parts),
            bound.low,
            "%",
            False,
            bound="upper",
            p05=_sum_or_none([c.p05 for c in parts]),
            p95=_sum_or_none([c.p95 for c in parts]),
            item_id=f"{SOURCE}/{SNAPSTREAM_SUM}",
        )
    )
    return cells


def _sum_or_none(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def table5(evidence: Evidence, runs: _Runs) -> list[Cell]:
    cells: list[Cell] = []
    for seq, tag in TABLE5_PROMPTS:
        label = f"{seq // 1024}K"
        tput: dict[str, Cell] = {}
        for suffix, name in (("base", "no SnapStream"), ("snap", "SnapStream")):
            cells.append(
                cell(
                    evidence,
                    f"table5-maxbatch-{tag}-{suffix}",
                    runs,
                    "table5",
                    f"{label} max batch ({name})",
                    unit="seqs",
                )
            )
            tput[suffix] = cell(
                evidence,
                f"table5-throughput-{tag}-{suffix}",
                runs,
                "table5",
                f"{label} throughput ({name})",
                unit="tokens/s",
            )
            cells.append(tput[suffix])
        imp = evidence.item(f"{SOURCE}/table5-improvement-{tag}")
        ss, no = tput["snap"], tput["base"]
        ratio = ss.simulated / no.simulated
        # the parameters move both throughputs alike, so their ratio carries the noise alone
        lo, hi = _widen(evidence.item(ss.item_id), ratio, None, None)
        cells.append(
            Cell(
                "table5",
                f"{label} improvement",
                ratio,
                imp.low,
                "x",
                False,
                p05=lo,
                p95=hi,
                item_id=f"{SOURCE}/table5-improvement-{tag}",
            )
        )
    return cells


def text(evidence: Evidence, runs: _Runs) -> list[Cell]:
    return [
        cell(evidence, "prefill-overhead", runs, "text", "prefill overhead (128K)"),
        cell(
            evidence,
            "naive-indexing-sram",
            runs,
            "text",
            "naive decode: indexing on chip",
            scale=1e-6,
            unit="MB",
        ),
        cell(
            evidence,
            "naive-decode-onchip-memory",
            runs,
            "text",
            "naive decode: on-chip memory vs ring buffer",
        ),
    ]


BUILDERS: dict[str, Callable[[Evidence, _Runs], list[Cell]]] = {
    "table4": table4,
    "table5": table5,
    "text": text,
}


def comparison_cells(which: str, hardware: Hardware | None = None) -> dict[str, list[Cell]]:
    """Cells by output table ("table4", "table5", and with "all" the paper's text figures)."""
    evidence = shipped_evidence()
    runs = _Runs(hardware)
    names = list(BUILDERS) if which == "all" else [which]
    return {name: BUILDERS[name](evidence, runs) for name in names}


def caption(table: str) -> str:
    return {
        "table4": "Normalized latency per kernel, one prefill MoE layer of DeepSeek-R1, 128K input",
        "table5": "DeepSeek-R1-0528 decode on 16 x SN40L; throughput already x2.4 for MTP acceptance",
    }.get(table, "")


def source_title() -> str:
    return (
        shipped_evidence()
        .files[[s.id for s in shipped_evidence().sources].index(SOURCE)]
        .source.title
    )


def meta() -> dict[str, Any]:
    ensemble = shipped_ensemble()
    return {
        "source": source_title(),
        "interval": "90% predictive: the calibration ensemble's 5th-95th percentile widened by "
        f"the model's discrepancy ({ensemble.discrepancy:.3f} log sd)"
        if ensemble
        else None,
    }
