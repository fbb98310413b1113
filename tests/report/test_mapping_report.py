"""`rdusim map`'s text: kernel rows with their main sharding, collectives summed, the ops listed
in full under each kernel, per-op sharding in `--ops`, everything within the width."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rdusim.api import run_mapping
from rdusim.report.console import seconds, si
from rdusim.report.mapping_report import (
    main_sharding,
    render_map_report,
    render_op_timing,
    sharding_cell,
)


def _kernel(op_sharding: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "name": "MLA",
        "ops": list(op_sharding),
        "sharding": "+".join(sorted(set(op_sharding.values()))),
        "op_sharding": op_sharding,
        "collectives": [],
    } | extra


@pytest.fixture(scope="module")
def decode_b1(mappings_dir: Path) -> dict[str, Any]:
    """R1 decode at batch 1: attention splits each sequence's cache (sp16), the rest is tp16."""
    return run_mapping(mappings_dir / "r1_decode.yaml", ["batch=1"]).report


def _lines_of(text: str, kernel: str) -> list[str]:
    """The kernel's row and the lines after it, up to the next kernel or a blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(kernel + " "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end]


def test_main_sharding_is_what_most_ops_run_with() -> None:
    k = _kernel({"q_proj": "tp16", "attention": "sp16", "kv_cache_write": "dp16", "o_proj": "tp16"})
    assert main_sharding(k) == "tp16"
    assert sharding_cell(k) == "tp16 (attention sp16)"
    assert sharding_cell(_kernel({"attention": "tp16", "o_proj": "tp16"})) == "tp16"
    assert main_sharding(_kernel({"a": "dp16", "b": "tp16"})) == "dp16"  # a tie: the first op's


def test_a_report_without_per_op_sharding_uses_the_kernels() -> None:
    k = {"name": "K", "ops": ["a", "b"], "sharding": "tp8", "collectives": []}
    assert sharding_cell(k) == "tp8"


def test_kernel_rows_of_decode(decode_b1: dict[str, Any]) -> None:
    text = render_map_report(decode_b1, width=120)
    assert max(len(line) for line in text.splitlines()) <= 120
    mla = _lines_of(text.split("moe layers")[1], "MLA")
    row = re.split(r"\s{2,}", mla[0])
    assert row[1] == "tp16 (attention sp16)"
    # collectives summed: how many, bytes and rounds per socket
    k = decode_b1["layers"]["moe"]["kernels"][0]
    n, rounds = len(k["collectives"]), sum(c["rounds"] for c in k["collectives"])
    assert re.fullmatch(rf"{n}: [\d.]+ [kMG]?B, {rounds} rounds", row[5]), row
    assert row[6] == seconds(k["call_s"])  # the call column is kept
    # every op listed, none cut, those sharded otherwise marked with their sharding
    ops = " ".join(line.strip() for line in mla[1:]).removeprefix("ops: ").split(", ")
    marked = {op: k["op_sharding"][op] for op in k["ops"] if k["op_sharding"][op] != "tp16"}
    assert ops == [f"{op} [{marked[op]}]" if op in marked else op for op in k["ops"]]
    assert "attention [sp16]" in ops


def test_op_timing_has_a_sharding_column(decode_b1: dict[str, Any]) -> None:
    text = render_op_timing(decode_b1, width=120)
    assert max(len(line) for line in text.splitlines()) <= 120
    lines = text.split("moe / MLA")[1].split("\n\n")[0].splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("op "))
    assert lines[header].split()[:3] == ["op", "sharding", "PCUs"]
    rows = {line.split()[0]: line.split() for line in lines[header + 2 :]}
    assert rows["attention"][1] == "sp16" and rows["q_a_proj"][1] == "tp16"
    assert rows["kv_cache_write"][1] == "dp16"
    # each collective by kind and tensor, with its rounds when more than one
    listed = " ".join(" ".join(lines[1:header]).split())
    k = decode_b1["layers"]["moe"]["kernels"][0]
    assert listed.startswith("collectives per socket: ")
    assert listed.count(",") == len(k["collectives"]) - 1
    assert "all-reduce attn_proj" in listed and "(2 rounds)" in listed


@pytest.mark.parametrize("width", [100, 120, 160])
def test_report_fits_the_width_it_is_given(decode_b1: dict[str, Any], width: int) -> None:
    text = render_map_report(decode_b1, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    for k in decode_b1["layers"]["moe"]["kernels"]:
        for op in k["ops"]:
            assert op in text  # nothing elided


def test_a_narrow_terminal_leaves_columns_out_and_keeps_the_rows_whole(
    decode_b1: dict[str, Any],
) -> None:
    """Below the full table's width, columns are left out (the legend says which) rather than
    rows wrapped into many lines; paragraphs and op lists wrap."""
    lines = render_map_report(decode_b1, width=80).splitlines()
    assert all(len(line) <= 80 for line in lines)
    rows = [line for line in lines if line.startswith(("MLA ", "FFN "))]
    assert len(rows) == 4 and all("tp16 (attention sp16)" in r for r in rows if "MLA" in r)
    assert "not shown in 80 columns: collectives" in " ".join(lines[: lines.index("")])


def test_wide_terminal_keeps_rows_on_one_line(decode_b1: dict[str, Any]) -> None:
    text = render_map_report(decode_b1, width=200)
    kernels = [line for line in text.splitlines() if line.startswith(("MLA ", "FFN "))]
    assert len(kernels) == 4  # dense and moe, one line each


def test_auto_mapping_paragraph_gives_each_boundary_its_reason_and_the_runner_ups(
    decode_b1: dict[str, Any],
) -> None:
    r = dict(decode_b1)
    r["auto_mapping"] = {
        "objective": "step-time",
        "batch": 1,
        "kernel_looping": False,
        "sharding_plans": {"dense": "attention sp, experts tp"},
        "boundaries": {
            "dense": [
                {
                    "after": "o_proj",
                    "before": "attn_residual",
                    "reason": "SRAM limit",
                    "detail": "",
                },
                {"after": "ffn_norm", "before": "ffn_up", "reason": "blocking op", "detail": "x"},
            ]
        },
        "candidate_kernels_built": 480,
        "mappings_simulated": 3,
        "search_seconds": 0.5,
    }
    r["alternatives"] = [
        {"total_latency_s": 9.1e-4, "kernel_looping": True, "kernels": {"dense": [{"name": "A"}]}}
    ]
    text = render_map_report(r, width=100)
    assert all(len(line) <= 100 for line in text.splitlines())
    flat = " ".join(text.split())  # wrapped lines joined
    assert "auto-mapping: objective step-time, batch 1" in flat
    assert "480 candidate kernels" in flat
    assert "dense: cut o_proj | attn_residual: SRAM limit" in flat
    assert "dense: cut ffn_norm | ffn_up: blocking op (x)" in flat
    assert re.search(r"alternative 1: 910\.\d+ us, looped; dense: A", flat)
    assert "auto-mapping" not in render_map_report(decode_b1, width=100)


# ------------------------------------------------------------------ memory tiers


@pytest.fixture(scope="module")
def dense_in_ddr() -> dict[str, Any]:
    """Llama-3.1-8B at batch 1 with its dense layers' weights and its cache in DDR."""
    sets = ["batch=1", "placement.dense=ddr", "placement.kv_cache=ddr"]
    return run_mapping("llama31_8b_decode", sets, uncertainty=False).report


