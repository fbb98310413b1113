"""What a search optimises: the default objective of a mapping, the checks of an objective against
the mapping's phase and a latency bound, and how a simulated program scores."""

from __future__ import annotations

import pytest

from rdusim.compiler.compile import compile_mapping
from rdusim.errors import SpecError
from rdusim.ir.graph import Phase
from rdusim.search.objective import (
    Objective,
    better,
    check_objective,
    default_objective,
    score,
)
from rdusim.sim.model import simulate


def test_each_objective_has_its_phase_direction_and_report_field() -> None:
    assert [o.phase for o in Objective] == [Phase.PREFILL, *[Phase.DECODE] * 3]
    searches = {o for o in Objective if o.searches_batch}
    assert searches == {Objective.THROUGHPUT, Objective.THROUGHPUT_UNDER_LATENCY}
    assert {o for o in Objective if o.maximises} == searches
    assert {o.report_key for o in searches} == {"throughput_tokens_per_s"}
    assert Objective.TTFT.report_key == Objective.STEP_TIME.report_key == "total_latency_s"


def test_the_default_objective_follows_the_phase_and_batch(tiny) -> None:
    assert default_objective(tiny("prefill").spec) == Objective.TTFT
    assert default_objective(tiny("decode").spec) == Objective.STEP_TIME
    assert default_objective(tiny("decode", "batch=max").spec) == Objective.THROUGHPUT


def test_an_objective_of_the_other_phase_is_refused_with_the_ones_that_fit(tiny) -> None:
    with pytest.raises(SpecError) as exc:
        check_objective(Objective.TTFT, tiny("decode").spec, None)
    err = exc.value
    assert err.key == "--objective"
    assert err.problem == "objective 'ttft' is for prefill, and this mapping is decode"
    assert err.fix == "use one of: step-time, throughput, throughput-under-latency"
    with pytest.raises(SpecError) as exc:
        check_objective(Objective.THROUGHPUT, tiny("prefill").spec, None)
    assert exc.value.fix == "use one of: ttft"


def test_a_latency_bound_and_its_objective_come_together(tiny) -> None:
    decode, prefill = tiny("decode").spec, tiny("prefill").spec
    check_objective(Objective.THROUGHPUT_UNDER_LATENCY, decode, 0.05)
    check_objective(Objective.STEP_TIME, decode, None)
    with pytest.raises(SpecError) as exc:
        check_objective(Objective.THROUGHPUT_UNDER_LATENCY, decode, None)
    assert exc.value.key == "--latency-bound"
    assert "needs a bound on the step time" in exc.value.problem
    with pytest.raises(SpecError) as exc:
        check_objective(Objective.THROUGHPUT, decode, 0.05)
    assert exc.value.problem == (
        "--latency-bound applies to objective 'throughput-under-latency', not 'throughput'"
    )
    assert exc.value.fix == "add --objective throughput-under-latency, or drop --latency-bound"
    with pytest.raises(SpecError) as exc:
        check_objective(Objective.TTFT, prefill, 0.05)
    assert exc.value.fix is not None and exc.value.fix.startswith("drop --latency-bound")


def test_a_program_scores_its_time_or_its_tokens_per_second(tiny) -> None:
    rm = tiny("decode", "kernels=auto")
    program = compile_mapping(rm, batch=4)
    result = simulate(program, rm.hardware)
    step = result.total_latency_s
    assert score(Objective.STEP_TIME, program, result) == step
    assert score(Objective.THROUGHPUT, program, result) == 4 * program.tokens_per_step / step
    assert better(Objective.STEP_TIME, 1.0, 2.0) and not better(Objective.STEP_TIME, 2.0, 1.0)
    assert better(Objective.THROUGHPUT, 2.0, 1.0) and not better(Objective.THROUGHPUT, 1.0, 2.0)
