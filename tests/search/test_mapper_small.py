"""The auto-mapper on the tiny models (`tests/search/tiny.py`): what it picks and reports for each
objective, how it walks the batches, kernel looping over one and two layer kinds, the gain
against hand kernels, and each way it says that nothing fits. A search of a tiny mapping takes
about a second, so each path runs in the fast suite (the shipped models' searches, a few seconds
each, are in `test_mapper.py`)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from rdusim.compiler.capacity import max_batch
from rdusim.compiler.compile import compile_mapping
from rdusim.errors import InfeasibleError, SpecError
from rdusim.ir.graph import Phase
from rdusim.ir.model import build_model
from rdusim.search import mapper
from rdusim.search.layer import BoundaryReason
from rdusim.search.mapper import (
    AutoMapping,
    MappingCandidate,
    NoKernelFits,
    SearchOptions,
    auto_map,
    gain_vs_hand,
    ranking,
    with_kernels,
)
from rdusim.search.objective import Objective, better, score
from rdusim.sim.model import simulate
from rdusim.spec.mapping import KernelSpec, Sharding, snapstream_sizes
from tests.search.tiny import small_sram

# sockets of a few MB of HBM: the largest batch that fits is small, so a walk over the batches
# is short (32 with 5 MB, 4 with 1.5 MB)
HBM_5MB = "hardware.socket.hbm.capacity_bytes=5e6"
HBM_1_5MB = "hardware.socket.hbm.capacity_bytes=1.5e6"


@pytest.fixture(scope="module")
def prefill(tiny) -> AutoMapping:
    """Tiny Llama prefill, two runner-ups asked for."""
    return auto_map(tiny("prefill"), SearchOptions(alternatives=2))


@pytest.fixture(scope="module")
def decode(tiny) -> AutoMapping:
    """Tiny Llama decode at the mapping's batch of 4."""
    return auto_map(tiny("decode"))


@pytest.fixture(scope="module")
def throughput(tiny) -> AutoMapping:
    """Tiny Llama decode at `batch: max` on sockets of 5 MB of HBM."""
    return auto_map(tiny("decode", "batch=max", HBM_5MB))


def rerun(found: AutoMapping) -> float:
    """The objective of the mapping the search writes out, compiled and simulated again."""
    program = compile_mapping(found.mapping, batch=found.batch)
    return score(found.objective, program, simulate(program, found.mapping.hardware))


# --- what it picks and reports ------------------------------------------------------------------


def test_prefill_picks_the_best_finalist_and_its_mapping_reproduces_it(prefill) -> None:
    assert (prefill.objective, prefill.batch) == (Objective.TTFT, 1)
    chosen = prefill.chosen
    assert chosen.program is not None and chosen.result is not None
    assert chosen.score == chosen.result.total_latency_s == rerun(prefill)
    # two layers that fit one kernel each: the layer kernel looped is the pick
    assert chosen.looped and prefill.mapping.spec.kernel_looping
    assert prefill.mapping.spec.kernels == chosen.kernels
    assert len(chosen.ensemble) == 64 and prefill.rank_by == "mean"
    assert 1 <= len(prefill.alternatives) <= 2
    for alt in prefill.alternatives:
        assert not better(prefill.objective, ranking(alt, "mean"), ranking(chosen, "mean"))
    distinct = {repr((c.kernels, c.looped)) for c in [chosen, *prefill.alternatives]}
    assert len(distinct) == 1 + len(prefill.alternatives)
    assert prefill.candidates_simulated == 3 and prefill.candidates_built > 15


def test_the_summary_and_alternatives_say_what_was_chosen_and_weighed(prefill) -> None:
    summary = prefill.summary()
    assert summary == {
        "objective": "ttft",
        "batch": 1,
        "kernel_looping": True,
        "sharding_plans": {"dense": prefill.chosen.plans["dense"].label},
        "boundaries": {},  # a looped mapping has no cut to explain
        "estimated_layers_s": prefill.chosen.estimate_s,
        "ranked_by": "mean",
        "candidate_kernels_built": prefill.candidates_built,
        "mappings_simulated": 3,
    }
    alts = prefill.alternatives_json()
    assert [a["total_latency_s"] for a in alts] == [c.score for c in prefill.alternatives]
    for a, c in zip(alts, prefill.alternatives, strict=True):
        assert a["kernel_looping"] == c.looped
        assert a["kernels"]["dense"][0]["ops"] == c.kernels["dense"][0].ops
    assert prefill.front("dense") == prefill.layer_searches["dense"].front()
    assert prefill.front("dense")


