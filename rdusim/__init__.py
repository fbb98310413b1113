"""rdusim: a simulator and mapping compiler for dataflow accelerators (SambaNova SN40L).

Data flows one way: specs → IR → compiler passes → Program → simulator → results → reports.
The packages stand in the same order, each importing only those below it (no cycle, checked by
tests/test_no_cycles.py and tests/test_layers.py): spec → ir → compiler → cost → sim →
uncertainty → search → mapping_api → api → validation → studies → cli, with report below api
and serving below cli only.
The entry points are the `rdusim` command and, from Python:

    import rdusim
    m = rdusim.load_mapping("r1_prefill")
    m.move_op("attn_residual", to="Output Proj", layer="moe")
    report = rdusim.run(m, seq_len=65536)
    report.total_latency_s

Mistakes raise `rdusim.RdusimError` subclasses (`SpecError`, several at once `SpecErrors`, an
argument of the wrong type `SpecTypeError`, also a `TypeError`; a well-formed request that does
not fit `InfeasibleError`), each naming the file or object, the key and a fix.

The names below are imported on first use, so `import rdusim` (and `rdusim --version`) stays
cheap: the compiler, simulator, numpy and pydantic load only when a mapping is.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

if TYPE_CHECKING:
    from rdusim.api import run
    from rdusim.errors import InfeasibleError, RdusimError, SpecError, SpecErrors, SpecTypeError
    from rdusim.mapping_api import Mapping, load_mapping
    from rdusim.report.typed import Report

# public name -> the module that defines it
_LAZY = {
    "load_mapping": "rdusim.mapping_api",
    "Mapping": "rdusim.mapping_api",
    "run": "rdusim.api",
    "Report": "rdusim.report.typed",
    "RdusimError": "rdusim.errors",
    "SpecError": "rdusim.errors",
    "SpecErrors": "rdusim.errors",
    "SpecTypeError": "rdusim.errors",
    "InfeasibleError": "rdusim.errors",
}

__all__ = [
    "InfeasibleError",
    "Mapping",
    "RdusimError",
    "Report",
    "SpecError",
    "SpecErrors",
    "SpecTypeError",
    "__version__",
    "load_mapping",
    "run",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rdusim' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
