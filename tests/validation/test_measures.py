"""`rdusim.validation.measures`: readings as the product of the open choices, `--set` strings,
the largest batch that fits, and each metric's arithmetic on hand-made runs."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.spec.hardware import load_hardware
from rdusim.uncertainty.parameters import with_values
from rdusim.validation.items import Item, Measure, Metric
from rdusim.validation.measures import ItemModel, Run, central, readings, setting

HW = load_hardware("sn40l-16")  # 64 GB of HBM a socket

# --- readings ------------------------------------------------------------------------------------


def test_no_choices_is_one_empty_reading():
    assert readings({}) == [()]


def test_readings_are_the_product_of_the_choices_in_order():
    got = readings({"orchestration": ["software", "hardware"], "seq_len": [2048, 8192, 65536]})
    assert got == [
        ("orchestration=software", "seq_len=2048"),
        ("orchestration=software", "seq_len=8192"),
        ("orchestration=software", "seq_len=65536"),
        ("orchestration=hardware", "seq_len=2048"),
        ("orchestration=hardware", "seq_len=8192"),
        ("orchestration=hardware", "seq_len=65536"),
    ]


def test_a_labelled_choice_is_its_list_of_settings():
    sockets = [[], ["hardware=sn40l-8", "kernels.dense.Decoder.sharding.tp=8"]]
    got = readings({"sockets": sockets, "kernel_looping": [True, False]})
    assert got == [
        ("kernel_looping=true",),
        ("kernel_looping=false",),
        ("hardware=sn40l-8", "kernels.dense.Decoder.sharding.tp=8", "kernel_looping=true"),
        ("hardware=sn40l-8", "kernels.dense.Decoder.sharding.tp=8", "kernel_looping=false"),
    ]


@settings(deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
)
def test_readings_count_and_order(sizes):
    choices = {f"k{i}": [f"v{i}_{j}" for j in range(n)] for i, n in enumerate(sizes)}
    got = readings(choices)
    assert len(got) == int(np.prod(sizes))
    assert len(set(got)) == len(got)
    # lexicographic in the choices' order: the last key changes fastest
    want = [
        tuple(f"k{i}=v{i}_{j}" for i, j in enumerate(combo))
        for combo in itertools.product(*(range(n) for n in sizes))
    ]
    assert got == want


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "snapstream.enabled=true"),
        (False, "snapstream.enabled=false"),
        (384, "snapstream.enabled=384"),
        (0.5, "snapstream.enabled=0.5"),
        ("all", "snapstream.enabled=all"),
    ],
)
def test_setting_formats_values_as_set_takes_them(value, text):
    assert setting("snapstream.enabled", value) == text


# --- the largest batch that fits -----------------------------------------------------------------


def fake_run(hbm_used=None, result=None, pricer=None, hw=HW) -> Run:
    map_run = SimpleNamespace(mapping=SimpleNamespace(hardware=hw), result=result)
    return Run("toy", (), map_run, pricer if pricer is not None else object(), hbm_used or {})


GB = 1e9
USED = {1: 20 * GB, 2: 30 * GB, 4: 50 * GB, 8: 59 * GB, 16: 61 * GB, 32: 90 * GB}


@pytest.mark.parametrize(
    ("fraction", "batch"),
    [
        (1.0, 16),  # 64 GB: 61 fits, 90 does not
        (0.95, 8),  # 60.8 GB: 61 no longer fits, 59 does
        (0.93, 8),  # 59.52 GB
        (0.92, 4),  # 58.88 GB: 59 does not fit
        (0.5, 2),  # 32 GB
        (0.3, 0),  # 19.2 GB: not even one
    ],
)
def test_max_batch_is_the_largest_batch_whose_hbm_fits(fraction, batch):
    assert fake_run(USED).max_batch(fraction) == batch


def test_max_batch_at_exactly_the_capacity_fits():
    assert fake_run({1: 32 * GB, 2: 64 * GB}).max_batch(0.5) == 1
    assert fake_run({1: 32 * GB, 2: 64 * GB}).max_batch(1.0) == 2


# --- metric arithmetic on hand-made runs ---------------------------------------------------------

EXTRAS = {
    Metric.SPEEDUP: {"base": ["kernel_looping=false"]},
    Metric.OVERHEAD: {"base": ["snapstream.enabled=false"]},
    Metric.SHARE: {"kernels": ["MHA", "Router"], "layer": "moe"},
    Metric.REQUEST_LATENCY_S: {"prefill": "r1_prefill", "input_tokens": 128, "output_tokens": 100},
}


def item(metric: Metric, **measure) -> Item:
    return Item(
        id="x",
        quantity="q",
        where="w",
        value=1.0,
        unit="u",
        precision=0.01,
        use="fit",
        measure=Measure(metric=metric, mapping="toy", **{**EXTRAS.get(metric, {}), **measure}),
    )


def result(total, tokens_per_step=1.0, throughput=0.0, kernels=None):
    kernels = kernels or {"MHA": 1.0}
    layer = SimpleNamespace(
        latency_s=sum(kernels.values()),
        kernels=[SimpleNamespace(name=n, latency_s=t) for n, t in kernels.items()],
    )
    return SimpleNamespace(
        total_latency_s=total,
        throughput_tokens_per_s=throughput,
        program=SimpleNamespace(tokens_per_step=tokens_per_step),
        layers={"moe": layer},
    )


def model(metric, roles_by_reading, own=1, over=1, **measure) -> ItemModel:
    """`roles_by_reading[(a, b, c)]` -> {role: Run}; one group reading unless given more."""
    n_group = 1 + max(a for a, _, _ in roles_by_reading)
    return ItemModel(
        "s/x",
        item(metric, **measure),
        "s/x",
        [()] * n_group,
        [()] * own,
        [()] * over,
        roles_by_reading,
    )


def one(metric, **roles) -> float:
    runs = {role: fake_run(result=r) for role, r in roles.items()}
    m = model(metric, {(0, 0, 0): runs})
    return m.point_value()


def test_total_tpot_per_user_and_throughput():
    r = result(0.02, tokens_per_step=2.5, throughput=1234.0)
    assert one(Metric.TOTAL_LATENCY_S, main=r) == 0.02
    assert one(Metric.TPOT_S, main=r) == pytest.approx(0.008)
    assert one(Metric.PER_USER, main=r) == pytest.approx(125.0)  # 2.5 tokens / 20 ms
    assert one(Metric.THROUGHPUT, main=r) == 1234.0


def test_speedup_is_base_over_main():
    # looping on: 8 ms a step; off: 20 ms: 2.5x
    assert one(Metric.SPEEDUP, main=result(0.008), base=result(0.020)) == pytest.approx(2.5)


def test_overhead_is_main_over_base_minus_one_in_percent():
    # SnapStream on: 103 ms; off: 100 ms: 3% overhead
    assert one(Metric.OVERHEAD, main=result(0.103), base=result(0.100)) == pytest.approx(3.0)
    assert one(Metric.OVERHEAD, main=result(0.09), base=result(0.100)) == pytest.approx(-10.0)


def test_share_sums_the_named_kernels_over_the_layer():
    kernels = {"QKV": 3.0, "MHA": 2.0, "Router": 1.0, "MoE FFN": 4.0}
    got = one(Metric.SHARE, main=result(1.0, kernels=kernels))
    assert got == pytest.approx(100 * (2.0 + 1.0) / 10.0)


def test_request_latency_is_prefill_plus_output_tokens_at_the_decode_pace():
    decode = result(0.02, tokens_per_step=2.0)  # 10 ms a token
    prefill = result(0.5)
    got = one(Metric.REQUEST_LATENCY_S, main=decode, prefill=prefill)
    assert got == pytest.approx(0.5 + 100 * 0.01)


def test_max_batch_reads_the_usable_fraction_from_theta_or_the_hardware():
    hw = with_values(HW, {"hbm_usable_fraction": 0.93})  # 59.52 GB
    run = fake_run(USED, result=result(1.0), hw=hw)
    m = model(Metric.MAX_BATCH, {(0, 0, 0): {"main": run}})
    assert m.point_value() == 8.0
    assert m.predict({"hbm_usable_fraction": 1.0})[0, 0] == 16.0
    assert m.predict({"hbm_usable_fraction": 0.5})[0, 0] == 2.0


class ScaledPricer:
    """Prices a run as its point total over the hardware's HBM efficiency (an HBM-bound run)."""

    def __init__(self, total: float) -> None:
        self.total = total

    def price(self, hw):
        return result(self.total / hw.calibration.hbm_efficiency)