def test_decode_runs_at_the_mappings_batch_by_step_time(decode, tiny) -> None:
    assert (decode.objective, decode.batch) == (Objective.STEP_TIME, 4)
    assert decode.mapping.spec.batch == 4
    assert decode.chosen.score == rerun(decode)
    assert decode.summary()["objective"] == "step-time"


def test_progress_says_each_step(tiny) -> None:
    said: list[str] = []
    found = auto_map(tiny("decode", model="tiny-llama-1"), progress=said.append)
    assert said[0] == "searching at batch 4 (step-time)"
    assert said[1] == "layer kind 1/1 (dense): 15 ops under 4 sharding plans"
    assert said[2].startswith("layer kind 1/1 (dense): ") and " cuts kept" in said[2]
    assert said[3].endswith("whole mappings estimated; simulating the best 3")  # nothing looped
    assert said[4:7] == ["simulated 1/3", "simulated 2/3", "simulated 3/3"]
    assert said[-1] == f"done in {found.seconds:.1f} s at batch 4"


# What the search picks on small cases: each kind's kernels (first op, last op, op count), the
# sharding plans, kernel looping, the batch and the candidates built. Recorded from the search
# before it shared candidates between plans and kept kernel timings and prices across programs
# (the picks, and every report byte, came out the same after), so a change to how the search
# runs that changes what it finds shows here. A change to the model that moves a pick updates
# these on purpose.
BLOCK_DP = "attention block-dp, experts tp"
TP = "attention tp, experts tp"
PICKS = {
    "llama decode": (
        ("tiny-llama", "decode"),
        {"dense": [("attn_norm", "ffn_residual", 15)]},
        {"dense": BLOCK_DP},
        (True, 4, 480),
    ),
    "llama prefill cut by SRAM": (
        ("tiny-llama-1", "prefill", *small_sram(200)),
        {"dense": [("attn_norm", "attn_residual", 10), ("ffn_norm", "ffn_residual", 5)]},
        {"dense": TP},
        (False, 1, 137),
    ),
    "deepseek decode cut by SRAM": (
        ("tiny-ds", "decode", *small_sram(150)),
        {
            "dense": [("attn_norm", "ffn_residual", 19)],
            "moe": [
                ("attn_norm", "shared_down_proj", 21),
                ("experts_up_proj", "experts_silu_mul", 2),
                ("experts_down_proj", "ffn_residual", 3),
            ],
        },
        {"dense": TP, "moe": TP},
        (False, 4, 2881),
    ),
}


@pytest.mark.parametrize("case", PICKS)
def test_the_picks_on_small_cases_are_pinned(tiny, case) -> None:
    (model, phase, *overrides), kernels, plans, (looped, batch, built) = PICKS[case]
    found = auto_map(tiny(phase, *overrides, model=model))
    got = {
        kind: [(k.ops[0], k.ops[-1], len(k.ops)) for k in ks]
        for kind, ks in found.chosen.kernels.items()
    }
    assert got == kernels
    assert {kind: p.label for kind, p in found.chosen.plans.items()} == plans
    assert (found.chosen.looped, found.batch, found.candidates_built) == (looped, batch, built)


# --- one layer, two layer kinds ----------------------------------------------------------------


