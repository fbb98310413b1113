"""Op kinds and the typed attributes of each kind's family.

Every op carries one frozen attribute record whose class its kind fixes (`ATTRS_OF`), so a reader
asks for a field that exists instead of a dict key that may be missing, and a builder cannot
give a GEMM an attention's fields. Fields a reader may ask of any op (an explicit HBM read or
write, routed experts, whether it blocks) have one accessor each, at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

Dim = int | str  # a size, or a shape symbol of `rdusim.ir.graph.Workload` (B, S, T, E)
Shape = tuple[Dim, ...]


class OpKind(StrEnum):
    """What an op computes; selects its cost formulas in `rdusim.ir.ops`."""

    GEMM = "gemm"
    ATTENTION = "attention"
    NORM = "norm"
    ELEMENTWISE = "elementwise"
    ROPE = "rope"
    SOFTMAX = "softmax"
    REDUCE = "reduce"
    POOL = "pool"
    TOPK = "topk"
    ROUTER = "router"
    SORT = "sort"
    GATHER = "gather"
    SCATTER = "scatter"
    CONCAT = "concat"
    EMBED = "embed"


class CacheIndex(StrEnum):
    """Where a decode step writes its new cache row: at the sequence position, or at the
    ring-buffer slot (SnapStream's eq. 4, or a sliding window's ring)."""

    POSITION = "position"
    RING = "ring"


@dataclass(frozen=True)
class Access:
    """An explicit HBM read or write: `shape` elements of `dtype_bytes` each, in place of the op's
    whole input or output tensors (a gather's rows, a cache's new positions, a cache read)."""

    shape: Shape
    dtype_bytes: float = 2.0


@dataclass(frozen=True)
class RoutedExperts:
    """A routed-expert op: `experts` expert matrices are stored, each token uses `slots` of them
    (the compiler streams only the experts some token was routed to)."""

    experts: int
    slots: int


@dataclass(frozen=True)
class GemmAttrs:
    """`count` matmuls of (m x k) by (k x n) per token; `n_dims` multiplies n by shape symbols
    (scores over the `E` eviction candidates)."""

    m: Shape
    k: int
    n: int
    count: int = 1
    n_dims: Shape = ()
    routed: RoutedExperts | None = None
    read: Access | None = None


@dataclass(frozen=True)
class AttentionAttrs:
    """Scaled dot-product attention over `heads` query heads. `kv_heads` (GQA) bounds how far a
    head split divides the cache; `shared_kv`: every head reads one shared cache (MLA's latent);
    `window`: each query sees at most the last `window` keys; `read`: the cache read of decode."""

    heads: int
    qk_dim: int
    v_dim: int
    kv_heads: int | None = None
    causal: bool = True
    shared_kv: bool = False
    window: int | None = None
    read: Access | None = None


@dataclass(frozen=True)
class NormAttrs:
    """An RMSNorm: its cost follows from its input alone."""


@dataclass(frozen=True)
class ElementwiseAttrs:
    """Element-by-element SIMD work (activations, residual adds, rotary embedding).

    `ops_scale` scales the kind's element operations (SwiGLU is 5 per output; rope rotates only
    part of a head); `linear` ops may pass partial sums through unreduced.
    """

    ops_scale: float = 1.0
    linear: bool = False
    routed: RoutedExperts | None = None


@dataclass(frozen=True)
class RowAttrs:
    """SIMD work over whole rows (softmax, reductions, the router's selection); a `blocking`
    op needs its entire input before it emits."""

    blocking: bool = False


@dataclass(frozen=True)
class PoolAttrs:
    """1-D average pooling with a window of `kernel` elements."""

    kernel: int


@dataclass(frozen=True)
class TopkAttrs:
    """The top entries of each row of `n` candidates (a size or a shape symbol)."""

    n: Dim
    blocking: bool = False


@dataclass(frozen=True)
class SortAttrs:
    """Sorting each row of `n` keys (a size or a shape symbol)."""

    n: Dim
    blocking: bool = False


@dataclass(frozen=True)
class GatherAttrs:
    """A lookup of rows (gathers, the embedding table); `read` is the rows it reads."""

    read: Access | None = None


@dataclass(frozen=True)
class ScatterAttrs:
    """Rows written into a tensor (the KV cache) at `index`; `read`/`write` are the rows moved."""

    read: Access | None = None
    write: Access | None = None
    index: CacheIndex | None = None


@dataclass(frozen=True)
class ConcatAttrs:
    """A concatenation: it moves its inputs, nothing more."""


OpAttrs = (
    GemmAttrs
    | AttentionAttrs
    | NormAttrs
    | ElementwiseAttrs
    | RowAttrs
    | PoolAttrs
    | TopkAttrs
    | SortAttrs
    | GatherAttrs
    | ScatterAttrs
    | ConcatAttrs
)

ATTRS_OF: dict[OpKind, type[OpAttrs]] = {
    OpKind.GEMM: GemmAttrs,
    OpKind.ATTENTION: AttentionAttrs,
    OpKind.NORM: NormAttrs,
    OpKind.ELEMENTWISE: ElementwiseAttrs,
    OpKind.ROPE: ElementwiseAttrs,
    OpKind.SOFTMAX: RowAttrs,
    OpKind.REDUCE: RowAttrs,
    OpKind.ROUTER: RowAttrs,
    OpKind.POOL: PoolAttrs,
    OpKind.TOPK: TopkAttrs,
    OpKind.SORT: SortAttrs,
    OpKind.GATHER: GatherAttrs,
    OpKind.EMBED: GatherAttrs,
    OpKind.SCATTER: ScatterAttrs,
    OpKind.CONCAT: ConcatAttrs,
}


@dataclass(frozen=True)
class KindTraits:
    """What the compiler and the search ask of an op by its kind, so that a pass reads a named
    property instead of comparing kinds (a new kind states what applies in its `TRAITS` entry).

    `is_attention`: scores queries against keys. Its layers hold the KV cache (the share one
    socket stores follows the attention's split); a data-parallel split divides its sequences,
    not its tokens; a decode one reads its cache share from HBM; a prefill one runs in a kernel
    of its own, tiled by K/V blocks.
    `writes_cache`: may write rows into a KV cache (the kernel a decode step's cache update runs
    in is the one with such an op on a cache tensor).
    `read_replaces_inputs`: its explicit read (`Access`) stands for its input tensors in its HBM
    traffic (a gather's rows, scores over a cache window); another kind's explicit read comes on
    top of its inputs.
    `joins_attention_block`: moves with a cached attention it feeds queries or takes output from
    (MLA's `q_absorb`, `v_absorb`), when that attention is split over the sequence.
    """

    is_attention: bool = False
    writes_cache: bool = False
    read_replaces_inputs: bool = False
    joins_attention_block: bool = False


TRAITS: dict[OpKind, KindTraits] = {
    OpKind.GEMM: KindTraits(read_replaces_inputs=True, joins_attention_block=True),
    OpKind.ATTENTION: KindTraits(is_attention=True),
    OpKind.NORM: KindTraits(),
    OpKind.ELEMENTWISE: KindTraits(),
    OpKind.ROPE: KindTraits(),
    OpKind.SOFTMAX: KindTraits(),
    OpKind.REDUCE: KindTraits(),
    OpKind.ROUTER: KindTraits(),
    OpKind.POOL: KindTraits(),
    OpKind.TOPK: KindTraits(),
    OpKind.SORT: KindTraits(),
    OpKind.GATHER: KindTraits(read_replaces_inputs=True),
    OpKind.EMBED: KindTraits(),  # its read (the table's rows) comes on top of the token ids
    OpKind.SCATTER: KindTraits(writes_cache=True),
    OpKind.CONCAT: KindTraits(),
}


def traits_of(kind: OpKind) -> KindTraits:
    """The traits of `kind` (`TRAITS`)."""
    return TRAITS[kind]


# kinds an op may be given without attributes: every field of their class has a default
_DEFAULT_ATTRS: dict[OpKind, Callable[[], OpAttrs]] = {
    OpKind.NORM: NormAttrs,
    OpKind.ELEMENTWISE: ElementwiseAttrs,
    OpKind.ROPE: ElementwiseAttrs,
    OpKind.SOFTMAX: RowAttrs,
    OpKind.REDUCE: RowAttrs,
    OpKind.ROUTER: RowAttrs,
    OpKind.GATHER: GatherAttrs,
    OpKind.EMBED: GatherAttrs,
    OpKind.SCATTER: ScatterAttrs,
    OpKind.CONCAT: ConcatAttrs,
}


def default_attrs(kind: OpKind) -> OpAttrs:
    """The attributes of a kind whose fields all have defaults (a norm, a concat)."""
    make = _DEFAULT_ATTRS.get(kind)
    if make is None:
        raise ValueError(f"a {kind} op needs its {ATTRS_OF[kind].__name__}")
    return make()


# accessors for what any op may be asked ---------------------------------------------------------


def explicit_read(attrs: OpAttrs) -> Access | None:
    """The explicit HBM read of an op, if it has one (else it reads its input tensors)."""
    if isinstance(attrs, GemmAttrs | AttentionAttrs | GatherAttrs | ScatterAttrs):
        return attrs.read
    return None


def explicit_write(attrs: OpAttrs) -> Access | None:
    """The explicit HBM write of an op, if it has one (else it writes its output tensors)."""
    return attrs.write if isinstance(attrs, ScatterAttrs) else None


def routed_experts(attrs: OpAttrs) -> RoutedExperts | None:
    """The routed experts an op works on (None: not a routed-expert op)."""
    return attrs.routed if isinstance(attrs, GemmAttrs | ElementwiseAttrs) else None


def is_blocking(attrs: OpAttrs) -> bool:
    """Whether an op needs its whole input before it can emit (softmax over a row, a sort)."""
    return isinstance(attrs, RowAttrs | TopkAttrs | SortAttrs) and attrs.blocking


def head_count(attrs: OpAttrs) -> int:
    """Heads a head split divides: an attention's query heads, a per-head GEMM's count."""
    if isinstance(attrs, AttentionAttrs):
        return attrs.heads
    return attrs.count if isinstance(attrs, GemmAttrs) else 1


def window_of(attrs: OpAttrs) -> int | None:
    """The sliding window of an attention (None: full attention, or not an attention)."""
    return attrs.window if isinstance(attrs, AttentionAttrs) else None
