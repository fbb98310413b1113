"""On-chip memory of the decode-step cache update: the naive sliding window vs the ring buffer.

The ring buffer (paper Listing 5) scatters one new row per sequence into the cache in HBM; on
chip it needs only the decode kernel as compiled. The naive update (paper Listing 2) slices the
sink, top-K and shifted recent window out of the key and the value caches (lines 24-29) and
concatenates them with the new row (lines 30-32). Neither can be split along the sequence, so a
socket materialises both whole, for the keys and the values separately, for every sequence it
holds. The final `where` and the case-1 scatter stream along the sequence and add nothing that
must be held whole.

For MLA, Listing 2's keys are the latent plus the rope key (576 wide for R1) and its values the
latent (512 wide): the naive code treats the shared latent as both.
"""

from __future__ import annotations

from rdusim.compiler.program import Program
from rdusim.ir.graph import Workload


def _key_value_widths(program: Program) -> tuple[float, float]:
    """Bytes per cached position of Listing 2's key and value tensors (all heads)."""
    layer = max(program.layers.values(), key=lambda lp: lp.count)
    caches = [
        t
        for t in layer.graph.tensors.values()
        if t.kind.value == "cache" and not t.name.startswith("compressed_")
    ]
    env = Workload(1, 1, 1).env()
    by_name = {t.name: t.nbytes(env) for t in caches}
    if "latent_cache" in by_name:  # MLA: keys = latent + rope key, values = latent
        latent = by_name["latent_cache"]
        return latent + by_name.get("rope_cache", 0.0), latent
    values = sorted(by_name.values())
    return values[-1], values[0]


def decode_update_sram(program: Program) -> dict[str, float | int | str]:
    """Per-socket on-chip bytes of the decode kernel that updates the cache, both ways.

    `ring` is the kernel as compiled (its cache write is the ring-buffer scatter); `naive` adds
    Listing 2's materialised slices and their concatenation; `naive_indexing` is the slices
    alone (the paper's "lines 24-29").
    """
    layer = max(program.layers.values(), key=lambda lp: lp.count)  # the most numerous kind
    wl = program.workload
    attention = next(p for k in layer.kernels for p in k.ops if p.kind == "attention")
    seqs = -(-wl.batch // attention.degree) if attention.strategy == "dp" else wl.batch
    slots = program.kv_len
    key_row, value_row = _key_value_widths(program)
    row = key_row + value_row
    # sink + top-K + the recent window minus its oldest entry: every slot but one
    sliced = seqs * (slots - 1) * row
    concat = seqs * slots * row  # [sink | recent | new | top-K], keys and values
    kernel = next(k for k in layer.kernels if any(p.name == "kv_cache_write" for p in k.ops))
    ring = kernel.sram_bytes
    naive = ring + sliced + concat
    return {
        "naive": naive,
        "ring": ring,
        "naive_indexing": sliced,
        "kernel": kernel.name,
        "sequences_per_socket": seqs,
        "ratio": naive / ring if ring else 0.0,
    }
