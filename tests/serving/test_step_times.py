"""Step times: the synthetic source, the interpolation grid, and times from the simulator (an
off-grid interpolation against a direct simulation, and the checks on a pair of mappings)."""

from __future__ import annotations

import pytest

from rdusim.api import run_mapping
from rdusim.errors import SpecError
from rdusim.serving.step_times import (
    DecodeGrid,
    LinearStepTimes,
    SimulatedStepTimes,
    grid_cache_lens,
    grid_slots,
    simulated_step_times,
)

# Interpolated decode steps agree with a direct simulation within this (measured: 2.5% at worst,
# between slot counts, where the experts a batch touches grow concavely).
INTERPOLATION_TOLERANCE = 0.03


def test_linear_step_times() -> None:
    t = LinearStepTimes(1.0, 0.5, 0.1, decode_per_slot_s=0.01, decode_per_token_s=0.001)
    assert t.prefill_s(4) == 3.0
    assert t.decode_step_s(2, 10) == pytest.approx(0.1 + 2 * (0.01 + 0.01))


def test_grid_is_exact_on_a_bilinear_function_and_clamps_outside() -> None:
    def f(b: float, c: float) -> float:
        return 2 + 3 * b + 5 * c + 7 * b * c

    slots, lens = (1, 2, 4, 8), (10, 20, 40)
    grid = DecodeGrid(slots, lens, tuple(tuple(f(b, c) for c in lens) for b in slots))
    for b, c in [(1, 10), (3, 15), (6, 33), (8, 40), (2.5, 39)]:
        assert grid(b, c) == pytest.approx(f(b, c))
    assert grid(100, 5) == pytest.approx(f(8, 10))  # clamped to the grid's corner
    with pytest.raises(ValueError):
        DecodeGrid((2, 1), lens, ((1.0,) * 3,) * 2)


def test_grid_points() -> None:
    assert grid_slots(64) == (1, 2, 4, 8, 16, 32, 64)
    assert grid_slots(48) == (1, 2, 4, 8, 16, 32, 48)
    assert grid_slots(1) == (1,)
    assert grid_cache_lens(32768, 129) == (2048, 8192, 16384, 24576, 32768)
    assert grid_cache_lens(1000, 500) == (500, 750, 1000)


@pytest.fixture(scope="module")
def r1() -> SimulatedStepTimes:
    return simulated_step_times("r1_prefill", "r1_decode")


def test_facts_of_the_papers_mappings(r1: SimulatedStepTimes) -> None:
    f = r1.facts
    assert (f.decode_slots, f.cache_len, f.max_sequence) == (64, 32768, 131072)
    assert f.tokens_per_step == pytest.approx(2.44)
    assert (f.prefill_len, f.prefill_batch, f.snapstream) == (131072, 1, True)
    assert f.kv_bytes_per_token == 70272  # rdusim model deepseek-r1
    off = simulated_step_times("r1_prefill", "r1_decode", ["snapstream.enabled=false"]).facts
    assert (off.decode_slots, off.cache_len) == (16, 131072)  # Table 5's max batches


def test_times_are_simulated_once_and_kept(r1: SimulatedStepTimes) -> None:
    assert simulated_step_times("r1_prefill", "r1_decode") is r1
    step = r1.decode_step_s(64, 32768)
    assert 0.05 < step < 0.2
    # the prefill graph's time is `rdusim map r1_prefill`'s time to first token, kept
    ttft = run_mapping("r1_prefill", uncertainty=False).report["total_latency_s"]
    assert r1.prefill_s(131072) == pytest.approx(ttft, rel=1e-12)


def test_interpolation_matches_a_direct_simulation_off_the_grid(r1: SimulatedStepTimes) -> None:
    """Bilinear between the four grid points around (24 slots, 20000 positions), against the
    decode graph simulated at exactly that shape."""
    slots, lens = (16, 32), (16384, 24576)
    corners = tuple(tuple(r1.decode_point_s(b, c) for c in lens) for b in slots)
    interpolated = DecodeGrid(slots, lens, corners)(24, 20000)
    direct = r1.decode_point_s(24, 20000)
    assert interpolated == pytest.approx(direct, rel=INTERPOLATION_TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize(("slots", "cache_len"), [(3, 5000), (12, 12000), (24, 20000), (48, 30000)])
def test_full_grid_matches_direct_simulations(
    r1: SimulatedStepTimes, slots: int, cache_len: int
) -> None:
    assert r1.decode_step_s(slots, cache_len) == pytest.approx(
        r1.decode_point_s(slots, cache_len), rel=INTERPOLATION_TOLERANCE
    )


def test_a_prefill_mapping_as_decode_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        SimulatedStepTimes("r1_decode", "r1_prefill", ())
    assert err.value.key == "phase" and "--prefill" in err.value.problem


def test_snapstream_must_agree(r1_mapping) -> None:
    path, _ = r1_mapping(("enabled: true", "enabled: false"))
    with pytest.raises(SpecError) as err:
        SimulatedStepTimes(str(path), "r1_decode", ())
    assert err.value.key == "snapstream.enabled"
    assert "decode mapping and not in the prefill" in err.value.problem


def test_compressed_lengths_must_agree(r1_mapping) -> None:
    path, _ = r1_mapping(("compression: 4", "compression: 8"))
    with pytest.raises(SpecError) as err:
        SimulatedStepTimes(str(path), "r1_decode", ())
    assert err.value.key == "snapstream.kv_len"
    assert "16384" in err.value.problem and "32768" in err.value.problem


def test_different_models_are_refused() -> None:
    with pytest.raises(SpecError) as err:
        SimulatedStepTimes("llama31_8b_prefill", "r1_decode", ())
    assert err.value.key == "model"


def test_a_prefill_node_holds_finished_caches_in_the_caches_tier() -> None:
    """With the KV cache in DDR, finished 8K caches (8192 x 131072 B over 16 sockets each)
    wait in the 1.5 TB of DDR a socket has, beside the one the prefill graph plans:
    1.5e12 / 67,108,864 - 1 = 22350 of them, by hand."""
    sets = ("seq_len=8192", "snapstream.enabled=false", "placement.kv_cache=ddr")
    times = SimulatedStepTimes("llama31_8b_prefill", "llama31_8b_decode", sets)
    per_cache = 8192 * 32 * 2 * 8 * 128 * 2 / 16
    assert times.facts.prefill_hold == int(1.5e12 // per_cache) - 1 == 22350
