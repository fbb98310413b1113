"""One layer kind's search on the tiny models (`tests/search/tiny.py`): the options it keeps, why
each boundary is where it is (every reason), the latency-vs-SRAM front, the K/V block it takes,
and what it says when an op fits no kernel. Each search takes well under a second."""

from __future__ import annotations

import itertools
import math

import pytest

from rdusim.search.boundaries import Cut
from rdusim.search.layer import FRONT_GAIN, BoundaryReason, LayerOption, LayerSearch
from rdusim.search.segments import Candidate, Limit, Refusal, every_candidate
from tests.search.tiny import SNAPSTREAM, layer_search, small_sram


@pytest.fixture(scope="module")
def decode(tiny) -> LayerSearch:
    """Tiny Llama decode at batch 4: four sharding plans, 15 ops."""
    return layer_search(tiny("decode"))


@pytest.fixture(scope="module")
def snapstream_prefill(tiny) -> LayerSearch:
    """Tiny Llama prefill with SnapStream: one plan, 30 ops, a blocking softmax and K/V blocks."""
    return layer_search(tiny("prefill", *SNAPSTREAM))


@pytest.fixture(scope="module")
def long_prefill(tiny) -> LayerSearch:
    """Tiny Llama prefill of 16K tokens: K/V blocks shorter than the cache."""
    return layer_search(tiny("prefill", "seq_len=16384"))


@pytest.fixture(scope="module")
def cramped(tiny) -> LayerSearch:
    """One tiny Llama layer in prefill on sockets of 208 kB of SRAM: the layer does not fit one
    kernel."""
    return layer_search(tiny("prefill", *small_sram(200), model="tiny-llama-1"))


def test_options_are_fastest_first_one_per_plan_and_kernel_count(decode) -> None:
    options = decode.options(1000)
    assert len(options) > len(decode.builders)  # several kernel counts under several plans
    keys = [(o.plan, len(o.cut.ends)) for o in options]
    assert len(set(keys)) == len(keys)
    assert {o.plan for o in options} == set(decode.builders)
    ranks = [(o.layer_s, len(o.cut.ends)) for o in options]
    assert ranks == sorted(ranks)
    assert decode.options(3) == options[:3]
    sram = decode.ctx.hw.socket.sram_bytes
    for o in options:
        assert o.cut.ends[-1] == len(decode.order)
        assert len(o.kernels_s) == len(o.sram_bytes) == len(o.kv_blocks) == len(o.cut.ends)
        assert max(o.sram_bytes) <= sram
        # each kernel is the leanest within FRONT_GAIN of the fastest, which the cut adds up
        assert sum(o.kernels_s) == pytest.approx(o.layer_s, rel=FRONT_GAIN)


def test_the_best_option_is_the_whole_layer_in_one_kernel_when_it_fits(decode) -> None:
    (best,) = decode.options(1)
    assert best.cut.ends == (len(decode.order),)
    whole = decode.whole_layer(best.plan)
    assert isinstance(whole, Candidate)
    assert (whole.start, whole.end) == (0, len(decode.order))
    (spec,) = decode.kernel_specs(best)
    assert spec.name == f"{decode.order[0]}-{decode.order[-1]}"
    assert spec.ops == decode.order


def test_kernel_specs_name_a_kernel_after_its_ops(decode) -> None:
    n = len(decode.order)
    plan = next(iter(decode.builders))
    cut = Cut(0.0, (1, n))  # the first op alone, then the rest
    option = LayerOption(plan, cut, (None, None), (0.0, 0.0), (0.0, 0.0))
    first, rest = decode.kernel_specs(option)
    assert (first.name, first.ops) == (decode.order[0], decode.order[:1])
    assert rest.name == f"{decode.order[1]}-{decode.order[-1]}"


def _reasons(search: LayerSearch, k: int = 40) -> dict[BoundaryReason, list]:
    """Every boundary of the `k` best options, by reason."""
    found: dict[BoundaryReason, list] = {}
    for option in search.options(k):
        for b in search.boundaries(option):
            found.setdefault(b.reason, []).append((option, b))
    return found


