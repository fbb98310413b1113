"""A compiled program priced under many parameter sets, anchored to the simulator.

The simulator times each distinct kernel once at the point calibration. Under another parameter
set the compiler would allocate the kernel's PCUs differently (rate matching follows the achieved
rates) and its call would load a different program, so each member re-runs allocation on a copy
of the kernel and prices it with the closed form (`rdusim.cost.analytic`). The closed form sits
within a few percent of the simulator; to keep that small difference out of the spread, each
kernel's closed-form pipeline time is scaled by the simulator's over the closed form's at the
point. At the point itself the priced program's total latency, call time and every kernel's
latency are the simulated ones exactly (a looped kernel's scaled pipeline and period split that
total differently from the simulator's; no report reads them from a priced program).

Each member's allocation is priced on the compiled kernel itself and undone at once, so a
pricer must not run beside other work on the same program (nothing in rdusim does).

A kernel's price under a member is a pure function of the kernel, its looped executions, the
orchestration, the point hardware, the simulator's timing at the point and the member, so it is
kept across pricers by exactly those: the auto-mapper's finalists share kernels, and the chosen
one is priced again for its report.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence

from rdusim.compiler.allocate import allocation, phases
from rdusim.compiler.allocate_members import allocations, same_socket
from rdusim.compiler.program import Kernel, LayerProgram, Program
from rdusim.cost.analytic import KernelEstimate, estimate
from rdusim.cost.analytic_members import estimates, supports
from rdusim.sim.kernel import KernelTiming
from rdusim.sim.model import LayerResult, SimResult
from rdusim.spec.hardware import Hardware


def _pipeline_part(t: KernelTiming | KernelEstimate) -> float:
    return t.call_time_s - t.call_s


@dataclasses.dataclass(frozen=True)
class _Anchor:
    timing: KernelTiming  # the simulator's, at the point
    ratio: float  # simulator over closed form, pipeline part of a call
    key: str  # everything the price under a member depends on but the member (see `_Keyed`)


class _Keyed:
    """A hardware spec as part of a cache key, hashed once (a frozen spec's hash walks every
    field) and compared by value."""

    __slots__ = ("_hash", "hw")

    def __init__(self, hw: Hardware) -> None:
        self.hw = hw
        self._hash = hash(hw)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Keyed) and (self.hw is other.hw or self.hw == other.hw)


PRICED_CACHE_SIZE = 8192
_priced: OrderedDict[tuple[str, _Keyed, _Keyed], KernelTiming] = OrderedDict()


def clear_prices() -> None:
    """Forget the kept prices (tests that count or break the closed form)."""
    _priced.clear()


def _anchor_key(kernel: Kernel, looped: int, orchestration: str, timing: KernelTiming) -> str:
    """The kernel (every field), its looped executions, the orchestration and the point timing
    (every field but its trace slices, which a price drops) as text."""
    return repr((kernel, looped, orchestration, dataclasses.replace(timing, slices=[])))


class AnchoredPricer:
    """Prices `program` (simulated as `point`) under other hardware parameter sets."""

    def __init__(self, program: Program, point: SimResult, hw: Hardware) -> None:
        self.program = program
        self.point = point
        self._hw = _Keyed(hw)
        self._anchors: dict[tuple[int, int], _Anchor] = {}
        self._phases: dict[int, dict[str, int]] = {}
        self._kernels: dict[tuple[int, int], Kernel] = {}  # each anchor's kernel
        for lp, lr in self._pairs(point):
            if not lr.kernels:  # deployed but not run (an MTP module in a `scaled` step)
                continue
            looped = lp.count if lp.looped else 1
            for k, t in zip(lp.kernels, lr.kernels, strict=True):
                key = (id(k), looped)
                if key in self._anchors:
                    continue
                cf = estimate(k, hw, orchestration=program.orchestration, looped_executions=looped)
                part = _pipeline_part(cf)
                ratio = _pipeline_part(t) / part if part > 0 else 1.0
                anchor_key = _anchor_key(k, looped, program.orchestration, t)
                self._anchors[key] = _Anchor(t, ratio, anchor_key)
                self._kernels[key] = k

    def _pairs(self, result: SimResult) -> list[tuple[LayerProgram, LayerResult]]:
        p = self.program
        return [(lp, result.layers[kind]) for kind, lp in p.layers.items()] + [
            (lp, result.extras[name]) for name, lp in p.extras.items()
        ]

    def _timing(self, kernel: Kernel, looped: int, hw: _Keyed) -> KernelTiming:
        anchor = self._anchors[(id(kernel), looped)]
        key = (anchor.key, self._hw, hw)
        found = _priced.get(key)
        if found is None:
            found = self._price(kernel, looped, hw.hw, anchor)
            _priced[key] = found
            if len(_priced) > PRICED_CACHE_SIZE:
                _priced.popitem(last=False)
        return found

    def _price(self, kernel: Kernel, looped: int, hw: Hardware, anchor: _Anchor) -> KernelTiming:
        phase = self._phases.get(id(kernel))
        if phase is None:
            phase = self._phases[id(kernel)] = phases(kernel)
        units = allocation(kernel, hw, phase)
        # price the kernel as allocated under `hw`, then put the compiled allocation back
        kept = [(o.pcus, o.pmus) for o in kernel.ops]
        try:
            for o in kernel.ops:
                o.pcus, o.pmus = units[o.name]
            cf = estimate(
                kernel, hw, orchestration=self.program.orchestration, looped_executions=looped
            )
        finally:
            for o, (pcus, pmus) in zip(kernel.ops, kept, strict=True):
                o.pcus, o.pmus = pcus, pmus
        r = anchor.ratio
        return dataclasses.replace(
            anchor.timing,
            pipeline_s=cf.pipeline_s * r,
            second_s=cf.period_s * r,
            period_s=cf.period_s * r,
            call_s=cf.call_s,
            slices=[],
            settle_s=0.0,  # the ratio carries the simulated loop's settling
        )

    def _price_many(self, kernel: Kernel, looped: int, members: list[_Keyed]) -> None:
        """Price `kernel` under every member not yet kept, all at once (numpy over the members:
        `allocate_members`, `analytic_members`, the scalar passes' arithmetic per member), and
        keep each price as `_timing` would."""
        anchor = self._anchors[(id(kernel), looped)]
        todo = [m for m in members if (anchor.key, self._hw, m) not in _priced]
        if len(todo) < 2:
            return
        phase = self._phases.get(id(kernel))
        if phase is None:
            phase = self._phases[id(kernel)] = phases(kernel)
        hws = [m.hw for m in todo]
        units = allocations(kernel, hws, phase)
        cf = estimates(
            kernel,
            hws,
            units,
            orchestration=self.program.orchestration,
            looped_executions=looped,
        )
        r = anchor.ratio
        for m, pipe, period, call in zip(
            todo, cf.pipeline_s.tolist(), cf.period_s.tolist(), cf.call_s.tolist(), strict=True
        ):
            _priced[(anchor.key, self._hw, m)] = dataclasses.replace(
                anchor.timing,
                pipeline_s=pipe * r,
                second_s=period * r,
                period_s=period * r,
                call_s=call,
                slices=[],
                settle_s=0.0,
            )
        while len(_priced) > PRICED_CACHE_SIZE:
            _priced.popitem(last=False)

    def price(self, hw: Hardware, keyed: _Keyed | None = None) -> SimResult:
        """The program's timing under `hw` (same program: kernels, batch and tiles)."""
        seen: dict[tuple[int, int], KernelTiming] = {}
        keyed = keyed or _Keyed(hw)

        def layer(lp: LayerProgram, lr: LayerResult) -> LayerResult:
            if not lr.kernels:
                return lr
            looped = lp.count if lp.looped else 1
            timings = []
            for k in lp.kernels:
                key = (id(k), looped)
                if key not in seen:
                    seen[key] = self._timing(k, looped, keyed)
                timings.append(seen[key])
            return dataclasses.replace(lr, kernels=timings)

        p = self.program
        return SimResult(
            p,
            {kind: layer(lp, self.point.layers[kind]) for kind, lp in p.layers.items()},
            {name: layer(lp, self.point.extras[name]) for name, lp in p.extras.items()},
        )

    def price_all(self, members: Sequence[Hardware]) -> list[SimResult]:
        """`price` under each of `members`; members that share the point's socket are priced
        together, each kernel once for all of them (the same figures as one by one)."""
        keyed = [_Keyed(hw) for hw in members]
        if len(members) > 1 and same_socket([self._hw.hw, *members]):
            for (_, looped), k in self._kernels.items():
                if supports(k):
                    self._price_many(k, looped, keyed)
        return [self.price(hw, k) for hw, k in zip(members, keyed, strict=True)]
