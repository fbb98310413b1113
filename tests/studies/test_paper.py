"""`rdusim.studies.paper`: the SnapStream paper's Tables 4 and 5 and its text's figures as
comparison cells, one per evidence item of `snapstream-paper.yaml`, computed from the shipped
mappings under the shipped reading, each with the calibration ensemble's interval widened by the
model's discrepancy.

The comparison runs once for the module; every published figure is read from the evidence.
"""

from __future__ import annotations

import math

import pytest

from rdusim.api import run_mapping
from rdusim.report.cells import Cell
from rdusim.studies import paper as pp
from rdusim.uncertainty.ensemble import shipped_ensemble
from rdusim.validation.items import Bound, Use, shipped_evidence
from rdusim.validation.likelihood import sigma
from rdusim.validation.posterior import Z90
from tests.known_misses import KNOWN_MISSES

EV = shipped_evidence()
SRC = pp.SOURCE
PROMPTS = [(seq, tag, f"{seq // 1024}K") for seq, tag in pp.TABLE5_PROMPTS]
SIDES = (("base", "no SnapStream"), ("snap", "SnapStream"))


def item(name: str):
    return EV.item(f"{SRC}/{name}")


@pytest.fixture(scope="module")
def cells() -> dict[str, list[Cell]]:
    return pp.comparison_cells("all")


def by_label(cells: list[Cell]) -> dict[str, Cell]:
    return {c.item: c for c in cells}


def test_all_has_both_tables_and_the_text(cells) -> None:
    assert list(cells) == ["table4", "table5", "text"]
    flat = [c for cs in cells.values() for c in cs]
    assert len({c.item_id for c in flat}) == len(flat)  # one cell per evidence item
    assert all(c.item_id.startswith(f"{SRC}/") for c in flat)
    for name, cs in cells.items():
        assert all(c.table == name for c in cs)


def test_every_cell_carries_its_evidence(cells) -> None:
    """Published figure, bound, fitted flag and known-miss reason, all from the evidence item."""
    for c in (c for cs in cells.values() for c in cs):
        it = EV.item(c.item_id)
        scale = 1e-6 if it.unit == "B" else 1.0  # bytes are shown in MB
        assert c.published == pytest.approx(it.low * scale), c.item
        assert c.bound == it.bound.value, c.item
        assert c.high == pytest.approx(it.high * scale), c.item
        assert c.fitted is (it.use == Use.FIT), c.item
        assert c.known_miss == KNOWN_MISSES.get(c.item_id), c.item
        assert math.isfinite(c.simulated) and c.simulated > 0, c.item


def test_table4_is_the_shares_in_the_evidence_order(cells) -> None:
    t4 = cells["table4"]
    kernels = [c for c in t4 if c.bound == Bound.VALUE]
    assert [c.item_id for c in kernels] == [f"{SRC}/{i}" for i in pp.TABLE4]
    for c in kernels:
        m = EV.item(c.item_id).measure
        assert m is not None and m.kernels is not None
        assert c.item == m.kernels[0] and c.unit == "%" and c.fitted
        assert c.p05 is not None and c.p95 is not None
        assert 0 < c.p05 < c.simulated < c.p95
    # the seven kernels are the whole MoE layer
    assert sum(c.simulated for c in kernels) == pytest.approx(100.0, abs=1e-6)


def test_table4_shares_are_the_prefill_runs(cells) -> None:
    """Each share is the shipped prefill mapping's, under the deployment's settings."""
    mapping, sets = pp.shipped_sets(EV, f"{SRC}/{pp.TABLE4[0]}")
    assert mapping == EV.deployment(f"{SRC}/{pp.TABLE4[0]}").mapping
    report = run_mapping(mapping, sets).report
    shares = {k["name"]: 100.0 * k["share"] for k in report["layers"]["moe"]["kernels"]}
    for c in cells["table4"]:
        if c.bound == Bound.VALUE:
            assert c.simulated == pytest.approx(shares[c.item], rel=1e-12), c.item


