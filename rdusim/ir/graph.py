"""The graph IR: tensors with symbolic shapes, ops with cost formulas, and the DAG they form.

Shapes use three symbols so one graph serves every workload of its phase:
`B` the batch, `S` the query tokens of each sequence in this step (the prompt in prefill, 1 in
decode), `T` the key/value positions each query may attend to (S in prefill, the cache length in
decode). An op knows its shapes and cost formulas and nothing about sockets; sharding is the
compiler's business.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from rdusim.ir.attrs import (
    ATTRS_OF,
    Access,
    Dim,
    KindTraits,
    OpAttrs,
    OpKind,
    RoutedExperts,
    explicit_read,
    explicit_write,
    is_blocking,
    routed_experts,
    traits_of,
)

if TYPE_CHECKING:
    import networkx as nx


class Phase(StrEnum):
    """A serving phase: prefill processes the prompt, decode generates one step at a time."""

    PREFILL = "prefill"
    DECODE = "decode"


def as_phase(phase: Phase | str) -> Phase:
    """A phase from its name (where a public entry accepts either)."""
    try:
        return Phase(phase)
    except ValueError:
        raise ValueError(f"unknown phase {phase!r}") from None


@dataclass(frozen=True)
class Workload:
    """Values of the shape symbols for one run of a layer graph."""

    batch: int
    seq: int
    kv: int
    evict: int = 0  # `E`: SnapKV eviction candidates of a prompt (0 without SnapStream)

    def env(self) -> dict[str, int]:
        return {"B": self.batch, "S": self.seq, "T": self.kv, "E": self.evict}

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


class TensorKind(StrEnum):
    ACTIVATION = "activation"
    WEIGHT = "weight"
    CACHE = "cache"  # the KV cache: lives in HBM across steps


class CacheRole(StrEnum):
    """What a KV-cache tensor holds, as attention reads it."""

    KEY = "key"  # keys only: MHA/GQA's K cache, MLA's rope key
    VALUE = "value"  # values only: MHA/GQA's V cache
    LATENT = "latent"  # read as keys and as values: MLA's compressed latent


@dataclass(frozen=True)
class Tensor:
    """A tensor of the graph. A cache has a `role`; a `compressed` cache is SnapStream's
    compressed copy of another (the same cache, smaller: never counted twice)."""

    name: str
    shape: tuple[Dim, ...]
    dtype_bytes: float
    kind: TensorKind = TensorKind.ACTIVATION
    role: CacheRole | None = None
    compressed: bool = False

    def __post_init__(self) -> None:
        if (self.kind == TensorKind.CACHE) != (self.role is not None):
            raise ValueError(f"tensor {self.name}: a cache, and only a cache, has a role")
        if self.compressed and self.kind != TensorKind.CACHE:
            raise ValueError(f"tensor {self.name}: only a cache can be compressed")

    def numel(self, env: dict[str, int] | None = None) -> float:
        n = 1.0
        for d in self.shape:
            if isinstance(d, str):
                if env is None:
                    raise ValueError(f"tensor {self.name} has symbolic dim {d}; pass a workload")
                n *= env[d]
            else:
                n *= d
        return n

    def nbytes(self, env: dict[str, int] | None = None) -> float:
        return self.numel(env) * self.dtype_bytes


class CostClass(StrEnum):
    """Which hardware pipeline does an op's arithmetic; each has its own achieved efficiency."""

    SYSTOLIC = "systolic"  # GEMMs on systolic PCUs
    ATTENTION = "attention"  # flash-style QK^T, softmax, PV fused
    SIMD = "simd"  # norms, activations, softmax, reductions, sorting, top-k
    MEMORY = "memory"  # gathers, scatters, concatenations: address generation and data movement


class TPMode(StrEnum):
    """How a model-parallel (tensor) split acts on the op's math.

    COLUMN: split the output features (heads); ROW: split the contracted features (partial sums
    result); HEADS: attention split by heads; LOCAL: elementwise on whatever split its input has;
    TOKEN: needs whole rows (norms, residual adds, routing), so under TP it runs on a token slice.
    """

    COLUMN = "column"
    ROW = "row"
    HEADS = "heads"
    LOCAL = "local"
    TOKEN = "token"


@dataclass
class Op:
    """One operator. `kind` selects its cost formulas in `rdusim.ir.ops`; `attrs` are its kind's
    typed attributes (`rdusim.ir.attrs.ATTRS_OF`)."""

    name: str
    kind: OpKind
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: OpAttrs
    weights: tuple[Tensor, ...] = ()
    tp_mode: TPMode = TPMode.LOCAL
    doc: str = ""

    def __post_init__(self) -> None:
        try:
            self.kind = OpKind(self.kind)
        except ValueError:
            raise ValueError(f"op {self.name} has unknown kind {self.kind!r}") from None
        want = ATTRS_OF[self.kind]
        if not isinstance(self.attrs, want):
            raise TypeError(
                f"op {self.name} ({self.kind}) has {type(self.attrs).__name__}, not {want.__name__}"
            )

    @property
    def traits(self) -> KindTraits:
        """What its kind implies for the compiler (`rdusim.ir.attrs.TRAITS`)."""
        return traits_of(self.kind)

    @property
    def read(self) -> Access | None:
        """Its explicit HBM read (None: it reads its input tensors)."""
        return explicit_read(self.attrs)

    @property
    def write(self) -> Access | None:
        """Its explicit HBM write (None: it writes its output tensors)."""
        return explicit_write(self.attrs)

    @property
    def routed(self) -> RoutedExperts | None:
        """The routed experts it works on (None: not a routed-expert op)."""
        return routed_experts(self.attrs)

    @property
    def blocking(self) -> bool:
        """Whether it needs its whole input before it emits."""
        return is_blocking(self.attrs)

    def weight_bytes(self) -> float:
        return sum(w.nbytes() for w in self.weights)

    def weight_params(self) -> float:
        return sum(w.numel() for w in self.weights)


