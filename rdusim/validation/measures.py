"""How an evidence item becomes numbers: its readings, the runs each needs, and its metric.

A reading is one combination of what the source leaves open, written as `--set`s. A run is a
shipped mapping with settings, compiled and simulated once at the hardware's point calibration;
under any other parameter set it is re-priced by the anchored closed form
(`rdusim.uncertainty.pricing`), so a posterior over thousands of parameter sets costs
milliseconds per run, not a simulation each.

`ItemModel.predict` gives an item's value under one parameter set for every reading: a matrix
whose rows are the readings of the deployment the item shares with others of its source, and
whose columns are the item's own readings; an item bounded over choices ("up to") takes the
largest over those.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rdusim.api import MapRun, run_mapping
from rdusim.compiler.capacity import hbm_by_batch, largest_batch
from rdusim.sim.model import SimResult
from rdusim.spec.hardware import Hardware
from rdusim.uncertainty.parameters import with_values
from rdusim.uncertainty.pricing import AnchoredPricer
from rdusim.validation.items import STRUCTURAL, Deployment, Evidence, Item, Metric

# the settings of a decode reading that also apply to its request's prefill run
PREFILL_SHARED = frozenset({"orchestration"})

Theta = dict[str, float]  # calibrated parameter values by name (None: the point)


def setting(path: str, value: Any) -> str:
    """A `--set` string for one choice."""
    if isinstance(value, bool):
        value = str(value).lower()
    return f"{path}={value}"


def _choice(key: str, value: Any) -> tuple[str, ...]:
    """One choice as `--set` strings: a value for the path `key`, or a list of settings."""
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return (setting(key, value),)


def readings(choices: dict[str, list[Any]]) -> list[tuple[str, ...]]:
    """Every combination of the choices, as `--set` strings (one empty reading if none)."""
    keys = list(choices)
    return [
        tuple(s for k, v in zip(keys, combo, strict=True) for s in _choice(k, v))
        for combo in itertools.product(*(choices[k] for k in keys))
    ]


@dataclass
class Run:
    """A mapping with settings, simulated at the point, re-priced under any parameter set."""

    mapping: str
    sets: tuple[str, ...]
    map_run: MapRun
    pricer: AnchoredPricer | None
    hbm_used: dict[int, float] = field(default_factory=dict)  # batch -> HBM bytes per socket

    @property
    def hardware(self) -> Hardware:
        return self.map_run.mapping.hardware

    def result(self, theta: Theta | None) -> SimResult:
        point = self.map_run.result
        assert point is not None and self.pricer is not None
        if theta is None:
            return point
        return self.pricer.price(with_values(self.hardware, theta))

    def max_batch(self, usable_fraction: float) -> int:
        """The largest power-of-two batch whose HBM plan fits at `usable_fraction`."""
        return largest_batch(
            self.hbm_used, self.hardware.socket.hbm.capacity_bytes * usable_fraction
        )


class Runs:
    """Each distinct run once."""

    def __init__(self, progress: Callable[[str], None] | None = None) -> None:
        self._runs: dict[tuple[str, tuple[str, ...]], Run] = {}
        self.progress = progress

    def get(self, mapping: str, sets: Iterable[str], *, batches: bool = False) -> Run:
        key = (mapping, tuple(sets))
        if key not in self._runs:
            if self.progress:
                self.progress(f"{mapping} {' '.join(key[1])}")
            mr = run_mapping(mapping, list(key[1]), uncertainty=False)
            assert mr.result is not None
            pricer = AnchoredPricer(mr.program, mr.result, mr.mapping.hardware)
            self._runs[key] = Run(mapping, key[1], mr, pricer)
        run = self._runs[key]
        if batches and not run.hbm_used:
            # until even the whole HBM is full: every usable fraction's largest batch
            rm = run.map_run.mapping
            run.hbm_used = hbm_by_batch(rm, rm.hardware.socket.hbm.capacity_bytes)
        return run

    def __len__(self) -> int:
        return len(self._runs)


def roofline_step_s(result: SimResult, hw: Hardware) -> float:
    """A step or prompt at peak: HBM bytes over peak bandwidth or FLOPs over peak compute,
    whichever is longer, per socket and with no call."""
    flops = sum(
        lp.executions * sum(p.flops for k in lp.kernels for p in k.ops)
        for lp in result.program.all_layers()
    )
    return max(result.traffic("hbm") / hw.socket.hbm.bandwidth, flops / hw.socket.peak_bf16_flops)


@dataclass
class ItemModel:
    """An item's readings and runs, ready to predict under any parameter set."""

    item_id: str
    item: Item
    group: str  # the deployment it shares (or its own id)
    group_readings: list[tuple[str, ...]]
    own_readings: list[tuple[str, ...]]
    over_readings: list[tuple[str, ...]]
    runs: dict[tuple[int, int, int], dict[str, Run]]  # (group, own, over) -> role -> run

    @property
    def metric(self) -> Metric:
        assert self.item.measure is not None
        return self.item.measure.metric

    @property
    def structural(self) -> bool:
        return self.metric in STRUCTURAL

    def all_runs(self) -> list[Run]:
        return [r for roles in self.runs.values() for r in roles.values()]

    def predict(self, theta: Theta | None, cache: dict[int, SimResult] | None = None) -> np.ndarray:
        """Values under `theta` (None: the point): group readings x own readings."""
        cache = {} if cache is None else cache
        out = np.empty((len(self.group_readings), len(self.own_readings)))
        for a, b in itertools.product(range(out.shape[0]), range(out.shape[1])):
            out[a, b] = max(
                self._value(self.runs[(a, b, c)], theta, cache)
                for c in range(len(self.over_readings))
            )
        return out

    def predict_reading(
        self, theta: Theta | None, a: int, b: int, cache: dict[int, SimResult] | None = None
    ) -> float:
        """The value under one reading: group reading `a`, own reading `b`."""
        cache = {} if cache is None else cache
        return max(
            self._value(self.runs[(a, b, c)], theta, cache) for c in range(len(self.over_readings))
        )

    def point_value(self) -> float:
        """The value at the point under the first reading: a shared deployment's first reading
        is the shipped mapping's own setting, an item's own the first choice it lists."""
        return float(self.predict(None)[0, 0])

    def _value(
        self, roles: dict[str, Run], theta: Theta | None, cache: dict[int, SimResult]
    ) -> float:
        def result(role: str) -> SimResult:
            run = roles[role]
            key = id(run)
            if key not in cache:
                cache[key] = run.result(theta)
            return cache[key]

        m = self.item.measure
        assert m is not None
        metric = m.metric
        main = roles["main"]
        if metric == Metric.MAX_BATCH:
            fraction = (theta or {}).get(
                "hbm_usable_fraction", main.hardware.calibration.hbm_usable_fraction
            )
            return float(main.max_batch(fraction))
        if metric in STRUCTURAL:
            upd = main.map_run.report["snapstream"]["decode_update_sram_bytes"]
            return float(
                upd["naive_indexing"] if metric == Metric.NAIVE_INDEXING_BYTES else upd["ratio"]
            )
        res = result("main")
        step = res.total_latency_s
        tps = res.program.tokens_per_step
        if metric == Metric.TOTAL_LATENCY_S:
            return step
        if metric == Metric.TPOT_S:
            return step / tps
        if metric == Metric.THROUGHPUT:
            return res.throughput_tokens_per_s
        if metric == Metric.PER_USER:
            return tps / step
        if metric == Metric.SHARE:
            assert m.kernels is not None and m.layer is not None
            layer = res.layers[m.layer]
            picked = sum(k.latency_s for k in layer.kernels if k.name in m.kernels)
            return 100.0 * picked / layer.latency_s
        if metric == Metric.ROOFLINE_FRACTION:
            return 100.0 * roofline_step_s(res, main.hardware) / step
        if metric == Metric.SPEEDUP:
            return result("base").total_latency_s / step
        if metric == Metric.OVERHEAD:
            return 100.0 * (step / result("base").total_latency_s - 1.0)
        if metric == Metric.REQUEST_LATENCY_S:
            assert m.output_tokens is not None
            return result("prefill").total_latency_s + m.output_tokens * step / tps
        raise AssertionError(f"unhandled metric {metric}")