def test_the_snapstream_kernels_sum_is_bounded_above(cells) -> None:
    t4 = by_label(cells["table4"])
    total = t4["SnapStream kernels (sum, must be below)"]
    parts = [t4[k] for k in pp.SNAPSTREAM_KERNELS]
    bound = item(pp.SNAPSTREAM_SUM)
    assert (total.bound, total.published, total.fitted) == ("upper", bound.low, False)
    assert total.item_id == f"{SRC}/{pp.SNAPSTREAM_SUM}"
    assert total.simulated == pytest.approx(sum(c.simulated for c in parts))
    assert total.p05 == pytest.approx(sum(c.p05 for c in parts))
    assert total.p95 == pytest.approx(sum(c.p95 for c in parts))


def test_table5_has_five_cells_per_prompt(cells) -> None:
    t5 = by_label(cells["table5"])
    assert len(cells["table5"]) == 5 * len(PROMPTS)
    for _, tag, label in PROMPTS:
        for suffix, name in SIDES:
            batch = t5[f"{label} max batch ({name})"]
            assert batch.item_id == f"{SRC}/table5-maxbatch-{tag}-{suffix}"
            assert batch.published == item(f"table5-maxbatch-{tag}-{suffix}").value
            assert batch.unit == "seqs" and batch.p05 is None and batch.p95 is None
            tput = t5[f"{label} throughput ({name})"]
            assert tput.item_id == f"{SRC}/table5-throughput-{tag}-{suffix}"
            assert tput.published == item(f"table5-throughput-{tag}-{suffix}").value
            assert tput.unit == "tokens/s"
            assert tput.p05 is not None and tput.p95 is not None
            assert tput.p05 < tput.simulated < tput.p95
        imp = t5[f"{label} improvement"]
        assert imp.item_id == f"{SRC}/table5-improvement-{tag}"
        assert (imp.published, imp.unit, imp.fitted) == (
            item(f"table5-improvement-{tag}").value,
            "x",
            False,
        )


def k90(item_id: str) -> float:
    """How far a 90% predictive interval reaches beyond a point: exp(Z90 * sigma), the model's
    discrepancy with the item's printed precision."""
    ensemble = shipped_ensemble()
    assert ensemble is not None
    return math.exp(Z90 * sigma(EV.item(item_id), ensemble.discrepancy))


def test_table5_improvement_is_the_ratio_of_its_throughputs(cells) -> None:
    """The parameters move both throughputs alike, so the ratio's interval is the noise alone
    around it (not the ratio of the two throughputs' intervals)."""
    t5 = by_label(cells["table5"])
    for _, _, label in PROMPTS:
        ss, no = t5[f"{label} throughput (SnapStream)"], t5[f"{label} throughput (no SnapStream)"]
        imp = t5[f"{label} improvement"]
        ratio = ss.simulated / no.simulated
        assert imp.simulated == pytest.approx(ratio, rel=1e-12)
        k = k90(ss.item_id)
        assert (imp.p05, imp.p95) == pytest.approx((ratio / k, ratio * k), rel=1e-12)
        assert imp.p95 / imp.p05 < (ss.p95 / ss.p05) * (no.p95 / no.p05)


def test_table5_max_batch_grows_with_snapstream(cells) -> None:
    t5 = by_label(cells["table5"])
    for _, _, label in PROMPTS:
        base = t5[f"{label} max batch (no SnapStream)"].simulated
        snap = t5[f"{label} max batch (SnapStream)"].simulated
        assert snap > base >= 1 and math.log2(base).is_integer() and math.log2(snap).is_integer()


def test_the_two_cells_of_one_configuration_agree(cells) -> None:
    """128K with SnapStream and 32K without both hold a 32K cache at the same batch."""
    t5 = by_label(cells["table5"])
    a, b = t5["128K throughput (SnapStream)"], t5["32K throughput (no SnapStream)"]
    assert (
        t5["128K max batch (SnapStream)"].simulated == t5["32K max batch (no SnapStream)"].simulated
    )
    assert a.simulated == pytest.approx(b.simulated, rel=1e-12)


