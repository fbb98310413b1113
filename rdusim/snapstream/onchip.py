"""On-chip memory of the decode-step cache update: the naive sliding window vs the ring buffer.

The ring buffer (paper Listing 5) scatters one new latent row per sequence into the cache in
HBM; on chip it needs only a double-buffered tile of the new rows. The naive update (Listing 2)
slices the sink, top-K and the shifted recent window out of the cache and concatenates them
with the new row; those slices cannot be split along the sequence, so each socket materialises
them whole for every sequence it holds — and the `where` between the two cases holds a second
copy. With attention data-parallel over the batch, a socket holds ceil(B / sockets) sequences.
"""

from __future__ import annotations

from rdusim.compiler.program import Program
from rdusim.ir.model import kv_bytes_per_token_layer


def decode_update_sram(program: Program) -> dict[str, float | int | str]:
    """Per-socket on-chip bytes of the decode kernel that updates the cache, both ways.

    `ring` is the kernel as compiled (its cache write is the ring-buffer scatter); `naive` is the
    same kernel with the naive update's slices, concatenation and `where` copy materialised.
    """
    layer = max(program.layers.values(), key=lambda lp: lp.count)  # the most numerous kind
    graph = layer.graph
    row = kv_bytes_per_token_layer(graph)
    wl = program.workload
    attention = next(p for k in layer.kernels for p in k.ops if p.kind == "attention")
    seqs = -(-wl.batch // attention.degree) if attention.strategy == "dp" else wl.batch
    slots = program.kv_len
    kernel = next(k for k in layer.kernels if any(p.name == "kv_cache_write" for p in k.ops))
    ring = kernel.sram_bytes
    sliced = (
        seqs * slots * row
    )  # sink + top-K + shifted recent slices, materialised (Listing 2 l.24-29)
    concat = seqs * slots * row  # their concatenation with the new row (l.30-31)
    case1 = seqs * slots * row  # the in-place scatter case kept alongside for the `where` (l.19-22)
    naive = ring + sliced + concat + case1
    return {
        "naive": naive,
        "ring": ring,
        "naive_indexing": sliced,
        "kernel": kernel.name,
        "sequences_per_socket": seqs,
        "ratio": naive / ring if ring else 0.0,
    }