def item_model(evidence: Evidence, item_id: str, runs: Runs) -> ItemModel:
    """An item's readings, with every run they need made (simulated once) through `runs`."""
    item = evidence.item(item_id)
    m = item.measure
    if m is None:
        raise ValueError(f"item {item_id} has no measure")
    dep: Deployment | None = evidence.deployment(item_id)
    group = f"{evidence.source_of(item_id).id}/{m.deployment}" if dep else item_id
    group_r = readings(dep.unstated if dep else {})
    own_r = readings(m.unstated)
    over_r = readings(m.over)
    model = ItemModel(item_id, item, group, group_r, own_r, over_r, {})
    for a, b, c in itertools.product(range(len(group_r)), range(len(own_r)), range(len(over_r))):
        model.runs[(a, b, c)] = {
            role: runs.get(mapping, sets, batches=m.metric == Metric.MAX_BATCH)
            for role, (mapping, sets) in _reading_runs(evidence, item_id, a, b, c).items()
        }
    return model


RunSpec = tuple[str, list[str]]  # a shipped mapping's name and its `--set`s


def _reading_runs(evidence: Evidence, item_id: str, a: int, b: int, c: int) -> dict[str, RunSpec]:
    """The runs of one reading (group reading `a`, own reading `b`, the `c`-th of the choices
    the figure is the largest over), by role."""
    item = evidence.item(item_id)
    m = item.measure
    assert m is not None
    dep: Deployment | None = evidence.deployment(item_id)
    mapping = dep.mapping if dep else m.mapping
    assert mapping is not None
    chosen = [
        *(dep.set if dep else []),
        *m.set,
        *readings(dep.unstated if dep else {})[a],
        *readings(m.unstated)[b],
        *readings(m.over)[c],
    ]
    return _roles(m.metric, mapping, chosen, item)