@pytest.mark.parametrize("model", ["tiny-llama-1", "tiny-llama"])
def test_a_layer_that_fits_no_kernel_is_cut_not_looped_and_each_cut_is_explained(
    tiny, model
) -> None:
    """On sockets of 208 kB of SRAM a layer fits no single kernel, so there is no kernel to loop
    (with one layer there is nothing to loop either): the pick is a cut whose boundaries say
    why."""
    found = auto_map(tiny("prefill", *small_sram(200), model=model))
    assert not found.chosen.looped and not found.mapping.spec.kernel_looping
    assert all(not c.looped for c in [found.chosen, *found.alternatives])
    (option,) = found.chosen.options.values()
    kernels = found.chosen.kernels["dense"]
    assert len(kernels) == len(option.cut.ends) > 1
    bounds = found.summary()["boundaries"]["dense"]
    assert len(bounds) == len(kernels) - 1
    assert {b["reason"] for b in bounds} == {BoundaryReason.SRAM_LIMIT.value}
    assert found.chosen.score == rerun(found)


def test_two_layer_kinds_loop_only_the_kind_that_repeats(tiny) -> None:
    """DeepSeek-V3 in miniature: one dense layer and two MoE layers. Looped, the MoE kernel
    covers both MoE layers in one call and the dense kernel runs once, as it is."""
    found = auto_map(tiny("prefill", model="tiny-ds"))
    assert set(found.chosen.plans) == set(found.layer_searches) == {"dense", "moe"}
    assert found.chosen.looped
    assert [len(found.chosen.kernels[k]) for k in ("dense", "moe")] == [1, 1]
    search = found.layer_searches["dense"]
    whole = search.whole_layer(found.chosen.plans["dense"])
    assert whole is not None
    assert found.chosen.score == rerun(found)


def test_a_decode_step_also_runs_the_mtp_modules_moe_layer(tiny) -> None:
    def weights(*overrides: str) -> tuple[dict[str, int], dict[str, int]]:
        rm = tiny("decode", *overrides, model="tiny-ds")
        graphs = build_model(rm.model, Phase.DECODE, snapstream_sizes(rm.spec, None))
        return mapper._weights(rm, graphs)

    assert weights() == ({"dense": 1, "moe": 2}, {"dense": 0, "moe": 0})
    rm = tiny("decode", "mtp.draft_tokens=2", "mtp.acceptance=0.8", model="tiny-ds")
    assert rm.spec.mtp.module_runs == 2
    assert weights("mtp.draft_tokens=2", "mtp.acceptance=0.8") == (
        {"dense": 1, "moe": 2},
        {"dense": 0, "moe": 2},
    )


# --- the batch ---------------------------------------------------------------------------------


def test_throughput_at_batch_max_runs_at_the_largest_batch_the_pick_holds(throughput) -> None:
    assert throughput.objective == Objective.THROUGHPUT
    assert throughput.batch == max_batch(throughput.mapping)[0] == 32
    assert throughput.mapping.spec.batch == "max"  # written as the file had it
    assert throughput.chosen.score == rerun(throughput)


def test_step_time_at_batch_max_is_the_step_at_the_largest_batch_that_fits(tiny) -> None:
    rm = tiny("decode", "batch=max", HBM_1_5MB)
    said: list[str] = []
    found = auto_map(rm, SearchOptions(objective=Objective.STEP_TIME), progress=said.append)
    assert found.batch == max_batch(rm)[0] == 4
    assert [m for m in said if m.startswith("searching")] == ["searching at batch 4 (step-time)"]


def test_a_throughput_objective_runs_at_the_batch_it_chose(tiny) -> None:
    found = auto_map(
        tiny("decode", "batch=8", HBM_5MB), SearchOptions(objective=Objective.THROUGHPUT)
    )
    assert found.batch == found.mapping.spec.batch == 32


def test_a_pick_that_holds_a_larger_batch_is_searched_again_there(tiny, monkeypatch) -> None:
    """The walk starts at the largest batch the seed mapping holds; when the pick holds a larger
    one, the search goes up to it."""
    real = mapper.max_batch
    seen: list[int] = []

    def seed_holds_two(rm, used=None):
        batch, program = real(rm, used)
        seen.append(batch)
        return (2, program) if len(seen) == 1 else (batch, program)

    monkeypatch.setattr(mapper, "max_batch", seed_holds_two)
    said: list[str] = []
    found = auto_map(tiny("decode", "batch=max", HBM_5MB), progress=said.append)
    searched = [int(m.split()[3]) for m in said if m.startswith("searching at batch")]
    # each search after the first is at the batch the previous pick holds
    assert searched[0] == 2 and searched[1:] == seen[1 : len(searched)]
    assert found.batch == searched[-1] > 2
    assert seen[-1] <= found.batch  # the last pick holds no larger batch


