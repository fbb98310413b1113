"""A kernel's time: call costs per orchestration and topology, the pipeline extrapolated to the
real tile count, and looped calls; each against a closed form or a brute-force simulation."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from rdusim.api import run_mapping
from rdusim.compiler.program import Kernel, Program
from rdusim.cost.calls import call_cost, call_parts
from rdusim.sim.engine import simulate_pipeline
from rdusim.sim.kernel import extrapolate, time_kernel
from rdusim.sim.model import simulate
from rdusim.spec.hardware import Hardware, load_hardware
from tests.kernels import sized_kernel

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"
REL = 1e-9


@cache
def compiled(mapping: str, overrides: tuple[str, ...]) -> tuple[Program, Hardware]:
    run = run_mapping(MAPPINGS / f"{mapping}.yaml", list(overrides), simulate_it=False)
    return run.program, run.mapping.hardware


def with_links(hw: Hardware, **links: object) -> Hardware:
    return hw.model_copy(update={"links": hw.links.model_copy(update=links)})


# ------------------------------------------------------------------ calls


def hand_call(k: Kernel, hw: Hardware, rounds: int, host: bool) -> float:
    """Program load + argument load + `rounds` barrier rounds (+ the host's round trip)."""
    socket, cal = hw.socket, hw.calibration
    program = k.pcus * socket.config_bytes_per_pcu + k.pmus * socket.config_bytes_per_pmu
    return (
        program / cal.config_bandwidth
        + cal.argument_load_s
        + rounds * hw.links.p2p_latency_s
        + (cal.host_round_trip_s if host else 0.0)
    )


SIZES = [(0, 1), (2, 7), (100, 300), (1040, 1040)]


@pytest.mark.parametrize("preset", ["sn40l-16", "sn40l-8"])
@pytest.mark.parametrize(("pcus", "pmus"), SIZES)
def test_software_call_is_the_hardware_call_plus_the_host_round_trip(preset, pcus, pmus):
    hw = load_hardware(preset)
    k = sized_kernel(pcus, pmus)
    extra = call_cost(k, hw, "software") - call_cost(k, hw, "hardware")
    assert extra == pytest.approx(hw.calibration.host_round_trip_s, rel=1e-9)
    assert extra > 0


@pytest.mark.parametrize("preset", ["sn40l-16", "sn40l-8"])
@pytest.mark.parametrize(("pcus", "pmus"), SIZES)
def test_hardware_call_adds_one_barrier_round_when_fully_connected(preset, pcus, pmus):
    hw = load_hardware(preset)
    k = sized_kernel(pcus, pmus)
    expected = hand_call(k, hw, rounds=1, host=False)
    assert call_cost(k, hw, "hardware") == pytest.approx(expected, rel=REL)
    assert call_cost(k, hw, "software") == pytest.approx(
        hand_call(k, hw, rounds=1, host=True), rel=REL
    )


@pytest.mark.parametrize("preset", ["sn40l-16", "sn40l-8"])
def test_hardware_call_on_a_ring_waits_d_minus_1_rounds(preset):
    hw = with_links(load_hardware(preset), topology="ring")
    d = hw.sockets
    k = sized_kernel(100, 300)
    expected = hand_call(k, hw, rounds=d - 1, host=False)
    assert call_cost(k, hw, "hardware") == pytest.approx(expected, rel=REL)
    assert call_parts(k, hw, "hardware").barrier_s == pytest.approx(
        (d - 1) * hw.links.p2p_latency_s, rel=REL
    )


def test_program_load_is_in_proportion_to_pcus_and_pmus():
    """Configuration bytes over the configuration bandwidth: linear in each unit count, zero for
    a kernel that configures nothing; the other parts do not depend on the kernel."""
    hw = load_hardware("sn40l-16")
    socket, bw = hw.socket, hw.calibration.config_bandwidth
    per_pcu, per_pmu = socket.config_bytes_per_pcu / bw, socket.config_bytes_per_pmu / bw
    loads = {}
    for pcus, pmus in [(0, 0), (1, 0), (0, 1), (10, 0), (0, 10), (10, 20), (20, 40)]:
        parts = call_parts(sized_kernel(pcus, pmus), hw, "software")
        loads[pcus, pmus] = parts.program_load_s
        assert parts.program_load_s == pytest.approx(pcus * per_pcu + pmus * per_pmu, rel=REL)
        assert parts.argument_load_s == hw.calibration.argument_load_s
        assert parts.host_round_trip_s == hw.calibration.host_round_trip_s
        assert parts.total_s == pytest.approx(
            parts.program_load_s
            + parts.argument_load_s
            + parts.barrier_s
            + parts.host_round_trip_s,
            rel=REL,
        )
    assert loads[0, 0] == 0.0
    assert loads[10, 0] == pytest.approx(10 * loads[1, 0], rel=REL)
    assert loads[0, 10] == pytest.approx(10 * loads[0, 1], rel=REL)
    assert loads[20, 40] == pytest.approx(2 * loads[10, 20], rel=REL)
    assert loads[10, 20] == pytest.approx(loads[10, 0] + 2 * loads[0, 10], rel=REL)


@pytest.mark.parametrize("orchestration", ["software", "hardware"])
def test_a_small_kernels_call_is_cheaper_than_a_large_ones(orchestration):
    """R1 prefill: the Streaming Ring Buffer gathers (a few units) loads far less program than
    MHA (the whole socket); the difference is exactly their configuration bytes."""
    program, hw = compiled("r1_prefill", ("seq_len=8192",))
    kernels = {k.name: k for k in program.layers["moe"].kernels}
    small, large = kernels["Streaming Ring Buffer"], kernels["MHA"]
    assert small.pcus + small.pmus < (large.pcus + large.pmus) / 10
    cheap, dear = call_cost(small, hw, orchestration), call_cost(large, hw, orchestration)
    assert cheap < dear
    socket = hw.socket
    extra = (large.pcus - small.pcus) * socket.config_bytes_per_pcu + (
        large.pmus - small.pmus
    ) * socket.config_bytes_per_pmu
    assert dear - cheap == pytest.approx(extra / hw.calibration.config_bandwidth, rel=1e-9)


# ------------------------------------------------------------------ tile extrapolation


def test_extrapolate_is_exact_on_a_line():
    a, b = 2.0, 96.0
    line = lambda n: a + b / n  # noqa: E731
    assert extrapolate(line(32), 32, line(64), 64, 4096) == pytest.approx(line(4096), rel=REL)
    assert extrapolate(line(8), 8, line(16), 16, 16) == pytest.approx(line(16), rel=REL)


def test_extrapolate_keeps_the_fine_value_when_finer_tiles_do_not_help():
    assert extrapolate(1.0, 32, 1.5, 64, 4096) == 1.5
    assert extrapolate(2.0, 32, 2.0, 64, 4096) == 2.0


@pytest.mark.parametrize("seq_len", [4096, 8192])
def test_fill_and_drain_at_short_prompts_match_the_real_tile_count(seq_len):
    """The extrapolated pipeline of every R1 prefill kernel is within 3% of a simulation at
    its real tile count (4096 tokens: 128 tiles of 32 rows)."""
    program, hw = compiled("r1_prefill", (f"seq_len={seq_len}",))
    for lp in program.layers.values():
        for k in lp.kernels:
            assert k.tiles == seq_len // 32
            brute = simulate_pipeline(k, hw, tiles=k.tiles).pipeline_s
            t = time_kernel(k, hw)
            assert t.pipeline_s == pytest.approx(brute, rel=0.03), (lp.kind, k.name)


def test_short_prompt_ttft_follows_the_prompt():
    """At 4K a prompt is 128 tiles, so fill and drain no longer dominate: a 4K prompt costs
    less than 1/16 of a 64K one plus the fixed per-layer calls."""
    short = run_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=4096"]).result
    long = run_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=65536"]).result
    assert short is not None and long is not None
    calls = short.kernel_call_time_s
    assert short.total_latency_s - calls < (long.total_latency_s - calls) / 16 * 1.2


# ------------------------------------------------------------------ looping


LLAMA = ("llama31_8b_decode", ("batch=1", "seq_len=8192", "snapstream.enabled=false"))


def test_looped_time_matches_chained_simulation():
    """A looped call's N executions = one pipeline + (N-1) periods; brute force: simulate N
    chained iterations."""
    program, hw = compiled(*LLAMA)
    (k,) = program.layers["dense"].kernels
    t = time_kernel(k, hw, orchestration="hardware", looped_executions=6)
    brute = simulate_pipeline(k, hw, iterations=6).pipeline_s
    # iterations are chained until the period settles, and what the settling iterations add
    # beyond it is kept: the sum matches the brute force to rounding
    assert t.call_time_s - t.call_s == pytest.approx(brute, rel=1e-9)
    assert t.call_s == pytest.approx(hand_call(k, hw, rounds=1, host=False), rel=REL)
    assert t.latency_s == pytest.approx(t.call_time_s / 6, rel=REL)
    assert t.call_share_s == pytest.approx(t.call_s / 6, rel=REL)


def test_looping_saves_calls_and_overlaps_iterations():
    program, hw = compiled(*LLAMA)
    looped = simulate(program, hw)
    plain_prog, _ = compiled(LLAMA[0], (*LLAMA[1], "kernel_looping=false"))
    plain = simulate(plain_prog, hw)
    layers = program.layers["dense"].count
    assert looped.layers["dense"].calls == 1
    assert plain.layers["dense"].calls == layers
    # one AGCU-issued call of the layer's kernel (the same kernel either way)
    assert program.orchestration == plain_prog.orchestration == "hardware"
    (kernel,) = program.layers["dense"].kernels
    call = hand_call(kernel, hw, rounds=1, host=False)
    saved = plain.layers["dense"].total_s - looped.layers["dense"].total_s
    # at least the calls it saves; at most the calls plus every iteration's fill and drain
    (kl,) = looped.layers["dense"].kernels
    assert saved >= (layers - 1) * call * (1 - REL)
    overlap = (
        (kl.pipeline_s - kl.second_s) + (layers - 2) * (kl.pipeline_s - kl.period_s) - kl.settle_s
    )
    assert saved == pytest.approx((layers - 1) * call + overlap, rel=1e-9)
    assert kl.period_s < kl.pipeline_s  # the next layer's weights stream during this one


def test_layer_total_counts_calls_and_executions():
    program, hw = compiled("r1_decode", ("batch=16", "seq_len=8192"))
    assert program.orchestration == "software"
    result = simulate(program, hw)
    for kind, lr in result.layers.items():
        lp = program.layers[kind]
        per_layer = sum(k.call_s + k.pipeline_s for k in lr.kernels)
        assert lr.total_s == pytest.approx(lp.count * per_layer, rel=REL)
        assert lr.calls == lp.count * len(lp.kernels)
        # host-issued calls (the mapping's orchestration), each its own kernel's cost
        calls = sum(hand_call(k, hw, rounds=1, host=True) for k in lp.kernels)
        assert lr.call_time_s == pytest.approx(lp.count * calls, rel=REL)
        for k, timing in zip(lp.kernels, lr.kernels, strict=True):
            assert timing.call_s == pytest.approx(hand_call(k, hw, 1, True), rel=REL)
    assert result.kernel_calls == sum(lp.calls for lp in program.all_layers())


# ------------------------------------------------------------------ pipeline runs kept


def _counting_engine(monkeypatch) -> list[tuple[int, int]]:
    import rdusim.sim.kernel as kernel_module

    kernel_module.clear_runs()
    calls: list[tuple[int, int]] = []
    real = kernel_module.simulate_pipeline

    def counting(k, hw, **kw):
        calls.append((kw["tiles"], kw["iterations"]))
        return real(k, hw, **kw)

    monkeypatch.setattr(kernel_module, "simulate_pipeline", counting)
    return calls


def test_a_pipeline_run_is_kept_by_every_part_of_what_the_engine_reads(monkeypatch):
    """Change one part of a run's key (an op's field, a collective, the edges, the kernel's
    prefetch in a looped run, the hardware, the tiles simulated, iterations) and the engine
    runs again, to another answer (on more sockets: again, to the same answer, since they run
    alike); parts it does not read (the kernel's name, its SRAM plan, its own tile count when
    the tiles to simulate are given, its prefetch in one iteration) share the run."""
    import dataclasses

    from rdusim.sim.kernel import _run

    program, hw = compiled(*LLAMA)
    (k,) = program.layers["dense"].kernels
    calls = _counting_engine(monkeypatch)
    base = _run(k, hw, tiles=16, iterations=2)
    assert _run(k, hw, tiles=16, iterations=2) is base and len(calls) == 1
    op = dataclasses.replace(k.ops[0], flops=k.ops[0].flops * 50 + 1e12)
    link = dataclasses.replace(k.collectives[0], bytes=k.collectives[0].bytes * 9 + 1e8)
    slow = hw.model_copy(
        update={"calibration": hw.calibration.model_copy(update={"hbm_efficiency": 0.2})}
    )
    changed = [
        _run(dataclasses.replace(k, ops=[op, *k.ops[1:]]), hw, tiles=16, iterations=2),
        _run(
            dataclasses.replace(k, collectives=[link, *k.collectives[1:]]),
            hw,
            tiles=16,
            iterations=2,
        ),
        _run(dataclasses.replace(k, edges=[]), hw, tiles=16, iterations=2),
        _run(
            dataclasses.replace(k, prefetch_iteration=not k.prefetch_iteration),
            hw,
            tiles=16,
            iterations=2,
        ),
        _run(k, slow, tiles=16, iterations=2),
        _run(k, hw, tiles=8, iterations=2),
        _run(k, hw, tiles=16, iterations=3),
    ]
    assert len(calls) == 1 + len(changed)
    assert all(repr(r) != repr(base) for r in changed)
    assert repr(_run(k, hw, tiles=16, iterations=2, sockets=2)) == repr(base)
    assert len(calls) == 2 + len(changed)
    same = [
        dataclasses.replace(k, name="other"),
        dataclasses.replace(k, sram_bytes=k.sram_bytes * 2),
        dataclasses.replace(k, tiles=k.tiles // 4),
    ]
    for other in same:
        assert _run(other, hw, tiles=16, iterations=2) is base
        assert repr(simulate_pipeline(other, hw, tiles=16, iterations=2)) == repr(base)
    one = _run(k, hw, tiles=16)
    flipped = dataclasses.replace(k, prefetch_iteration=not k.prefetch_iteration)
    assert _run(flipped, hw, tiles=16) is one
    assert repr(simulate_pipeline(flipped, hw, tiles=16)) == repr(one)
    assert len(calls) == 3 + len(changed)


def test_a_looped_kernel_shares_its_first_iteration_with_its_unlooped_form(monkeypatch):
    from rdusim.compiler.compile import looped_form

    program, hw = compiled("llama31_8b_decode", ("batch=1", "seq_len=8192", "kernel_looping=false"))
    (k,) = program.layers["dense"].kernels
    looped = looped_form(k, hw)
    assert looped.prefetch_iteration and not k.prefetch_iteration
    calls = _counting_engine(monkeypatch)
    alone = time_kernel(k, hw)
    ran = len(calls)
    in_a_loop = time_kernel(looped, hw, looped_executions=4)
    assert in_a_loop.pipeline_s == alone.pipeline_s
    assert (64, 1) not in calls[ran:] and (64, 2) in calls[ran:]