def test_theta_reaches_the_pricer():
    run = fake_run(result=result(1.0), pricer=ScaledPricer(0.9))
    m = model(Metric.TOTAL_LATENCY_S, {(0, 0, 0): {"main": run}})
    assert m.predict(None)[0, 0] == 1.0  # the point: the simulation, not the pricer
    assert m.predict({"hbm_efficiency": 0.45})[0, 0] == pytest.approx(2.0)
    assert run.result({"hbm_efficiency": 0.9}).total_latency_s == pytest.approx(1.0)
    assert with_values(HW, {"hbm_efficiency": 0.45}).calibration.hbm_efficiency == 0.45


def test_predict_is_group_by_own_readings_maxed_over_choices():
    totals = {
        (0, 0, 0): 1.0,
        (0, 0, 1): 3.0,  # "up to": the larger of the two
        (0, 1, 0): 2.0,
        (0, 1, 1): 1.5,
        (1, 0, 0): 5.0,
        (1, 0, 1): 4.0,
        (1, 1, 0): 7.0,
        (1, 1, 1): 8.0,
    }
    runs = {k: {"main": fake_run(result=result(v))} for k, v in totals.items()}
    m = model(Metric.TOTAL_LATENCY_S, runs, own=2, over=2)
    got = m.predict(None)
    assert got.shape == (2, 2)
    assert got.tolist() == [[3.0, 2.0], [5.0, 8.0]]
    assert m.predict_reading(None, 1, 0) == 5.0
    assert m.point_value() == 3.0
    assert len(m.all_runs()) == 8