def test_throughput_under_a_latency_bound_meets_it(tiny, throughput) -> None:
    step = throughput.chosen.result.total_latency_s
    bound = 1e-4
    assert step > bound  # at its largest batch the free pick is slower than the bound
    options = SearchOptions(objective=Objective.THROUGHPUT_UNDER_LATENCY, latency_bound_s=bound)
    said: list[str] = []
    found = auto_map(tiny("decode", "batch=max", HBM_5MB), options, progress=said.append)
    assert found.chosen.result.total_latency_s <= bound
    assert found.batch < throughput.batch
    assert found.mapping.spec.batch == found.batch  # the bound chose it: it is written
    assert said[0] == "searching at batch 32 (throughput-under-latency)"


# --- nothing fits -------------------------------------------------------------------------------


def test_a_bound_no_batch_meets_is_refused_naming_the_batches(tiny) -> None:
    options = SearchOptions(objective=Objective.THROUGHPUT_UNDER_LATENCY, latency_bound_s=1e-9)
    with pytest.raises(InfeasibleError) as exc:
        auto_map(tiny("decode", "batch=max", HBM_1_5MB), options)
    err = exc.value
    assert err.key == "--latency-bound"
    assert err.problem == "no mapping meets a step of 1e-09 s at any batch (1, 2, 4 tried)"
    assert "raise the bound" in (err.fix or "")


def test_weights_that_overflow_every_sockets_hbm_are_refused_at_once(tiny) -> None:
    with pytest.raises(InfeasibleError) as exc:
        auto_map(tiny("decode", "hardware.socket.hbm.capacity_bytes=1e5"))
    err = exc.value
    assert err.key == "hardware"
    assert "the weights alone need" in err.problem and "no mapping of this node fits" in err.problem
    assert re.search(r"at least \d+ sockets", err.fix or "")


@pytest.mark.parametrize(
    ("model", "overrides", "problem", "fixes"),
    [
        (
            "tiny-llama",
            small_sram(100),
            "op attention of the dense layers fits no kernel on one socket under any sharding "
            "plan (batch 1; SRAM: ",
            ["shorten seq_len", "more sockets", "more SRAM per socket"],
        ),
        (
            "tiny-llama-4h",
            [],
            "op attn_norm of the dense layers fits no kernel on one socket under any sharding "
            "plan (batch 1; sharding: tp: 8 does not divide the 4 heads of attention)",
            ["more sockets"],
        ),
    ],
)
def test_an_op_that_fits_no_kernel_is_named_with_fixes(tiny, model, overrides, problem, fixes):
    with pytest.raises(NoKernelFits) as exc:
        auto_map(tiny("prefill", *overrides, model=model))
    err = exc.value
    assert err.key == "kernels" and err.problem.startswith(problem)
    for fix in fixes:
        assert fix in (err.fix or ""), fix
    assert "smaller batch" not in (err.fix or "")  # prefill runs at batch 1 already


def test_plans_that_each_leave_an_op_unplaced_are_listed_with_their_op(tiny) -> None:
    """Decode on sockets of 52 kB: under each plan some op fits no kernel, not the same one
    under every plan; the first three plans are named with theirs, and a decode mapping is
    offered a smaller batch and SnapStream."""
    with pytest.raises(NoKernelFits) as exc:
        auto_map(tiny("decode", *small_sram(50)))
    err = exc.value
    head = (
        "no sharding plan fits every op of the dense layers in a kernel on one socket (batch 4): "
    )
    assert err.problem.startswith(head)
    named = err.problem.removeprefix(head).split("; ")
    assert len(named) == 3
    for entry in named:
        plan, rest = entry.split(": ", 1)
        assert plan.startswith("attention ") and "(SRAM: " in rest
    for fix in ("use a smaller batch", "enable snapstream", "more SRAM per socket"):
        assert fix in (err.fix or ""), fix


