"""The auto-mapper explains itself: each boundary's reason names the ops at it and prints its
times in the unit that suits them; the runner-ups say how they differ from the chosen mapping;
the README defines every sharding plan's name."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from rdusim.api import run_mapping
from rdusim.compiler.compile import compile_context, layer_workload
from rdusim.ir.graph import Phase
from rdusim.ir.model import build_model
from rdusim.report.mapping_report import render_map_report
from rdusim.search.costing import analytic_cost
from rdusim.search.layer import LayerSearch, duration
from rdusim.search.mapper import SearchOptions
from rdusim.search.space import AttentionPlacement, ExpertPlacement
from rdusim.spec.mapping import load_mapping, snapstream_sizes

README = Path(__file__).resolve().parents[2] / "README.md"


@cache
def llama_prefill_auto() -> dict[str, Any]:
    run = run_mapping("llama31_8b_prefill", ["kernels=auto"], search=SearchOptions(alternatives=2))
    return run.report


def prefill_search() -> LayerSearch:
    rm = load_mapping("llama31_8b_prefill", [])
    graph = build_model(rm.model, Phase.PREFILL, snapstream_sizes(rm.spec, None)).layers["dense"]
    return LayerSearch(
        graph, "dense", layer_workload(rm, 1), compile_context(rm), analytic_cost, "software"
    )


def test_durations_are_printed_in_their_unit() -> None:
    assert duration(0.100937) == "100.937 ms"
    assert duration(2.5) == "2.500 s"
    assert duration(8.301e-4) == "830.1 us"


def test_each_boundary_names_its_ops_and_gives_milliseconds_as_ms() -> None:
    bounds = llama_prefill_auto()["auto_mapping"]["boundaries"]["dense"]
    assert bounds
    for b in bounds:
        assert b["after"] in b["detail"] and b["before"] in b["detail"], b
        for value in re.findall(r"([0-9.]+) us\b", b["detail"]):
            assert float(value) < 1000, b  # a thousand microseconds are printed as ms
        assert re.search(r"[0-9] ms vs [0-9.]+ ms apart", b["detail"]), b


def test_a_blocking_op_is_blamed_only_for_the_ops_that_need_its_output() -> None:
    s = prefill_search()
    i = s.order.index
    # snapkv_reduce sums what the (blocking) softmax emits: it would wait for it
    assert s._blocked_by(i("snapkv_qk"), i("snapkv_reduce"), i("snapkv_reduce") + 1) == (
        "snapkv_reduce",
        "snapkv_softmax",
    )
    # o_proj takes attention's output, which does not depend on SnapKV's selection
    assert s._blocked_by(i("snapkv_qk"), i("o_proj"), i("o_proj") + 1) is None


def test_runner_ups_show_what_differs_from_the_chosen_mapping() -> None:
    r = dict(llama_prefill_auto())
    chosen = {k: [x["name"] for x in layer["kernels"]] for k, layer in r["layers"].items()}
    plan = r["auto_mapping"]["sharding_plans"]["dense"]
    r["auto_mapping"] = {**r["auto_mapping"], "kernel_looping": False}
    r["alternatives"] = [
        # only the plan differs
        {
            "total_latency_s": 1.0,
            "kernel_looping": False,
            "sharding_plans": {"dense": "attention sp, experts tp"},
            "kernels": {"dense": [{"name": n} for n in chosen["dense"]]},
        },
        # only the looping differs
        {
            "total_latency_s": 1.0,
            "kernel_looping": True,
            "sharding_plans": {"dense": plan},
            "kernels": {"dense": [{"name": n} for n in chosen["dense"]]},
        },
        # only the kernels differ
        {
            "total_latency_s": 1.0,
            "kernel_looping": False,
            "sharding_plans": {"dense": plan},
            "kernels": {"dense": [{"name": "attn_norm-ffn_residual"}]},
        },
    ]
    text = " ".join(render_map_report(r, width=100).split())
    alts = re.findall(r"alternative \d: (.*?)(?= alternative \d:|$| HBM)", text)
    assert len(alts) == 3 and len(set(alts)) == 3, alts
    assert "dense plan: attention sp, experts tp; the same kernels" in alts[0]
    assert alts[1].startswith("1.000 s, looped; the same kernels and plans")
    assert "dense: attn_norm-ffn_residual" in alts[2] and "plan" not in alts[2]


def test_the_readme_defines_every_sharding_plan_name() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Auto-mapping") : text.index("## Sweeps")]
    for placement in AttentionPlacement:
        assert f"`attention {placement.value}`" in section, placement
    for placement in ExpertPlacement:
        assert f"`experts {placement.value}`" in section, placement
