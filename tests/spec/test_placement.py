"""`placement:`: every part of a model and its KV cache in HBM or DDR, set in a file or with
`--set`, checked against the model, with a suggestion for every misspelt key or tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.catalog import shipped_mappings
from rdusim.spec.mapping import load_mapping
from rdusim.spec.placement import PARTS, PlacementSpec, Tier, model_parts
from rdusim.spec.yamlio import validate


def test_everything_defaults_to_hbm():
    p = PlacementSpec()
    assert all(p.weights_of(part) == Tier.HBM for part in PARTS)
    assert p.kv_cache == Tier.HBM


def test_a_part_not_named_takes_the_weights_default():
    p = validate(PlacementSpec, {"weights": "ddr", "head": "hbm"}, file="m.yaml")
    assert [p.weights_of(x) for x in PARTS] == ["ddr", "ddr", "ddr", "ddr", "hbm", "ddr"]
    assert p.kv_cache == "hbm"
    with pytest.raises(ValueError, match="unknown placement part"):
        p.weights_of("experts")


@pytest.mark.parametrize(
    ("sets", "part", "tier"),
    [
        (["placement.moe=ddr"], "moe", "ddr"),
        (["placement.weights=ddr", "placement.dense=hbm"], "dense", "hbm"),
        (["placement.weights=ddr"], "mtp", "ddr"),
        (["placement.kv_cache=ddr"], None, "ddr"),
    ],
)
def test_set_places_a_part(sets, part, tier):
    spec = load_mapping("r1_decode", sets).spec
    got = spec.placement.kv_cache if part is None else spec.placement.weights_of(part)
    assert got == tier


def test_a_misspelt_tier_suggests_the_nearest():
    with pytest.raises(SpecError) as info:
        load_mapping("r1_decode", ["placement.moe=dr"])
    err = info.value
    assert err.key == "placement.moe" and "'hbm' or 'ddr'" in err.problem
    assert (err.fix or "").startswith("did you mean 'ddr'?")


def test_a_misspelt_part_suggests_the_nearest():
    with pytest.raises(SpecError) as info:
        load_mapping("r1_decode", ["placement.mo=ddr"])
    assert (info.value.fix or "").startswith("did you mean 'placement.moe'?")


def test_a_misspelt_key_in_a_file_is_refused(tmp_path: Path):
    text = shipped_mappings()["r1_decode"].read_text(encoding="utf-8")
    path = tmp_path / "m.yaml"
    path.write_text(
        text.replace("model: deepseek-r1", "model: deepseek-r1\nplacement: {kv_cahce: ddr}"),
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    assert info.value.key == "placement.kv_cahce" and info.value.line is not None
    assert (info.value.fix or "").startswith("did you mean 'kv_cache'?")


def test_a_part_the_model_lacks_is_refused_every_one_at_once():
    """Llama has neither MoE layers nor an MTP module: placing them would be ignored."""
    with pytest.raises(SpecErrors) as info:
        load_mapping("llama31_8b_decode", ["placement.moe=ddr", "placement.mtp=ddr"])
    keys = [e.key for e in info.value.errors]
    assert keys == ["placement.moe", "placement.mtp"]
    assert all("dense, embedding, head" in e.problem for e in info.value.errors)
    with pytest.raises(SpecError, match="no 'moe' weights"):
        load_mapping("llama31_8b_decode", ["placement.moe=hbm"])  # even to say hbm


def test_the_parts_of_a_model():
    rm = load_mapping("r1_decode")
    assert model_parts(rm.model) == {"dense", "moe", "mtp", "embedding", "head"}
    assert model_parts(load_mapping("llama31_8b_decode").model) == {"dense", "embedding", "head"}


def test_a_draft_part_needs_a_draft_model():
    from rdusim.spec.catalog import shipped_models
    from rdusim.spec.model import load_model_config
    from rdusim.spec.placement import check_placement

    model = load_model_config(shipped_models()["llama-3.1-70b"])
    p = validate(PlacementSpec, {"draft": "ddr"}, file="m.yaml")
    with pytest.raises(SpecError, match="no 'draft' weights"):
        check_placement(p, model, "m.yaml", None)
    check_placement(p, model, "m.yaml", None, has_draft=True)  # with a draft: accepted
