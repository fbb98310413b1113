"""`rdusim.validation.paper`: every published cell is compared, flagged fitted or predicted, and
the null models are what they claim: a constant step (the fitted cells' mean) and a roofline.

The comparison runs once for the module; published figures come from the data files only.
"""

from __future__ import annotations

import pytest

from rdusim.validation import paper as pp
from rdusim.validation.cells import Cell
from rdusim.validation.data import facts, paper

PUB = paper()
TPS = PUB["table5"]["tokens_per_step"]


@pytest.fixture(scope="module")
def cells() -> dict[str, list[Cell]]:
    return pp.comparison_cells("all")


def by_item(cells: list[Cell]) -> dict[str, Cell]:
    return {c.item: c for c in cells}


def test_every_table4_share_is_compared_with_its_band(cells):
    items = by_item(cells["table4"])
    for name, value in PUB["table4"]["shares_percent"].items():
        c = items[name]
        assert (c.published, c.unit, c.fitted) == (value, "%", True)
        assert c.tolerance == pytest.approx(max(0.75, 0.15 * value))  # max(0.75 pp, 15%)
    bands = [c for c in cells["table4"] if c.table == "table4" and c.bound == "band"]
    assert sum(c.simulated for c in bands) == pytest.approx(100.0, abs=1e-6)


def test_every_table5_cell_is_compared(cells):
    items = by_item(cells["table5"])
    for row in PUB["table5"]["rows"]:
        label = f"{row['seq_len'] // 1024}K"
        for tag, name in (("no_ss", "no SnapStream"), ("ss", "SnapStream")):
            assert items[f"{label} max batch ({name})"].published == row[f"batch_{tag}"]
            t = items[f"{label} throughput ({name})"]
            assert t.published == row[f"tput_{tag}"]
            assert t.tolerance == pytest.approx(0.10 * row[f"tput_{tag}"])
        assert items[f"{label} improvement"].tolerance == pytest.approx(0.3)


def test_only_the_declared_cells_are_fitted(cells):
    fitted = {c.item for c in cells["table5"] if c.fitted and c.unit == "tokens/s"}
    assert fitted == {"128K throughput (SnapStream)", "32K throughput (no SnapStream)"}
    assert not any(c.fitted for c in cells["table5"] if c.unit in ("x", "MB"))
    # derived from fitted cells: the SnapStream kernels' sum and the overhead at Table 4's 128K
    fitted_text = {c.item for c in cells["table4"] if c.fitted and c.table != "table4"}
    assert fitted_text == {"prefill overhead at 128K"}
    assert by_item(cells["table4"])["SnapStream kernels (sum, must be below)"].fitted
    assert all(c.fitted for c in cells["looping"])


def test_the_two_fitted_table5_cells_are_one_configuration(cells):
    items = by_item(cells["table5"])
    a, b = items["128K throughput (SnapStream)"], items["32K throughput (no SnapStream)"]
    assert a.simulated == pytest.approx(b.simulated, rel=1e-12)


def test_null_constant_is_the_mean_published_step_of_the_fitted_cells(cells):
    rows = {r["seq_len"]: r for r in PUB["table5"]["rows"]}
    steps = [
        rows[131072]["batch_ss"] * TPS / rows[131072]["tput_ss"],
        rows[32768]["batch_no_ss"] * TPS / rows[32768]["tput_no_ss"],
    ]
    step = sum(steps) / 2
    items = by_item(cells["table5"])
    for row in PUB["table5"]["rows"]:
        label = f"{row['seq_len'] // 1024}K"
        for tag, name in (("no_ss", "no SnapStream"), ("ss", "SnapStream")):
            c = items[f"{label} throughput ({name})"]
            assert c.null_constant == pytest.approx(row[f"batch_{tag}"] * TPS / step)
        ratio = items[f"{label} improvement"].null_constant
        assert ratio == pytest.approx(row["batch_ss"] / row["batch_no_ss"])  # batches only


def test_null_roofline_is_traffic_or_flops_at_peak():
    run = pp.table5_run(32768, True)
    rows = {r["seq_len"]: r for r in PUB["table5"]["rows"]}
    from rdusim.api import run_mapping
    from rdusim.validation.data import mappings_dir

    rep = run_mapping(
        mappings_dir() / "r1_decode.yaml",
        ["seq_len=32768", "snapstream.enabled=true", "batch=max", *pp.table5_deployment()],
    )
    assert rep.result is not None
    hw = rep.mapping.hardware
    flops = sum(
        lp.count * lp.runs * sum(p.flops for k in lp.kernels for p in k.ops)
        for lp in rep.program.all_layers()
    )
    bound = max(
        rep.report["traffic_bytes"]["hbm"] / hw.socket.hbm.bandwidth,
        flops / hw.socket.peak_bf16_flops,
    )
    assert run["roofline_step_s"] == pytest.approx(bound, rel=1e-12)
    assert run["roofline_step_s"] < run["step_s"]  # the model never beats its roofline
    assert rows[32768]["batch_ss"] == run["batch"]


def test_null_summary_sums_squared_errors_of_predicted_table5_cells(cells):
    flat = [c for cs in cells.values() for c in cs]
    s = pp.null_summary(flat)
    predicted = [c for c in cells["table5"] if not c.fitted and c.null_constant is not None]
    assert s["cells"] == len(predicted) == 7  # 4 throughputs, 3 improvements
    assert s["sse_rdusim"] == pytest.approx(
        sum((c.simulated / c.published - 1) ** 2 for c in predicted)
    )
    assert s["sse_null_constant"] == pytest.approx(
        sum((c.null_constant / c.published - 1) ** 2 for c in predicted)
    )
    assert s["beats_both"] == (
        s["sse_rdusim"] < s["sse_null_constant"] and s["sse_rdusim"] < s["sse_null_roofline"]
    )


def test_naive_decode_cells_follow_listing_2(cells):
    """Slices of keys (576 wide) and values (512 wide), every slot but one, 4 sequences of the
    32K cache per socket (batch 64 over DP16), BF16."""
    items = by_item(cells["table5"])
    indexing = items["naive decode: indexing on chip"]
    assert indexing.simulated == pytest.approx(4 * (32768 - 1) * (576 + 512) * 2 / 1e6, rel=1e-12)
    assert indexing.published == 323.0
    ratio = items["naive decode: on-chip memory vs ring buffer"]
    assert ratio.published == 4.6 and ratio.simulated > 1


def test_looping_cell_reads_its_configuration_from_the_facts(cells):
    (c,) = cells["looping"]
    f = facts()["kernel_looping"]
    assert c.published == f["max_decode_speedup"]
    assert c.simulated == pytest.approx(pp.looping_speedup(), rel=1e-12)
    assert c.simulated > 1
