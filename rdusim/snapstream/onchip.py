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

The compiled program supplies the sizes (`CacheUpdate`, from `Program.cache_update`); this
module needs nothing from the compiler, so SnapStream sits below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CacheUpdate:
    """A compiled decode step's cache update, per socket."""

    kernel: str  # the kernel that writes the new cache rows
    kernel_sram_bytes: float  # its on-chip bytes as compiled: the ring-buffer update
    sequences_per_socket: int
    slots: int  # cache positions per sequence
    key_row_bytes: float  # Listing 2's key tensors, bytes per cached position (all heads)
    value_row_bytes: float  # its value tensors, likewise


class CompiledDecode(Protocol):
    """A compiled decode step that knows its cache update (`rdusim.compiler.program.Program`)."""

    @property
    def cache_update(self) -> CacheUpdate: ...


def decode_update_sram(program: CompiledDecode) -> dict[str, float | int | str]:
    """Per-socket on-chip bytes of the decode kernel that updates the cache, both ways.

    `ring` is the kernel as compiled (its cache write is the ring-buffer scatter); `naive` adds
    Listing 2's materialised slices and their concatenation; `naive_indexing` is the slices
    alone (the paper's "lines 24-29").
    """
    u = program.cache_update
    row = u.key_row_bytes + u.value_row_bytes
    # sink + top-K + the recent window minus its oldest entry: every slot but one
    sliced = u.sequences_per_socket * (u.slots - 1) * row
    concat = u.sequences_per_socket * u.slots * row  # [sink | recent | new | top-K], keys, values
    ring = u.kernel_sram_bytes
    naive = ring + sliced + concat
    return {
        "naive": naive,
        "ring": ring,
        "naive_indexing": sliced,
        "kernel": u.kernel,
        "sequences_per_socket": u.sequences_per_socket,
        "ratio": naive / ring if ring else 0.0,
    }