def test_when_no_finalist_compiles_the_best_ones_reason_is_given(tiny, monkeypatch) -> None:
    def refuse(rm, c, batch, objective, failures):
        failures.append(SpecError("kernel too big", key="kernels.dense", fix="split it"))
        return False

    monkeypatch.setattr(mapper, "_simulate", refuse)
    said: list[str] = []
    with pytest.raises(InfeasibleError) as exc:
        auto_map(tiny("decode"), progress=said.append)
    err = exc.value
    assert err.problem == (
        "the searched mappings do not compile (batch 4); the best one's problem: kernel too big"
    )
    assert (err.key, err.fix) == ("kernels.dense", "split it")
    assert said[-1] == "no legal mapping at batch 4"


def test_nothing_found_without_a_reason_says_what_was_searched(tiny) -> None:
    rm = tiny("decode")
    err = mapper._nothing_found(rm, Objective.STEP_TIME, SearchOptions(), [4], [])
    assert isinstance(err, InfeasibleError) and err.key == "kernels"
    assert err.problem == "no legal mapping found for objective step-time (batch 4)"
    assert "more sockets" in (err.fix or "")
    # an op that fits no kernel at the smallest batch tried is the reason worth giving
    first = NoKernelFits("at 8", key="kernels")
    last = NoKernelFits("at 4", key="kernels")
    other = SpecError("does not compile", key="kernels")
    assert (
        mapper._nothing_found(
            rm, Objective.STEP_TIME, SearchOptions(), [8, 4], [other, first, last]
        )
        is last
    )


# --- simulating a candidate ----------------------------------------------------------------------


def _candidate(kernels: dict[str, list[KernelSpec]]) -> MappingCandidate:
    return MappingCandidate(kernels=kernels, looped=False, estimate_s=0.0, plans={})


def test_a_simulated_candidate_keeps_its_program_result_and_score(decode, tiny) -> None:
    rm = tiny("decode")
    c = _candidate(decode.chosen.kernels)
    c.looped = decode.chosen.looped
    failures: list[SpecError] = []
    assert mapper._simulate(rm, c, 4, Objective.STEP_TIME, failures)
    assert failures == [] and c.program is not None and c.result is not None
    assert c.score == decode.chosen.score


def test_a_candidate_that_does_not_compile_or_fit_says_why(decode, tiny) -> None:
    rm = tiny("decode")
    ops = [op for k in decode.chosen.kernels["dense"] for op in k.ops]
    failures: list[SpecError] = []
    # one error: ops left out of every kernel
    partial = [k.model_copy(update={"ops": k.ops[:-1]}) for k in decode.chosen.kernels["dense"]]
    assert not mapper._simulate(
        rm, _candidate({"dense": partial}), 4, Objective.STEP_TIME, failures
    )
    assert "ops in no kernel" in failures[-1].problem
    # several errors (each op's degree does not divide the node): the first is kept
    thirds = [KernelSpec(name=op, ops=[op], sharding=Sharding(tp=3)) for op in ops]
    assert not mapper._simulate(rm, _candidate({"dense": thirds}), 4, Objective.STEP_TIME, failures)
    assert "degree 3 does not divide the node's 8 sockets" in failures[-1].problem
    assert failures[-1].key == f"kernels.dense.{ops[0]}.sharding.tp"
    # compiles, but a million sequences' KV cache overflows HBM
    c = _candidate(decode.chosen.kernels)
    assert not mapper._simulate(rm, c, 1 << 20, Objective.STEP_TIME, failures)
    assert failures[-1].key == "batch" and "of HBM per socket" in failures[-1].problem
    assert len(failures) == 3 and c.program is None and c.score is None


# --- ranking over the ensemble, and the gain against hand kernels ---------------------------------


def test_finalists_ranked_by_a_percentile_say_so(tiny) -> None:
    found = auto_map(tiny("decode"), SearchOptions(rank_by="p05", alternatives=2))
    assert found.summary()["ranked_by"] == "p05"
    for alt in found.alternatives:
        assert not better(found.objective, ranking(alt, "p05"), ranking(found.chosen, "p05"))


