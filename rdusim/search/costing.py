"""What a candidate kernel costs the search: seconds per execution, its call's share included.

The search ranks thousands of candidates with a closed form (`rdusim.cost.analytic`, the
default) and times only its few finalists with the discrete-event simulator, whole programs at
a time (`rdusim.search.mapper`). `KernelCost` is the signature a ranking cost has, so a caller
of `auto_map` or `LayerSearch` may rank with another.
"""

from __future__ import annotations

from typing import Protocol

from rdusim.compiler.program import Kernel
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import Orchestration


class KernelCost(Protocol):
    def __call__(
        self, kernel: Kernel, hw: Hardware, orchestration: Orchestration, looped_executions: int
    ) -> float:
        """Seconds per execution of `kernel`, one call covering `looped_executions` of them."""
        ...


def analytic_cost(
    kernel: Kernel, hw: Hardware, orchestration: Orchestration, looped_executions: int
) -> float:
    """The closed form's answer (`rdusim.cost.analytic`): what the search ranks with."""
    from rdusim.cost.analytic import kernel_latency_s

    return kernel_latency_s(
        kernel, hw, orchestration=orchestration, looped_executions=looped_executions
    )