def test_a_run_all_in_hbm_shows_no_ddr(decode_b1: dict[str, Any]) -> None:
    text = render_map_report(decode_b1, width=100)
    assert "DDR" not in text
    assert "fits HBM)" in text
    assert decode_b1["placement"]["kv_cache"] == "hbm"
    assert set(decode_b1["placement"]["weights"].values()) == {"hbm"}
    assert decode_b1["ddr_bytes"]["weights"] == decode_b1["traffic_bytes"]["ddr"] == 0.0


def test_ddr_bytes_traffic_and_placement_are_reported(dense_in_ddr: dict[str, Any]) -> None:
    r = dense_in_ddr
    text = render_map_report(r, width=120)
    ddr, traffic = r["ddr_bytes"], r["traffic_bytes"]
    used = ddr["weights"] + ddr["kv_cache"]
    assert r["placement"] == {
        "weights": {"dense": "ddr", "embedding": "hbm", "head": "hbm"},
        "kv_cache": "ddr",
    }
    assert r["hbm_bytes"]["kv_cache"] == 0.0 and ddr["kv_cache"] > 0
    assert (
        f"DDR per socket (dense weights and KV cache): weights {si(ddr['weights'], 'B')}, "
        f"KV cache {si(ddr['kv_cache'], 'B')} = {si(used, 'B')} of 1.5 TB"
    ) in text
    assert f"per step: HBM {si(traffic['hbm'], 'B')}, DDR {si(traffic['ddr'], 'B')}," in text
    assert "fits HBM and DDR)" in text
    kernel = r["layers"]["dense"]["kernels"][0]
    assert kernel["ddr_traffic_bytes"] > 0 and kernel["bottleneck"] == "DDR bandwidth"


def test_the_op_table_gains_a_ddr_column_only_where_a_kernel_streams_ddr(
    dense_in_ddr: dict[str, Any], decode_b1: dict[str, Any]
) -> None:
    def headers(r: dict[str, Any]) -> list[str]:
        text = render_op_timing(r, width=120)
        return [line.split() for line in text.splitlines() if line.startswith("op ")]

    assert headers(dense_in_ddr) == [
        ["op", "sharding", "PCUs", "busy", "HBM", "DDR", "stall", "bound"]
    ]
    assert all("DDR" not in h for h in headers(decode_b1))
    text = render_op_timing(dense_in_ddr, width=120)
    assert any(line.rstrip().endswith(" ddr") for line in text.splitlines())


@pytest.mark.parametrize("width", [80, 100])
def test_a_ddr_report_fits_the_width(dense_in_ddr: dict[str, Any], width: int) -> None:
    for text in (render_map_report(dense_in_ddr, width), render_op_timing(dense_in_ddr, width)):
        assert max(len(line) for line in text.splitlines()) <= width