def test_without_an_ensemble_finalists_are_ranked_at_the_point(tiny, monkeypatch) -> None:
    monkeypatch.setattr(mapper, "shipped_ensemble", lambda: None)
    found = auto_map(tiny("decode"), SearchOptions(alternatives=2))
    assert found.summary()["ranked_by"] == "point"
    assert found.chosen.ensemble == []
    for alt in found.alternatives:
        assert alt.score is not None and found.chosen.score is not None
        assert alt.score >= found.chosen.score
    hand = with_kernels(tiny("decode"), found.chosen.kernels, found.chosen.looped)
    gain = gain_vs_hand(found, hand)
    assert gain["gain_vs_hand"] == {"p05": 1.0, "p50": 1.0, "p95": 1.0}
    assert gain["p_better"] == 0.0


def test_the_gain_against_the_picks_own_kernels_is_one_in_every_member(decode, tiny) -> None:
    hand = with_kernels(tiny("decode"), decode.chosen.kernels, decode.chosen.looped)
    gain = gain_vs_hand(decode, hand)
    assert gain["gain_vs_hand"] == pytest.approx({"p05": 1.0, "p50": 1.0, "p95": 1.0}, rel=1e-12)
    assert gain["p_better"] == 0.0  # the pick is better in no member: it is the same mapping
    assert gain["gain_at_point"] == pytest.approx(1.0, rel=1e-12)
    assert gain["hand_objective"] == decode.chosen.score


def test_the_gain_is_the_hands_step_over_the_picks(decode, tiny) -> None:
    """Against one kernel per op (many calls), the pick's step is shorter in every member."""
    ops = [op for k in decode.chosen.kernels["dense"] for op in k.ops]
    apart = {"dense": [KernelSpec(name=op, ops=[op]) for op in ops]}
    hand = with_kernels(tiny("decode"), apart, False)
    gain = gain_vs_hand(decode, hand)
    program = compile_mapping(hand, batch=4)
    step = simulate(program, hand.hardware).total_latency_s
    assert gain["hand_objective"] == step
    assert decode.chosen.score is not None
    assert gain["gain_at_point"] == pytest.approx(step / decode.chosen.score, rel=1e-12)
    assert 1.0 < gain["gain_vs_hand"]["p05"] <= gain["gain_vs_hand"]["p50"]
    assert gain["p_better"] == 1.0


def test_hand_kernels_that_do_not_run_at_the_picks_batch_are_noted(decode, tiny) -> None:
    rm = tiny("decode")
    broken = with_kernels(rm, {"dense": []}, False)
    assert gain_vs_hand(decode, broken) == {
        "note": "the hand kernels do not compile at batch 4: ops in no kernel: "
        + ", ".join(op for k in decode.chosen.kernels["dense"] for op in k.ops)
    }
    huge = dataclasses.replace(decode, batch=1 << 20)
    hand = with_kernels(rm, decode.chosen.kernels, decode.chosen.looped)
    assert gain_vs_hand(huge, hand) == {
        "note": f"the hand kernels do not fit HBM at batch {1 << 20}"
    }


def test_a_batch_max_search_hands_its_pick_s_capacity_to_the_report(tiny, monkeypatch) -> None:
    """The search compiles its pick at every power-of-two batch to see whether it holds a
    larger one; the report of a `batch: max` mapping takes that result rather than compiling
    them all again, and it is what `max_batch` finds."""
    from rdusim import api

    rm = tiny("decode", "batch=max", HBM_5MB)
    found = auto_map(rm)
    assert found.capacity is not None and found.capacity.mapping is found.mapping
    used: dict[int, float] = {}
    batch, program = max_batch(found.mapping, used)
    assert (found.capacity.batch, found.capacity.used) == (batch, used)
    kernels = [repr(k) for lp in program.all_layers() for k in lp.kernels]
    kept = found.capacity.program
    assert [repr(k) for lp in kept.all_layers() for k in lp.kernels] == kernels
    assert (kept.hbm, kept.ddr, kept.workload) == (program.hbm, program.ddr, program.workload)

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(api, "_compile", no_compile)
    run = api.run_resolved(rm, uncertainty=False)
    assert run.report["max_batch_size"] == batch