def test_a_boundary_between_two_sharding_layouts_is_a_layout_change(decode) -> None:
    found = _reasons(decode)
    assert {BoundaryReason.LAYOUT_CHANGE, BoundaryReason.COLLECTIVE} <= set(found)
    assert BoundaryReason.FASTER_APART in found
    for option, b in found[BoundaryReason.LAYOUT_CHANGE]:
        shardings = decode.builders[option.plan].shardings
        assert shardings[b.after] != shardings[b.before]
        # "o_proj is dp8, attn_residual tp8; one kernel 24.5 us vs 45.8 us apart"
        assert b.detail.startswith(f"{b.after} is ") and f", {b.before} " in b.detail
        assert " apart" in b.detail
    for _, b in found[BoundaryReason.COLLECTIVE]:
        assert " crosses it; one kernel " in b.detail


def test_a_boundary_after_a_blocking_op_names_the_op_that_would_wait(snapstream_prefill) -> None:
    found = _reasons(snapstream_prefill)
    assert BoundaryReason.BLOCKING_OP in found
    for _, b in found[BoundaryReason.BLOCKING_OP]:
        blocking = b.detail.split(" would wait for ")[1].split(",")[0]
        assert snapstream_prefill.graph.ops[blocking].blocking
        assert "takes in all its input before it emits" in b.detail


def test_a_boundary_the_layer_needs_to_fit_is_an_sram_limit(cramped) -> None:
    (best,) = cramped.options(1)
    assert len(best.cut.ends) > 1
    assert cramped.whole_layer(best.plan) is None  # so no kernel looping either
    bounds = cramped.boundaries(best)
    assert [b.reason for b in bounds] == [BoundaryReason.SRAM_LIMIT] * len(bounds)
    for b, (start, _) in zip(bounds, best.cut.kernels(), strict=False):
        merged, secs = cramped.best_kernel(best.plan, start, best.cut.ends[1])
        assert isinstance(merged, Refusal) and merged.limit == Limit.SRAM and secs == math.inf
        assert b.detail.startswith(f"{b.after} and {b.before} in one kernel (")
        assert merged.detail in b.detail


def test_every_boundary_of_the_best_option_is_a_fit_or_a_time_it_saves(snapstream_prefill) -> None:
    """The best cut is optimal: two neighbouring kernels are one when that fits and is faster."""
    s = snapstream_prefill
    for cap in (math.inf, s.ctx.hw.socket.sram_bytes / 64):
        (best,) = s.options(1, sram_cap=cap)
        kernels = best.cut.kernels()
        for (a, m), (_, e) in itertools.pairwise(kernels):
            merged, merged_s = s.best_kernel(best.plan, a, e, cap)
            apart = s.best_kernel(best.plan, a, m, cap)[1] + s.best_kernel(best.plan, m, e, cap)[1]
            assert isinstance(merged, Refusal) or merged_s >= apart * (1 - 1e-12)


def test_the_front_trades_sram_for_time(snapstream_prefill) -> None:
    s = snapstream_prefill
    front = s.front()
    assert len(front) >= 2
    for a, b in itertools.pairwise(front):
        assert a.peak_sram_bytes < b.peak_sram_bytes
        assert a.layer_s > b.layer_s * (1 + FRONT_GAIN) - 1e-18
        assert a.kernels >= b.kernels
    for p in front:
        assert p.peak_sram_bytes <= p.sram_cap_bytes
        assert p.layer_s == s.options(1, sram_cap=p.sram_cap_bytes)[0].layer_s
    # the smallest caps fit nothing: the front starts where a cut first fits
    smallest = min(p.sram_cap_bytes for p in front)
    below = s.options(1, sram_cap=smallest / 2)
    assert not below or not math.isfinite(below[0].layer_s)


def _attention_kernel(s: LayerSearch, option: LayerOption) -> tuple[int, int]:
    i = s.order.index("attention")
    (kernel,) = [(a, b) for a, b in option.cut.kernels() if a <= i < b]
    return kernel