def test_intervals_are_the_ensemble_widened_by_the_discrepancy(cells) -> None:
    """A throughput cell's interval is its run's ensemble interval, each end moved out by
    exp(Z90 * sigma): the model's discrepancy with the item's precision."""
    item_id = f"{SRC}/table5-throughput-128k-snap"
    mapping, sets = pp.shipped_sets(EV, item_id)
    assert mapping == "r1_decode_paper" and "batch=max" in sets
    report = run_mapping(mapping, sets).report
    q = report["intervals"]["throughput_tokens_per_s"]
    k = k90(item_id)
    assert k > 1
    c = next(c for c in cells["table5"] if c.item_id == item_id)
    assert c.simulated == pytest.approx(report["throughput_tokens_per_s"], rel=1e-12)
    assert c.p05 == pytest.approx(q["p05"] / k, rel=1e-12)
    assert c.p95 == pytest.approx(q["p95"] * k, rel=1e-12)


def test_a_figure_no_parameter_moves_gets_the_noise_around_its_point(cells) -> None:
    """On-chip sizes and the prefill overhead's run pair have no ensemble spread: their
    interval is the point widened by the noise alone. A maximum batch has none at all."""
    for c in cells["text"]:
        k = k90(c.item_id)
        assert (c.p05, c.p95) == pytest.approx((c.simulated / k, c.simulated * k), rel=1e-9)
    assert all(c.p05 is None for c in cells["table5"] if "max batch" in c.item)


def test_text_cells(cells) -> None:
    text = by_label(cells["text"])
    overhead = text["prefill overhead (128K)"]
    prefill = item("prefill-overhead")
    assert (overhead.bound, overhead.published, overhead.high) == (
        "range",
        prefill.low,
        prefill.high,
    )
    assert overhead.fitted and overhead.unit == "%"
    ratio = text["naive decode: on-chip memory vs ring buffer"]
    assert ratio.published == item("naive-decode-onchip-memory").value
    assert ratio.simulated > 1 and not ratio.fitted  # held out: predicted, never fitted


def test_naive_indexing_follows_listing_2(cells) -> None:
    """Slices of keys (576 wide) and values (512 wide), every slot but one, of a 32K compressed
    cache, for the 4 sequences per socket of batch 64 over DP16, BF16; shown in MB."""
    c = by_label(cells["text"])["naive decode: indexing on chip"]
    assert c.unit == "MB"
    assert c.simulated == pytest.approx(4 * (32768 - 1) * (576 + 512) * 2 / 1e6, rel=1e-12)
    assert c.published == pytest.approx(item("naive-indexing-sram").value / 1e6)


def test_one_table_runs_alone(cells) -> None:
    only = pp.comparison_cells("table4")
    assert list(only) == ["table4"]
    assert [(c.item, c.simulated) for c in only["table4"]] == [
        (c.item, c.simulated) for c in cells["table4"]
    ]


def test_shipped_sets_are_the_deployment_then_the_measure() -> None:
    item_id = f"{SRC}/table5-maxbatch-64k-base"
    dep = EV.deployment(item_id)
    m = EV.item(item_id).measure
    assert dep is not None and m is not None
    assert pp.shipped_sets(EV, item_id) == (dep.mapping, [*dep.set, *m.set])
    naive = f"{SRC}/naive-indexing-sram"  # a measure that names its mapping itself
    m = EV.item(naive).measure
    assert m is not None and EV.deployment(naive) is None
    assert pp.shipped_sets(EV, naive) == (m.mapping, m.set)


def test_meta_names_the_source_and_the_interval() -> None:
    ensemble = shipped_ensemble()
    assert ensemble is not None
    meta = pp.meta()
    assert meta["source"] == EV.source_of(f"{SRC}/{pp.TABLE4[0]}").title
    assert "90%" in meta["interval"] and f"{ensemble.discrepancy:.3f}" in meta["interval"]
    assert pp.caption("table4") and pp.caption("table5") and pp.caption("text") == ""