class Graph:
    """A DAG of ops connected by tensors; node = op name, edge = tensor from producer to consumer."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tensors: dict[str, Tensor] = {}
        self.ops: dict[str, Op] = {}
        # producer -> consumer -> the tensor between them (the last one added, when several)
        self._succ: dict[str, dict[str, str]] = {}
        self.producer: dict[str, str] = {}
        # answers to queries the passes ask once per op, cleared whenever an op is added
        self._order: list[str] | None = None
        self._consumers: dict[str, list[str]] | None = None
        self._fingerprint: str | None = None

    # building -----------------------------------------------------------------------------
    def tensor(self, t: Tensor) -> Tensor:
        if t.name in self.tensors and self.tensors[t.name] != t:
            raise ValueError(f"tensor {t.name} defined twice with different shapes")
        self.tensors[t.name] = t
        self._fingerprint = None
        return t

    def add(self, op: Op) -> Op:
        if op.name in self.ops:
            raise ValueError(f"op {op.name} defined twice in graph {self.name}")
        for name in (*op.inputs, *op.outputs):
            if name not in self.tensors:
                raise ValueError(f"op {op.name} uses undeclared tensor {name}")
        self.ops[op.name] = op
        self._order = self._consumers = self._fingerprint = None
        self._succ[op.name] = {}
        for out in op.outputs:
            if out in self.producer:
                raise ValueError(
                    f"tensor {out} produced by both {self.producer[out]} and {op.name}"
                )
            self.producer[out] = op.name
        for inp in op.inputs:
            src = self.producer.get(inp)
            if src is not None:
                self._succ[src][op.name] = inp
        return op

    # queries ------------------------------------------------------------------------------
    def order(self) -> list[str]:
        """Op names in a deterministic topological order (build order breaks ties)."""
        if self._order is None:
            self._order = self._topological_order()
        return list(self._order)

    def _topological_order(self) -> list[str]:
        """Kahn's algorithm taking, of the ops ready to run, the one built first: the unique
        topological order that is smallest in build order."""
        index = {name: i for i, name in enumerate(self.ops)}
        waiting = dict.fromkeys(self.ops, 0)
        for dsts in self._succ.values():
            for dst in dsts:
                waiting[dst] += 1
        ready = [index[n] for n, w in waiting.items() if w == 0]
        heapq.heapify(ready)
        names = list(self.ops)
        order = []
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for dst in self._succ[name]:
                waiting[dst] -= 1
                if waiting[dst] == 0:
                    heapq.heappush(ready, index[dst])
        if len(order) != len(names):
            raise ValueError(f"graph {self.name} has a cycle")
        return order

    def fingerprint(self) -> str:
        """The graph's whole content as text (name, every op and tensor with all their fields):
        equal fingerprints are equal graphs, whichever objects hold them (caches key on it)."""
        if self._fingerprint is None:
            self._fingerprint = repr(
                (self.name, list(self.ops.values()), list(self.tensors.values()))
            )
        return self._fingerprint

    def edges(self) -> list[tuple[str, str]]:
        """(producer, consumer) op pairs, by producer in build order, then consumer."""
        return [(src, dst) for src, dsts in self._succ.items() for dst in dsts]

    def edges_within(self, members: Collection[str]) -> list[tuple[str, str]]:
        """The `edges` between ops of `members`, in the same order."""
        succ = self._succ
        return [
            (src, dst) for src in self.ops if src in members for dst in succ[src] if dst in members
        ]

    @property
    def dag(self) -> nx.DiGraph:
        """The graph as a networkx DiGraph (node: op name; edge attribute `tensor`), for
        analyses beyond the passes' own queries; networkx loads only when this is asked for."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(self.ops)
        for src, dsts in self._succ.items():
            for dst, tensor in dsts.items():
                g.add_edge(src, dst, tensor=tensor)
        return g

    def __iter__(self) -> Iterator[Op]:
        return (self.ops[n] for n in self.order())

    def __len__(self) -> int:
        return len(self.ops)

    def consumers(self, tensor: str) -> list[str]:
        """Ops that read `tensor`, in build order."""
        if self._consumers is None:
            index: dict[str, list[str]] = {}
            for n, op in self.ops.items():
                for t in dict.fromkeys(op.inputs):
                    index.setdefault(t, []).append(n)
            self._consumers = index
        return list(self._consumers.get(tensor, ()))

    def graph_inputs(self) -> list[str]:
        used = {t for op in self.ops.values() for t in op.inputs}
        return [t for t in self.tensors if t in used and t not in self.producer]

    def graph_outputs(self) -> list[str]:
        used = {t for op in self.ops.values() for t in op.inputs}
        return [t for t in self.producer if t not in used]

    def weight_params(self) -> float:
        return sum(op.weight_params() for op in self.ops.values())

    def weight_bytes(self) -> float:
        return sum(op.weight_bytes() for op in self.ops.values())

    def subgraph(self, names: Iterable[str]) -> Graph:
        """The ops `names` (in this graph's order) with the tensors they use."""
        keep = set(names)
        sub = Graph(self.name)
        for n in self.order():
            if n in keep:
                op = self.ops[n]
                for t in (*op.inputs, *op.outputs):
                    sub.tensor(self.tensors[t])
                sub.add(op)
        return sub

    def match(self, patterns: Iterable[str]) -> list[str]:
        """Op names matching names or shell-style patterns, in graph order."""
        import fnmatch

        pats = list(patterns)
        return [n for n in self.order() if any(fnmatch.fnmatchcase(n, p) for p in pats)]