def test_a_run_shared_by_two_roles_is_priced_once():
    calls = []

    class Counting:
        def price(self, hw):
            calls.append(hw)
            return result(2.0)

    shared = fake_run(result=result(1.0), pricer=Counting())
    m = model(Metric.SPEEDUP, {(0, 0, 0): {"main": shared, "base": shared}})
    assert m.predict({"hbm_efficiency": 0.5})[0, 0] == 1.0
    assert len(calls) == 1


def test_central_is_the_geometric_mean_of_positive_values():
    assert central(np.array([[1.0, 4.0], [0.0, -2.0]])) == pytest.approx(2.0)
    assert central(np.array([2.0, 8.0, 4.0])) == pytest.approx(4.0)
    assert central(np.array([0.0])) == 0.0


# --- the runs validate prints --------------------------------------------------------------------


class RecordingRuns:
    """A stand-in for `Runs` that builds nothing: each run is its mapping and settings."""

    def get(self, mapping: str, sets, *, batches: bool = False):
        return SimpleNamespace(mapping=mapping, sets=tuple(sets))


def test_shipped_runs_are_the_runs_of_the_first_reading_validate_builds():
    """What `rdusim validate` prints for an item (`shipped_runs`) is the run `item_model` makes
    for its first group and own reading, over every choice its figure is the largest of."""
    from rdusim.validation.items import Use, shipped_evidence
    from rdusim.validation.measures import item_model, shipped_runs

    ev = shipped_evidence()
    for item_id in ev.ids(Use.FIT, Use.HOLDOUT):
        model = item_model(ev, item_id, RecordingRuns())  # type: ignore[arg-type]
        built = []
        for c in range(len(model.over_readings)):
            for role, run in model.runs[(0, 0, c)].items():
                entry = {"role": role, "mapping": run.mapping, "set": list(run.sets)}
                if entry not in built:
                    built.append(entry)
        assert shipped_runs(ev, item_id) == built, item_id
        assert built[0]["role"] == "main"


def test_shipped_runs_of_a_table5_cell_by_hand():
    """Table 5's 128K cell without SnapStream: its deployment (r1_decode_paper at batch=max),
    the cell's prompt and SnapStream setting, then the first reading of who issues the calls
    and which experts stream, as snapstream-paper.yaml writes them."""
    from rdusim.validation.items import shipped_evidence
    from rdusim.validation.measures import shipped_runs

    ev = shipped_evidence()
    assert shipped_runs(ev, "snapstream-paper/table5-throughput-128k-base") == [
        {
            "role": "main",
            "mapping": "r1_decode_paper",
            "set": [
                "batch=max",
                "seq_len=131072",
                "snapstream.enabled=false",
                "orchestration=software",
                "moe.expert_loading=all",
            ],
        }
    ]
    assert shipped_runs(ev, "snapstream-paper/socket-peak-bf16") == []  # context: no run
