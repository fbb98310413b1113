"""The graph IR: tensors, workloads, graph construction and the invariants every layer keeps."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.ir.attrs import ATTRS_OF, ElementwiseAttrs, GemmAttrs, OpKind
from rdusim.ir.builders import deepseek, llama
from rdusim.ir.graph import CacheRole, CostClass, Graph, Op, Tensor, TensorKind, Workload
from rdusim.ir.ops import OP_KINDS, cost_class_of
from rdusim.snapstream.config import SnapStreamConfig

SS = SnapStreamConfig(sink=4, recent=64, topk=128, obs_window=32, pool_kernel=7)


def all_layers(r1, llama8b):
    """(label, graph) for every layer graph the builders make."""
    out = []
    for ss in (None, SS):
        tag = "ss" if ss else "plain"
        for kind in ("dense", "moe"):
            for phase in ("prefill", "decode"):
                out.append((f"r1.{kind}.{phase}.{tag}", deepseek.build_layer(r1, kind, phase, ss)))
        for phase in ("prefill", "decode"):
            out.append((f"llama.{phase}.{tag}", llama.build_layer(llama8b, "dense", phase, ss)))
    out += [
        ("r1.embedding", deepseek.build_embedding(r1)),
        ("r1.head", deepseek.build_head(r1)),
        ("r1.mtp_proj", deepseek.build_mtp_projection(r1)),
        ("llama.embedding", llama.build_embedding(llama8b)),
        ("llama.head", llama.build_head(llama8b)),
    ]
    return out


@pytest.fixture(scope="module")
def layers(r1, llama8b):
    return all_layers(r1, llama8b)


# --------------------------------------------------------------------------------------------
# tensors and workloads


def test_tensor_numel_and_bytes():
    t = Tensor("x", ("B", "S", 7168), 2.0)
    env = Workload(2, 10, 10).env()
    assert t.numel(env) == 2 * 10 * 7168
    assert t.nbytes(env) == 2 * 10 * 7168 * 2
    assert t.kind == TensorKind.ACTIVATION


def test_only_a_cache_has_a_role_and_may_be_compressed():
    assert Tensor("k", ("B", "T", 8), 2.0, TensorKind.CACHE, CacheRole.KEY).role == CacheRole.KEY
    with pytest.raises(ValueError, match="role"):
        Tensor("k", ("B", "T", 8), 2.0, TensorKind.CACHE)
    with pytest.raises(ValueError, match="role"):
        Tensor("x", ("B", 8), 2.0, role=CacheRole.KEY)
    with pytest.raises(ValueError, match="compressed"):
        Tensor("x", ("B", 8), 2.0, compressed=True)


def test_symbolic_tensor_needs_a_workload():
    with pytest.raises(ValueError, match="symbolic"):
        Tensor("x", ("B", 4), 2.0).numel()
    assert Tensor("w", (3, 4), 1.0, TensorKind.WEIGHT).nbytes() == 12


def test_workload_defaults():
    wl = Workload(batch=4, seq=1, kv=8192)
    assert wl.evict == 0
    assert wl.tokens == 4
    assert wl.env() == {"B": 4, "S": 1, "T": 8192, "E": 0}


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 4096),
    s=st.integers(1, 1 << 20),
    t=st.integers(1, 1 << 20),
    e=st.integers(0, 1 << 20),
)
def test_workload_env(b, s, t, e):
    wl = Workload(b, s, t, e)
    assert wl.env() == {"B": b, "S": s, "T": t, "E": e}
    assert wl.tokens == b * s
    assert Tensor("x", ("B", "S", "T", "E"), 1.0).numel(wl.env()) == pytest.approx(b * s * t * e)


# --------------------------------------------------------------------------------------------
# building graphs


def small_graph() -> Graph:
    g = Graph("g")
    for name in ("a", "b", "c", "d"):
        g.tensor(Tensor(name, ("B", 4), 2.0))
    w = Tensor("w", (1, 4, 4), 1.0, TensorKind.WEIGHT)
    g.add(Op("p", OpKind.GEMM, ("a",), ("b",), GemmAttrs(("B",), 4, 4), (w,)))
    g.add(Op("q", OpKind.ELEMENTWISE, ("b",), ("c",), ElementwiseAttrs()))
    g.add(Op("r", OpKind.ELEMENTWISE, ("a", "c"), ("d",), ElementwiseAttrs()))
    return g


def test_small_graph_queries():
    g = small_graph()
    assert g.order() == ["p", "q", "r"]
    assert [op.name for op in g] == ["p", "q", "r"]
    assert len(g) == 3
    assert g.graph_inputs() == ["a"]
    assert g.graph_outputs() == ["d"]
    assert sorted(g.consumers("a")) == ["p", "r"]
    assert g.weight_params() == 16
    assert g.weight_bytes() == 16
    assert g.match(["q", "p"]) == ["p", "q"]
    assert g.match(["*"]) == ["p", "q", "r"]
    assert g.match(["x*"]) == []
    assert set(g.dag.edges) == {("p", "q"), ("q", "r")}
    assert g.dag.edges["p", "q"]["tensor"] == "b"


def test_undeclared_tensor_is_refused():
    g = Graph("g")
    g.tensor(Tensor("a", (1,), 2.0))
    with pytest.raises(ValueError, match="undeclared tensor b"):
        g.add(Op("p", OpKind.ELEMENTWISE, ("a",), ("b",), ElementwiseAttrs()))


def test_duplicate_op_is_refused():
    g = small_graph()
    with pytest.raises(ValueError, match="defined twice"):
        g.add(Op("p", OpKind.ELEMENTWISE, ("a",), ("c",), ElementwiseAttrs()))


def test_two_producers_are_refused():
    g = small_graph()
    with pytest.raises(ValueError, match="produced by both"):
        g.add(Op("s", OpKind.ELEMENTWISE, ("a",), ("c",), ElementwiseAttrs()))


def test_tensor_redefinition():
    g = Graph("g")
    g.tensor(Tensor("a", (1,), 2.0))
    g.tensor(Tensor("a", (1,), 2.0))  # the same definition again is fine
    with pytest.raises(ValueError, match="defined twice"):
        g.tensor(Tensor("a", (2,), 2.0))


def test_order_breaks_ties_by_build_order():
    g = Graph("g")
    for name in ("x", "y1", "y2", "y3"):
        g.tensor(Tensor(name, (1,), 2.0))
    g.add(Op("c", OpKind.ELEMENTWISE, ("x",), ("y3",), ElementwiseAttrs()))
    g.add(Op("a", OpKind.ELEMENTWISE, ("x",), ("y1",), ElementwiseAttrs()))
    g.add(Op("b", OpKind.ELEMENTWISE, ("x",), ("y2",), ElementwiseAttrs()))
    assert g.order() == ["c", "a", "b"]


# --------------------------------------------------------------------------------------------
# invariants of every built layer


def test_order_is_a_topological_order(layers):
    for label, g in layers:
        order = g.order()
        assert nx.is_directed_acyclic_graph(g.dag), label
        assert sorted(order) == sorted(g.ops), label
        pos = {n: i for i, n in enumerate(order)}
        for u, v in g.dag.edges:
            assert pos[u] < pos[v], (label, u, v)
        assert g.order() == order, label  # deterministic


def test_every_tensor_an_op_uses_is_declared(layers):
    for label, g in layers:
        for op in g.ops.values():
            for t in (*op.inputs, *op.outputs):
                assert t in g.tensors, (label, op.name, t)


def test_every_input_is_produced_earlier_or_is_a_graph_input(layers):
    for label, g in layers:
        inputs = set(g.graph_inputs())
        pos = {n: i for i, n in enumerate(g.order())}
        for op in g.ops.values():
            for t in op.inputs:
                src = g.producer.get(t)
                assert (src is None and t in inputs) or pos[src] < pos[op.name], (label, t)


def test_every_op_has_a_known_kind_and_cost_class(layers):
    for label, g in layers:
        for op in g.ops.values():
            assert op.kind in OP_KINDS, (label, op.name)
            assert cost_class_of(op) in set(CostClass)


def test_weights_are_weight_tensors_and_attrs_fit_the_kind(layers):
    for label, g in layers:
        for op in g.ops.values():
            for w in op.weights:
                assert w.kind == TensorKind.WEIGHT, (label, op.name)
                assert all(isinstance(d, int) for d in w.shape)
            assert isinstance(op.attrs, ATTRS_OF[op.kind]), (label, op.name)


def _by_kind(g: Graph, names: list[str]) -> dict[TensorKind, list[str]]:
    out: dict[TensorKind, list[str]] = {}
    for n in names:
        out.setdefault(g.tensors[n].kind, []).append(n)
    return out


@pytest.mark.parametrize("kind", ["dense", "moe"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_r1_layer_boundaries(r1, kind, phase):
    g = deepseek.build_layer(r1, kind, phase)
    outs = _by_kind(g, g.graph_outputs())
    ins = _by_kind(g, g.graph_inputs())
    # the residual stream enters as `x` and leaves as `h_out`
    assert outs[TensorKind.ACTIVATION] == ["h_out"]
    assert ins[TensorKind.ACTIVATION] == ["x"]
    caches = ["latent_cache", "rope_cache"]
    if phase == "prefill":  # prefill writes the latent cache for decode
        assert outs[TensorKind.CACHE] == caches
        assert TensorKind.CACHE not in ins
    else:  # decode reads it (and scatters the new token into it)
        assert TensorKind.CACHE not in outs
        assert ins[TensorKind.CACHE] == caches


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_llama_layer_boundaries(llama8b, phase):
    g = llama.build_layer(llama8b, "dense", phase)
    outs = _by_kind(g, g.graph_outputs())
    assert outs[TensorKind.ACTIVATION] == ["h_out"]
    assert _by_kind(g, g.graph_inputs())[TensorKind.ACTIVATION] == ["x"]
    if phase == "prefill":
        assert outs[TensorKind.CACHE] == ["k_cache", "v_cache"]


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_only_h_out_leaves_a_layer_besides_caches(r1, llama8b, phase):
    for g in (
        deepseek.build_layer(r1, "moe", phase, SS),
        llama.build_layer(llama8b, "dense", phase, SS),
    ):
        extra = [t for t in g.graph_outputs() if g.tensors[t].kind != TensorKind.CACHE]
        assert extra == ["h_out"], g.name


def test_snapstream_prefill_outputs_the_compressed_cache(r1):
    g = deepseek.build_layer(r1, "moe", "prefill", SS)
    outs = set(g.graph_outputs())
    assert {"compressed_latent", "compressed_rope"} <= outs
    for name, role in (("compressed_latent", CacheRole.LATENT), ("compressed_rope", CacheRole.KEY)):
        t = g.tensors[name]
        assert (t.kind, t.role, t.compressed) == (TensorKind.CACHE, role, True)
        assert t.shape[1] == SS.slots
    caches = [t for t in g.tensors.values() if t.kind == TensorKind.CACHE]
    assert {t.name for t in caches if not t.compressed} == {"latent_cache", "rope_cache"}


# --------------------------------------------------------------------------------------------
# the graph's own DAG


@st.composite
def dags(draw: st.DrawFn) -> Graph:
    """A random DAG built in a random order: each op reads a few tensors made before it."""
    n = draw(st.integers(1, 12))
    g = Graph("random")
    g.tensor(Tensor("in", ("B", 4), 2.0))
    made = ["in"]
    for i in range(n):
        reads = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True))
        g.tensor(Tensor(f"t{i}", ("B", 4), 2.0))
        g.add(Op(f"op{i}", OpKind.ELEMENTWISE, tuple(reads), (f"t{i}",), ElementwiseAttrs()))
        made.append(f"t{i}")
    return g


@given(dags())
@settings(max_examples=60, deadline=None)
def test_order_and_edges_are_networkx_s(g: Graph) -> None:
    """The order is networkx's lexicographical topological sort keyed by build order, and the
    edges networkx's, in its order (by producer, then consumer, as first added)."""
    dag = nx.DiGraph()
    for op in g.ops.values():
        dag.add_node(op.name)
        for t in op.inputs:
            src = g.producer.get(t)
            if src is not None:
                dag.add_edge(src, op.name, tensor=t)
    index = {name: i for i, name in enumerate(g.ops)}
    assert g.order() == list(nx.lexicographical_topological_sort(dag, key=index.__getitem__))
    assert g.edges() == list(dag.edges)
    assert list(g.dag.edges(data="tensor")) == list(dag.edges(data="tensor"))


def test_the_fingerprint_is_the_graphs_content():
    a, b = small_graph(), small_graph()
    assert a is not b and a.fingerprint() == b.fingerprint()
    b.tensor(Tensor("e", ("B", 4), 2.0))
    assert a.fingerprint() != b.fingerprint()  # a tensor added
    c = small_graph()
    c.tensor(Tensor("e", ("B", 4), 2.0))
    fingerprint = c.fingerprint()
    c.add(Op("s", OpKind.ELEMENTWISE, ("d",), ("e",), ElementwiseAttrs()))
    assert c.fingerprint() != fingerprint  # an op added after the graph was fingerprinted
    d = small_graph()
    d.ops["q"].doc = "another note"  # any field of any op counts
    assert d.fingerprint() != a.fingerprint()


@given(dags(), st.data())
@settings(max_examples=60, deadline=None)
def test_edges_within_some_ops_are_the_edges_between_them_in_order(g: Graph, data) -> None:
    members = set(data.draw(st.lists(st.sampled_from(list(g.ops)), unique=True)))
    expected = [(a, b) for a, b in g.edges() if a in members and b in members]
    assert g.edges_within(members) == expected