def test_a_kv_block_that_buys_no_time_is_not_taken(long_prefill) -> None:
    """At 16K tokens, the layer's kernel streams K/V in the smallest block that is within
    FRONT_GAIN of the fastest: the SRAM a larger block takes buys no time."""
    s = long_prefill
    (option,) = s.options(1)
    kernel = _attention_kernel(s, option)
    blocks = s.builders[option.plan].kv_blocks(*kernel)
    assert blocks[0] is None and list(blocks[1:]) == sorted(blocks[1:], reverse=True)
    chosen = option.kv_blocks[option.cut.kernels().index(kernel)]
    fastest, fastest_s = s.best_kernel(option.plan, *kernel)
    lean, lean_s = s.leanest_kernel(option.plan, *kernel)
    assert isinstance(fastest, Candidate) and isinstance(lean, Candidate)
    assert lean.kv_block == chosen != fastest.kv_block
    assert fastest_s <= lean_s <= fastest_s * (1 + FRONT_GAIN)
    assert lean.kernel.sram_bytes < fastest.kernel.sram_bytes
    for b in blocks[blocks.index(chosen) + 1 :]:  # every smaller block is slower
        c = s.builders[option.plan].build(*kernel, b)
        assert isinstance(c, Candidate)
        assert s.kernel_s(c.kernel) > fastest_s * (1 + FRONT_GAIN)


def test_a_block_longer_than_the_cache_is_never_leaner(tiny) -> None:
    """Over a 1024-token prompt every block is as fast as the whole cache and holds more: the
    whole cache is taken."""
    s = layer_search(tiny("prefill"))
    (option,) = s.options(1)
    kernel = _attention_kernel(s, option)
    whole, whole_s = s.best_kernel(option.plan, *kernel)
    assert isinstance(whole, Candidate) and whole.kv_block is None
    for b in s.builders[option.plan].kv_blocks(*kernel)[1:]:
        c = s.builders[option.plan].build(*kernel, b)
        assert isinstance(c, Candidate) and b > 1024
        assert s.kernel_s(c.kernel) == whole_s
        assert c.kernel.sram_bytes > whole.kernel.sram_bytes
    assert s.leanest_kernel(option.plan, *kernel)[0] == whole
    assert option.kv_blocks[option.cut.kernels().index(kernel)] is None


def test_under_a_cap_the_largest_block_that_fits_is_taken(long_prefill) -> None:
    s = long_prefill
    plan = next(iter(s.builders))
    i = s.order.index("attention")
    builds = {b: s.builders[plan].build(i, i + 1, b) for b in s.builders[plan].kv_blocks(i, i + 1)}
    sram = {b: c.kernel.sram_bytes for b, c in builds.items() if isinstance(c, Candidate)}
    assert len(sram) == len(builds)
    cap = sram[None] - 1  # the whole cache no longer fits, nor a block as long
    fitting = [b for b in builds if b is not None and sram[b] <= cap]
    c, secs = s.best_kernel(plan, i, i + 1, cap)
    assert isinstance(c, Candidate) and c.kv_block == max(fitting) and math.isfinite(secs)
    lean, _ = s.leanest_kernel(plan, i, i + 1, cap)
    assert isinstance(lean, Candidate) and lean.kernel.sram_bytes <= cap
    # under a cap nothing fits: the first refusal says by how much
    refused, secs = s.best_kernel(plan, i, i + 1, 1.0)
    assert isinstance(refused, Refusal) and secs == math.inf
    assert refused.limit == Limit.SRAM and "over a cap of 0" in refused.detail
    assert s.leanest_kernel(plan, i, i + 1, 1.0) == (refused, math.inf)


def test_a_kv_block_the_compiler_refuses_gives_way_to_a_smaller_one(tiny) -> None:
    """On sockets of 416 kB the attention kernel holds the whole 1024-token cache only in
    blocks: the compiler refuses the whole cache, and the search takes the largest block."""
    s = layer_search(tiny("prefill", *small_sram(400), model="tiny-llama-1"))
    plan = next(iter(s.builders))
    i = s.order.index("attention")
    refused = [
        b
        for b in s.builders[plan].kv_blocks(i, i + 1)
        if isinstance(s.builders[plan].build(i, i + 1, b), Refusal)
    ]
    c, _ = s.best_kernel(plan, i, i + 1)
    assert isinstance(c, Candidate)
    assert refused and c.kv_block not in refused


