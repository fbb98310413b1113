"""Mapping specs: the shipped files, sharding and SnapStream fields, `--set` overrides, and
located errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rdusim.errors import SpecError
from rdusim.spec.mapping import (
    KernelSpec,
    MappingSpec,
    Sharding,
    apply_overrides,
    load_mapping,
    snapstream_sizes,
)
from tests.conftest import line_with

MAPPING_NAMES = ("r1_prefill", "r1_decode", "llama31_8b_prefill", "llama31_8b_decode")


def spec(**fields) -> MappingSpec:
    data = {"model": "m.yaml", "phase": "prefill", "seq_len": 131072, **fields}
    return MappingSpec.model_validate(data)


# --------------------------------------------------------------------------------------------
# the shipped mappings


@pytest.mark.parametrize("name", MAPPING_NAMES)
def test_shipped_mappings_load(mappings_dir, name):
    rm = load_mapping(mappings_dir / f"{name}.yaml")
    assert rm.spec.name == name
    assert rm.hardware.sockets == 16
    assert rm.spec.phase == ("prefill" if "prefill" in name else "decode")
    assert isinstance(rm.spec.kernels, dict)
    assert rm.source.file == str(mappings_dir / f"{name}.yaml")


def test_r1_prefill_fields(mappings_dir):
    rm = load_mapping(mappings_dir / "r1_prefill.yaml")
    s = rm.spec
    assert (s.batch, s.seq_len, s.hardware) == (1, 131072, "sn40l-16")
    assert rm.model.name == "deepseek-r1"
    names = [k.name for k in s.kernels["moe"]]
    assert names == [
        "QKV",
        "Streaming Ring Buffer",
        "SnapKV Compression",
        "MHA",
        "Output Proj",
        "Router",
        "MoE FFN",
    ]
    mha = s.kernels["moe"][3]
    assert mha.tiling.kv_block == 8192 and mha.sharding.tp == 16


def test_r1_decode_fields(mappings_dir):
    s = load_mapping(mappings_dir / "r1_decode.yaml").spec
    assert s.batch == "max"
    assert (s.mtp.draft_tokens, s.mtp.acceptance, s.mtp.mode) == (2, 0.8, "verify")
    assert s.tokens_per_step == pytest.approx(1 + 0.8 + 0.8**2)
    assert s.orchestration == "software"
    mla = s.kernels["moe"][0]
    assert mla.overrides["attention"] == Sharding(dp=16)


# --------------------------------------------------------------------------------------------
# sharding and kernels


@pytest.mark.parametrize(
    ("fields", "strategy", "degree"),
    [
        ({}, "replicate", 1),
        ({"tp": 1}, "replicate", 1),
        ({"tp": 16}, "tp", 16),
        ({"dp": 8}, "dp", 8),
        ({"ep": 4}, "ep", 4),
    ],
)
def test_sharding_strategy_and_degree(fields, strategy, degree):
    sh = Sharding(**fields)
    assert (sh.strategy, sh.degree) == (strategy, degree)


def test_sharding_takes_one_strategy():
    with pytest.raises(ValidationError, match="tp and dp"):
        Sharding(tp=16, dp=16)
    with pytest.raises(ValidationError):
        Sharding(tp=0)
    with pytest.raises(ValidationError):
        Sharding(tp=True)  # a boolean is not a degree
    with pytest.raises(ValidationError):
        Sharding(pp=2)


def test_kernel_needs_a_name_and_ops():
    with pytest.raises(ValidationError):
        KernelSpec(name="k", ops=[])
    with pytest.raises(ValidationError):
        KernelSpec(name="", ops=["x"])
    k = KernelSpec.model_validate({"name": "k", "ops": ["x"], "tiling": {"kv_block": 8192}})
    assert k.sharding == Sharding() and k.overrides == {}
    with pytest.raises(ValidationError):
        KernelSpec.model_validate({"name": "k", "ops": ["x"], "tiling": {"block": 8192}})


def test_defaults():
    s = spec()
    assert (s.batch, s.hardware, s.tokens_per_step, s.kernels) == (1, "sn40l-16", 1.0, "auto")
    assert not s.snapstream.enabled and snapstream_sizes(s) is None


@pytest.mark.parametrize("bad", [0, -1, True, "lots", 2.5])
def test_batch_errors_name_only_batch(bad):
    with pytest.raises(ValidationError) as info:
        spec(batch=bad)
    (err,) = info.value.errors()
    assert err["loc"] == ("batch",)


def test_batch_max_and_numbers():
    assert spec(batch="max").batch == "max"
    assert spec(batch=64).batch == 64


# --------------------------------------------------------------------------------------------
# SnapStream sizes


def test_snapstream_defaults_split_the_budget():
    ss = snapstream_sizes(spec(snapstream={"enabled": True, "sink": 128}))
    assert ss is not None
    assert ss.slots == 131072 // 4
    assert (ss.sink, ss.recent, ss.topk) == (128, (32768 - 128) // 2, 32768 - 128 - 16320)
    assert (ss.obs_window, ss.pool_kernel) == (128, 7)


def test_snapstream_explicit_sizes():
    ss = snapstream_sizes(
        spec(
            snapstream={
                "enabled": True,
                "kv_len": 8192,
                "sink": 128,
                "recent": 4096,
                "obs_window": 64,
            }
        )
    )
    assert ss is not None
    assert (ss.slots, ss.recent, ss.topk, ss.obs_window) == (8192, 4096, 8192 - 128 - 4096, 64)
    ss = snapstream_sizes(spec(seq_len=65536, snapstream={"enabled": True, "compression": 8}))
    assert ss is not None and ss.slots == 8192


@settings(max_examples=50, deadline=None)
@given(seq_len=st.integers(256, 1 << 20), compression=st.floats(1.0, 64.0), sink=st.integers(0, 64))
def test_snapstream_regions_fill_the_cache(seq_len, compression, sink):
    s = spec(
        seq_len=seq_len,
        snapstream={"enabled": True, "compression": compression, "sink": sink, "obs_window": 16},
    )
    kv_len = max(1, int(seq_len // compression))
    if kv_len - sink < 1:
        with pytest.raises(SpecError):
            snapstream_sizes(s)
        return
    ss = snapstream_sizes(s)
    assert ss is not None
    assert ss.sink + ss.recent + ss.topk == ss.slots == kv_len <= seq_len


@pytest.mark.parametrize(
    ("snap", "seq_len", "key"),
    [
        ({"kv_len": 200000}, 131072, "snapstream.kv_len"),
        ({"kv_len": 100, "sink": 100}, 131072, "snapstream.sink"),
        ({"recent": 5, "topk": 5}, 131072, "snapstream"),
        ({"obs_window": 8192}, 4096, "snapstream.obs_window"),
        ({"pool_kernel": 4}, 131072, "snapstream.pool_kernel"),
    ],
)
def test_snapstream_size_errors(snap, seq_len, key):
    s = spec(seq_len=seq_len, snapstream={"enabled": True, **snap})
    with pytest.raises(SpecError) as info:
        snapstream_sizes(s, "m.yaml")
    err = info.value
    assert err.key == key and err.file == "m.yaml" and err.fix
    assert err.path is not None and ".".join(map(str, err.path)) == key


def test_snapstream_field_errors():
    with pytest.raises(ValidationError):
        spec(snapstream={"enabled": True, "sink": -1})
    with pytest.raises(ValidationError):
        spec(snapstream={"enabled": True, "compression": 0.5})
    with pytest.raises(ValidationError):
        spec(snapstream={"enabled": True, "window": 4})


# --------------------------------------------------------------------------------------------
# --set overrides


def test_overrides_parse_yaml_values():
    data = {"seq_len": 131072, "snapstream": {"enabled": True}}
    out = apply_overrides(
        data,
        [
            "seq_len=65536",
            "snapstream.enabled=false",
            "batch=max",
            "mtp.acceptance=0.7",
            "snapstream.kv_len=8192",
        ],
        "m.yaml",
    )
    assert out == {
        "seq_len": 65536,
        "batch": "max",
        "mtp": {"acceptance": 0.7},
        "snapstream": {"enabled": False, "kv_len": 8192},
    }


def test_overrides_create_missing_sections():
    assert apply_overrides({}, ["snapstream.enabled=true"], "m.yaml") == {
        "snapstream": {"enabled": True}
    }


@pytest.mark.parametrize("item", ["foo.bar=1", "foo=1", "seq_len.x=1", "snapstream.nope=1"])
def test_unknown_override_paths(item):
    with pytest.raises(SpecError) as info:
        apply_overrides({}, [item], "m.yaml")
    err = info.value
    assert err.key == f"--set {item.split('=')[0]}" and err.file == "m.yaml"
    assert "seq_len" in (err.fix or "")


def test_override_without_a_value():
    with pytest.raises(SpecError) as info:
        apply_overrides({}, ["seq_len"], "m.yaml")
    assert info.value.key == "--set" and info.value.file == "m.yaml"


def test_load_mapping_applies_overrides(mappings_dir):
    rm = load_mapping(
        mappings_dir / "r1_prefill.yaml", ["seq_len=65536", "snapstream.enabled=false", "batch=2"]
    )
    assert (rm.spec.seq_len, rm.spec.snapstream.enabled, rm.spec.batch) == (65536, False, 2)


def test_an_overridden_value_is_validated(mappings_dir):
    with pytest.raises(SpecError) as info:
        load_mapping(mappings_dir / "r1_prefill.yaml", ["seq_len=lots"])
    assert info.value.key == "seq_len"


# --------------------------------------------------------------------------------------------
# load_mapping: paths and located errors


def test_model_path_is_relative_to_the_mapping(tmp_path, mappings_dir, models_dir):
    sub = tmp_path / "maps"
    sub.mkdir()
    text = (mappings_dir / "llama31_8b_prefill.yaml").read_text(encoding="utf-8")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "l8.yaml").write_text(
        (models_dir / "llama-3.1-8b.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (sub / "m.yaml").write_text(
        text.replace("model: llama-3.1-8b\n", "model: ../models/l8.yaml\n"), encoding="utf-8"
    )
    assert load_mapping(sub / "m.yaml").model.name == "llama-3.1-8b"


def test_missing_model_file(r1_mapping):
    path, text = r1_mapping(("model: deepseek-r1", "model: /nowhere/deepseek-r1.yaml"))
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    err = info.value
    assert (err.file, err.key, err.line) == (str(path), "model", line_with(text, "model:"))


def test_unknown_hardware(r1_mapping):
    path, text = r1_mapping(("hardware: sn40l-16", "hardware: sn99"))
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    err = info.value
    assert (err.file, err.key, err.line) == (str(path), "hardware", line_with(text, "hardware:"))
    assert "sn40l-16" in (err.fix or "")


def test_wrong_type_is_located(r1_mapping):
    path, text = r1_mapping(("seq_len: 131072", "seq_len: lots"))
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    err = info.value
    assert (err.key, err.line) == ("seq_len", line_with(text, "seq_len:"))
    assert "lots" in err.problem


def test_batch_zero_is_one_located_error(r1_mapping):
    path, text = r1_mapping(("batch: 1", "batch: 0"))
    with pytest.raises(SpecError) as info:  # a single error, not one per branch of int | "max"
        load_mapping(path)
    err = info.value
    assert (err.key, err.line) == ("batch", line_with(text, "batch:"))
    assert err.fix == "use a positive value"


def test_unknown_kernel_field_is_located(r1_mapping):
    path, text = r1_mapping(("tiling: {kv_block: 8192}", "tilling: {kv_block: 8192}"))
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    err = info.value
    assert err.key == "kernels.moe.MHA.tilling"
    assert err.line == line_with(text, "tilling")


def test_two_strategies_on_one_kernel(r1_mapping):
    path, text = r1_mapping(
        (
            "      ops: [attention]\n      sharding: {tp: 16}",
            "      ops: [attention]\n      sharding: {tp: 16, dp: 16}",
        )
    )
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    err = info.value
    assert err.key == "kernels.moe.MHA.sharding" and "tp and dp" in err.problem
    assert err.line == line_with(text, "{tp: 16, dp: 16}")


# --------------------------------------------------------------------------------------------
# multi-token prediction, routing, orchestration, split-KV


@pytest.mark.parametrize(("k", "a"), [(0, 0.8), (1, 0.8), (2, 0.8), (3, 0.5), (2, 1.0), (4, 0.0)])
def test_verified_mtp_accepts_a_geometric_sum(k, a):
    s = spec(phase="decode", mtp={"draft_tokens": k, "acceptance": a})
    expected = sum(a**i for i in range(k + 1))  # 1 + a + ... + a^k
    assert s.tokens_per_step == pytest.approx(expected, rel=1e-12)
    assert (s.mtp.verified_tokens, s.mtp.module_runs) == (k + 1, k)


def test_two_drafts_at_80_percent_give_2_44(mappings_dir):
    rm = load_mapping(mappings_dir / "r1_decode.yaml", ["mtp.draft_tokens=2", "mtp.acceptance=0.8"])
    assert rm.spec.tokens_per_step == pytest.approx(2.44, rel=1e-12)


def test_scaled_mtp_keeps_the_reported_multiplier():
    s = spec(phase="decode", mtp={"mode": "scaled", "tokens_per_step": 2.4})
    assert s.tokens_per_step == 2.4
    assert (s.mtp.verified_tokens, s.mtp.module_runs) == (1, 0)


@pytest.mark.parametrize(
    "mtp",
    [
        {"mode": "scaled"},  # no multiplier
        {"tokens_per_step": 2.4},  # a multiplier in verify mode
        {"draft_tokens": -1},
        {"acceptance": 1.5},
        {"draft_tokens": 99},
    ],
)
def test_bad_mtp(mtp):
    with pytest.raises(ValidationError):
        spec(phase="decode", mtp=mtp)


def test_top_level_tokens_per_step_points_to_mtp(r1_mapping):
    path, _ = r1_mapping(("batch: 1", "batch: 1\ntokens_per_step: 2.4"))
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    assert "mtp" in info.value.problem


def test_mtp_needs_a_model_with_an_mtp_module(mappings_dir):
    with pytest.raises(SpecError) as info:
        load_mapping(mappings_dir / "llama31_8b_decode.yaml", ["mtp.draft_tokens=1"])
    assert info.value.key == "mtp"


@pytest.mark.parametrize(
    "routing",
    [
        {"distribution": "zipf"},  # no exponent
        {"distribution": "uniform", "exponent": 1.0},
        {"distribution": "histogram"},  # no file
        {"distribution": "zipf", "exponent": -1},
        {"distribution": "pareto"},
    ],
)
def test_bad_routing(routing):
    with pytest.raises(ValidationError):
        spec(moe={"routing": routing})


def test_orchestration_and_looping_defaults():
    s = spec()
    assert (s.orchestration, s.kernel_looping) == ("hardware", False)
    assert s.moe.expert_loading == "touched"
    with pytest.raises(ValidationError):
        spec(orchestration="host")


def write_loads(tmp_path, mappings_dir, loads: str):
    (tmp_path / "loads.txt").write_text(loads, encoding="utf-8")
    text = (mappings_dir / "r1_decode.yaml").read_text(encoding="utf-8")
    text += "moe: {routing: {distribution: histogram, file: loads.txt}}\n"
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_histogram_file_is_read_relative_to_the_mapping(tmp_path, mappings_dir):
    loads = [float(i % 7 + 1) for i in range(256)]
    path = write_loads(tmp_path, mappings_dir, "\n".join(map(str, loads)))
    assert load_mapping(path).expert_loads == tuple(loads)


@pytest.mark.parametrize(
    ("loads", "problem"),
    [
        ("1\n2\n3", "has 3 loads"),
        ("\n".join(["1"] * 255 + ["x"]), "not a number"),
        ("\n".join(["0"] * 256), "not all zero"),
        ("\n".join(["1"] * 255 + ["-1"]), "non-negative"),
    ],
)
def test_bad_histogram_is_located(tmp_path, mappings_dir, loads, problem):
    path = write_loads(tmp_path, mappings_dir, loads)
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    assert info.value.key == "moe.routing.file"
    assert problem in info.value.problem


@pytest.mark.parametrize(
    ("fields", "strategy", "degree", "seq_split"),
    [({"sp": 16}, "sp", 16, 1), ({"dp": 4, "sp": 4}, "dp", 4, 4), ({"dp": 16}, "dp", 16, 1)],
)
def test_split_kv_sharding(fields, strategy, degree, seq_split):
    sh = Sharding(**fields)
    assert (sh.strategy, sh.degree, sh.seq_split) == (strategy, degree, seq_split)


@pytest.mark.parametrize("fields", [{"tp": 4, "sp": 4}, {"ep": 4, "sp": 4}, {"tp": 2, "dp": 2}])
def test_sp_combines_with_dp_only(fields):
    with pytest.raises(ValidationError):
        Sharding(**fields)


@pytest.mark.parametrize(("key", "value"), [("seq_len", 1 << 30), ("batch", 1 << 30)])
def test_sizes_have_limits(key, value):
    with pytest.raises(ValidationError) as info:
        spec(**{key: value})
    assert "at most" in str(info.value) or "less than" in str(info.value)


# --------------------------------------------------------------------------------------------
# unknown names: located, with the closest valid name


def test_a_misspelt_layer_kind_is_located_with_a_suggestion(r1_mapping):
    path, text = r1_mapping(("\n  moe:\n", "\n  moe_x:\n"))
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    err = info.value
    assert (err.file, err.key, err.line) == (str(path), "kernels.moe_x", line_with(text, "moe_x:"))
    assert "'moe_x'" in err.problem and "dense, moe" in err.problem
    assert (err.fix or "").startswith("did you mean 'moe'?")


def test_a_layer_kind_the_model_lacks_is_refused(tmp_path, mappings_dir, models_dir):
    text = (mappings_dir / "llama31_8b_prefill.yaml").read_text(encoding="utf-8")
    text += "  moe:\n    - {name: X, ops: ['*']}\n"
    path = tmp_path / "l8.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    err = info.value
    assert (err.key, err.line) == ("kernels.moe", len(text.splitlines()) - 1)
    assert "layer kinds: dense" in err.problem and "did you mean" not in (err.fix or "")


def test_every_misspelt_layer_kind_is_reported(r1_mapping):
    from rdusim.errors import SpecErrors

    path, _ = r1_mapping(("\n  moe:\n", "\n  mo:\n"), ("\n  dense:\n", "\n  dens:\n"))
    with pytest.raises(SpecErrors) as info:
        load_mapping(path)
    keys = [(e.key, (e.fix or "").split("?")[0]) for e in info.value.errors]
    assert keys == [("kernels.mo", "did you mean 'moe'"), ("kernels.dens", "did you mean 'dense'")]


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("seqlen", "seq_len"),
        ("snapstream.enable", "snapstream.enabled"),
        ("mtp.draft_token", "mtp.draft_tokens"),
        ("moe.routing.distribtion", "moe.routing.distribution"),
        ("moe.expert_load", "moe.expert_loading"),
        ("orchestraton", "orchestration"),
    ],
)
def test_an_unknown_set_path_suggests_the_closest_field(key, meant):
    with pytest.raises(SpecError) as info:
        apply_overrides({}, [f"{key}=1"], "m.yaml")
    err = info.value
    assert err.key == f"--set {key}" and err.file == "m.yaml"
    assert (err.fix or "").startswith(f"did you mean {meant!r}?")


def test_settable_paths_are_the_fields_of_the_mapping_and_its_sections():
    from rdusim.spec.mapping import (
        MoeSpec,
        MtpSpec,
        RoutingSpec,
        SnapStreamSpec,
        SpeculativeSpec,
        settable_paths,
    )
    from rdusim.spec.placement import PlacementSpec

    paths = set(settable_paths())
    sections = {
        "mtp": MtpSpec,
        "speculative": SpeculativeSpec,  # an optional section: its fields are paths too
        "moe": MoeSpec,
        "moe.routing": RoutingSpec,
        "snapstream": SnapStreamSpec,
        "placement": PlacementSpec,
    }
    expected = set(MappingSpec.model_fields)
    for prefix, model in sections.items():
        expected |= {f"{prefix}.{name}" for name in model.model_fields}
    assert paths == expected
    assert {"moe.routing.exponent", "snapstream.obs_window", "kernel_looping"} <= paths
    for path in paths:  # every one of them is accepted by --set
        apply_overrides({}, [f"{path}=1"], "m.yaml")
