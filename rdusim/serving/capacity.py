"""Maximum decode batch from the per-socket HBM plan.

Rule: a static-graph deployment compiles one decode graph per batch size, and we take batch
sizes that are powers of two (the paper's 16 ... 256), so the maximum is the largest power of
two whose plan (weight shards + the KV cache of the sequences each socket holds + workspace)
fits in the usable HBM of every socket (and whose kernels fit in SRAM).
"""

from __future__ import annotations

from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Program
from rdusim.errors import InfeasibleError, SpecError
from rdusim.spec.mapping import ResolvedMapping

MAX_BATCH = 1 << 16


def max_batch(rm: ResolvedMapping) -> tuple[int, Program]:
    """The largest power-of-two batch that fits, with its compiled program."""
    best: tuple[int, Program] | None = None
    b = 1
    while b <= MAX_BATCH:
        try:
            prog = compile_mapping(rm, batch=b)
        except SpecError:
            if best is None:
                raise  # the mapping itself is wrong: report it
            break  # a larger batch overflows a kernel's SRAM: it does not fit either
        if not prog.hbm.fits:
            break
        best = (b, prog)
        b *= 2
    if best is None:
        prog = compile_mapping(rm, batch=1)
        raise InfeasibleError(
            f"not even batch 1 fits: {prog.hbm.used / 1e9:.1f} GB needed per socket, "
            f"{prog.hbm.capacity / 1e9:.1f} GB usable",
            file=rm.source.file,
            key="batch",
            fix="shorten seq_len, enable snapstream, or use more sockets",
        )
    return best