def shipped_runs(evidence: Evidence, item_id: str) -> list[dict[str, Any]]:
    """The `rdusim map` runs behind an item's value at its first reading (the shipped mapping's
    own settings; every choice a figure is the largest over): role, mapping and `--set`s."""
    m = evidence.item(item_id).measure
    if m is None:
        return []
    out: list[dict[str, Any]] = []
    for c in range(len(readings(m.over))):
        for role, (mapping, sets) in _reading_runs(evidence, item_id, 0, 0, c).items():
            run = {"role": role, "mapping": mapping, "set": sets}
            if run not in out:
                out.append(run)
    return out


def _roles(metric: Metric, mapping: str, sets: list[str], item: Item) -> dict[str, RunSpec]:
    m = item.measure
    assert m is not None
    if metric in (Metric.SPEEDUP, Metric.OVERHEAD):
        assert m.base is not None
        return {"main": (mapping, sets), "base": (mapping, [*sets, *m.base])}
    if metric == Metric.REQUEST_LATENCY_S:
        assert m.prefill and m.input_tokens and m.output_tokens
        # the decode step at the request's mean context; the prefill run shares the readings'
        # choices of who issues calls, and takes its own settings otherwise
        context = m.input_tokens + m.output_tokens // 2
        plain = [s for s in sets if not s.startswith("seq_len=")]
        shared = [s for s in plain if s.split("=", 1)[0] in PREFILL_SHARED]
        return {
            "main": (mapping, [*plain, f"seq_len={context}"]),
            "prefill": (m.prefill, [*m.prefill_set, *shared, f"seq_len={m.input_tokens}"]),
        }
    return {"main": (mapping, sets)}


def central(values: np.ndarray) -> float:
    """A geometric middle of readings' values (all positive)."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[v > 0]
    return float(math.exp(np.log(v).mean())) if v.size else 0.0
