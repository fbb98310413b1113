"""`--set` beyond the mapping's own fields: a named kernel's fields and the hardware's."""

from __future__ import annotations

import pytest

from rdusim.errors import SpecError
from rdusim.spec.mapping import Sharding, apply_overrides, load_mapping
from rdusim.spec.overrides import parse_overrides

KERNELS = {
    "moe": [
        {"name": "MLA", "ops": ["attention"], "sharding": {"tp": 16}},
        {"name": "Output Proj + FFN", "ops": ["o_proj"]},
    ]
}


def kernels_data() -> dict:
    return {"kernels": {k: [dict(v) for v in vs] for k, vs in KERNELS.items()}}


def raises(data: dict, item: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        apply_overrides(data, [item], "m.yaml")
    return info.value


def test_each_path_goes_where_it_lands():
    parsed = parse_overrides(
        [
            "seq_len=4096",
            "hardware=sn40l-8",
            "kernels=auto",
            "kernels.moe.MLA.tiling.kv_block=16384",
            "hardware.links.p2p_bandwidth=2e11",
            "calibration.gemm_efficiency=0.5",
        ],
        "m.yaml",
    )
    assert [o.key for o in parsed.mapping] == ["seq_len", "hardware", "kernels"]
    assert [o.parts for o in parsed.kernels] == [["kernels", "moe", "MLA", "tiling", "kv_block"]]
    assert [o.parts for o in parsed.hardware] == [
        ["links", "p2p_bandwidth"],
        ["calibration", "gemm_efficiency"],
    ]
    assert parsed.hardware[0].value == 2e11


def test_a_kernel_field_is_set_in_the_named_kernel_only():
    data = apply_overrides(kernels_data(), ["kernels.moe.MLA.tiling.kv_block=16384"], "m.yaml")
    mla, ffn = data["kernels"]["moe"]
    assert mla["tiling"] == {"kv_block": 16384} and "tiling" not in ffn
    data = apply_overrides(kernels_data(), ["kernels.moe.MLA.sharding.tp=8"], "m.yaml")
    assert data["kernels"]["moe"][0]["sharding"] == {"tp": 8}


def test_a_kernel_name_with_spaces_is_one_part():
    data = apply_overrides(
        kernels_data(), ["kernels.moe.Output Proj + FFN.sharding.dp=16"], "m.yaml"
    )
    assert data["kernels"]["moe"][1]["sharding"] == {"dp": 16}


def test_an_unknown_kernel_name_suggests_the_closest():
    err = raises(kernels_data(), "kernels.moe.MHA.tiling.kv_block=1")
    assert err.key == "--set kernels.moe.MHA.tiling.kv_block" and err.file == "m.yaml"
    assert "'MHA'" in err.problem
    assert (err.fix or "").startswith("did you mean 'MLA'?")


def test_an_unknown_layer_kind_or_field_suggests_the_closest():
    assert (raises(kernels_data(), "kernels.meo.MLA.tiling.kv_block=1").fix or "").startswith(
        "did you mean 'moe'?"
    )
    err = raises(kernels_data(), "kernels.moe.MLA.tilling.kv_block=1")
    assert "'tilling'" in err.problem and (err.fix or "").startswith("did you mean 'tiling'?")


def test_a_path_that_stops_at_the_kernel_names_no_field():
    err = raises(kernels_data(), "kernels.moe.MLA=3")
    assert "names no kernel field" in err.problem and "kv_block=16384" in (err.fix or "")


def test_auto_kernels_have_no_kernel_to_set():
    err = raises({"kernels": "auto"}, "kernels.moe.MLA.tiling.kv_block=1")
    assert "auto-mapper" in err.problem
    err = raises({}, "kernels.moe.MLA.tiling.kv_block=1")
    assert "copy of the mapping" in (err.fix or "")


def test_kernel_overrides_reach_the_compiled_spec(mappings_dir):
    base = load_mapping(mappings_dir / "r1_decode.yaml")
    rm = load_mapping(
        mappings_dir / "r1_decode.yaml",
        ["kernels.moe.MLA.sharding.tp=8", "kernels.moe.MLA.tiling.kv_block=16384"],
    )
    assert isinstance(rm.spec.kernels, dict) and isinstance(base.spec.kernels, dict)
    mla = rm.spec.kernels["moe"][0]
    assert mla.name == "MLA" and mla.sharding == Sharding(tp=8)
    assert mla.tiling.kv_block == 16384
    assert rm.spec.kernels["moe"][1] == base.spec.kernels["moe"][1]


def test_hardware_overrides_change_only_the_field_named(mappings_dir):
    base = load_mapping(mappings_dir / "r1_decode.yaml")
    rm = load_mapping(
        mappings_dir / "r1_decode.yaml",
        ["hardware.links.p2p_bandwidth=2e11", "calibration.gemm_efficiency=0.5"],
    )
    assert rm.hardware.links.p2p_bandwidth == 2e11
    assert rm.hardware.calibration.gemm_efficiency == 0.5
    assert rm.hardware.links.p2p_latency_s == base.hardware.links.p2p_latency_s
    assert rm.hardware.calibration.attention_efficiency == (
        base.hardware.calibration.attention_efficiency
    )
    assert base.hardware.links.p2p_bandwidth != 2e11  # the preset is not changed in place
    assert load_mapping(mappings_dir / "r1_decode.yaml").hardware == base.hardware


def test_a_hardware_value_the_spec_refuses_names_the_set(mappings_dir):
    with pytest.raises(SpecError) as info:
        load_mapping(mappings_dir / "r1_decode.yaml", ["hardware.links.p2p_bandwidth=-1"])
    err = info.value
    assert err.key == "--set hardware.links.p2p_bandwidth"
    assert "hardware.links.p2p_bandwidth" in err.problem


def test_an_unknown_hardware_path_suggests_the_closest(mappings_dir):
    with pytest.raises(SpecError) as info:
        load_mapping(mappings_dir / "r1_decode.yaml", ["hardware.linkz.p2p_bandwidth=1"])
    assert (info.value.fix or "").startswith("did you mean 'links.p2p_bandwidth'?")
    with pytest.raises(SpecError) as info:
        load_mapping(mappings_dir / "r1_decode.yaml", ["calibration.gemm_eficiency=0.5"])
    assert (info.value.fix or "").startswith("did you mean 'calibration.gemm_efficiency'?")


def test_choosing_another_hardware_file_still_works(mappings_dir):
    rm = load_mapping(mappings_dir / "llama31_8b_decode.yaml", ["hardware=sn40l-8"])
    assert rm.hardware.sockets == 8


def test_the_kernel_fields_set_knows_are_those_of_a_kernel_spec():
    from rdusim.spec.mapping import KernelSpec
    from rdusim.spec.overrides import KERNEL_FIELDS

    assert set(KERNEL_FIELDS) == set(KernelSpec.model_fields)