def test_misfits_name_the_first_op_that_fits_no_kernel_per_plan(tiny, decode) -> None:
    assert decode.misfits() == []
    # four heads do not divide over eight sockets: every plan refuses the layer's first op
    s = layer_search(tiny("prefill", model="tiny-llama-4h"))
    misfits = s.misfits()
    assert [plan for plan, _, _ in misfits] == list(s.builders)
    for _, op, why in misfits:
        assert op == s.order[0]
        assert why.limit == Limit.SHARDING and "does not divide the 4 heads" in why.detail
    assert s.options(1) == [] or not math.isfinite(s.options(1)[0].layer_s)
    # on sockets of 104 kB, attention alone needs more SRAM than a socket has
    s = layer_search(tiny("prefill", *small_sram(100)))
    ((_, op, why),) = s.misfits()
    assert (op, why.limit) == ("attention", Limit.SRAM)
    assert "more than the 0.104 MB a socket has" in why.detail


def test_every_candidate_is_each_contiguous_run_of_ops_that_builds(tiny) -> None:
    rm = tiny("decode")
    s = layer_search(rm)
    kernels = list(every_candidate(rm, "dense", 4))
    expected = sum(
        isinstance(b.build(i, j), Candidate)
        for b in s.builders.values()
        for i, j in itertools.combinations(range(len(s.order) + 1), 2)
    )
    assert len(kernels) == expected > len(s.order)
    for k in kernels:
        names = [op.name for op in k.ops]
        start = s.order.index(names[0])
        assert names == s.order[start : start + len(names)]


def test_a_span_s_first_fit_is_kept_by_plan_and_span_and_its_bound_is_below_its_cost(
    decode,
) -> None:
    """`_first_fit` (the tiling `best_kernel` prices) is kept per plan, start and end: each
    kept answer is what the builder gives afresh, and another plan or span is its own; the
    bound the cut search prunes with is never above the span's cost."""
    n = len(decode.order)
    plans = list(decode.builders)
    for plan in plans:
        for i, j in itertools.combinations(range(n + 1), 2):
            kept = decode._first_fit(plan, i, j)
            assert decode._first_fit(plan, i, j) is kept
            fresh = decode._first_fit_within(plan, i, j, math.inf)
            assert repr(fresh) == repr(kept)
            cost = decode.best_kernel(plan, i, j)[1]
            assert decode._bound(plan, i, j) <= cost
            assert math.isfinite(decode._bound(plan, i, j)) == math.isfinite(cost)
    spans = {(p, i, j) for p, i, j in decode._fits}
    assert len(spans) == len(plans) * n * (n + 1) // 2


def test_the_scan_stops_at_a_kernel_over_the_pcus_as_at_one_over_sram(tiny) -> None:
    """On sockets of 6 PCUs, a kernel of more than the last six ops of a tiny decode layer is
    refused for its PCUs, and a longer one would be too: the search builds none longer."""
    s = layer_search(tiny("decode", "hardware.socket.pcus=6"))
    plan = next(iter(s.builders))
    builder = s.builders[plan]
    built: list[tuple[int, int]] = []
    build = builder.build

    def counting(start, end, *rest):
        built.append((start, end))
        return build(start, end, *rest)

    builder.build = counting  # type: ignore[method-assign]
    s.options(1)
    refused: dict[int, int] = {}  # end -> the largest start refused for its PCUs
    for start, end in set(built):
        c = build(start, end)
        if isinstance(c, Refusal):
            assert c.limit == Limit.PCUS
            refused[end] = max(refused.get(end, -1), start)
    assert refused  # some kernels were over the PCUs
    assert all(start >= refused.get(end, -1) for start, end in built)
