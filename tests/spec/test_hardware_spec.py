"""Hardware presets and hardware-spec errors."""

from __future__ import annotations

import pytest

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.hardware import PRESETS, Calibration, Hardware, load_hardware, preset_path
from rdusim.validation.calibrate import FITTED_ON


def preset_text(name: str = "sn40l-16") -> str:
    return preset_path(name).read_text(encoding="utf-8")


def write_variant(tmp_path, old: str, new: str, name: str = "hw.yaml"):
    """A copy of the sn40l-16 preset with one line edited; returns (path, line of the edit)."""
    text = preset_text()
    assert text.count(old) == 1, old
    text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if new.splitlines()[0] in ln)
    return path, line


@pytest.mark.parametrize(("name", "sockets"), [("sn40l-16", 16), ("sn40l-8", 8)])
def test_presets_load(name, sockets):
    hw = load_hardware(name)
    assert isinstance(hw, Hardware)
    assert hw.name == name
    assert hw.sockets == hw.node.sockets == sockets
    s = hw.socket
    assert s.peak_bf16_flops == 638e12
    assert (s.pcus, s.pmus, s.tiles) == (1040, 1040, 4)
    assert s.sram_bytes == 520e6
    assert s.hbm.capacity_bytes == 64e9
    assert s.hbm.bandwidth == 1.6e12
    assert s.ddr.capacity_bytes == 1.5e12
    assert s.ddr.bandwidth == 100e9
    assert s.clock_hz == 1.6e9
    assert s.flops_per_pcu == pytest.approx(638e12 / 1040)


def test_presets_differ_only_in_name_and_node():
    a, b = load_hardware("sn40l-16"), load_hardware("sn40l-8")
    assert a.socket == b.socket
    assert a.links == b.links
    assert a.calibration == b.calibration
    assert (a.node.sockets, b.node.sockets) == (16, 8)


def test_preset_names():
    assert set(PRESETS) == {"sn40l-16", "sn40l-8"}
    for name in PRESETS:
        assert preset_path(name).is_file()


def test_every_preset_value_has_a_source_or_assumption_comment():
    """Each numeric leaf of a preset carries a comment on its line or just above it."""
    for name in PRESETS:
        lines = preset_text(name).splitlines()
        for i, line in enumerate(lines):
            body = line.split("#", 1)[0]
            if ":" not in body or not body.split(":", 1)[1].strip():
                continue  # a section header or a comment
            value = body.split(":", 1)[1].strip()
            if value.replace(".", "").replace("e+", "").replace("e-", "").isdigit():
                commented = "#" in line or lines[i - 1].lstrip().startswith("#")
                assert commented, f"{name}: line {i + 1} has no source: {line!r}"


def test_p2p_bandwidth_is_marked_as_an_assumption():
    text = preset_text()
    block = text[: text.index("p2p_bandwidth")]
    assert "ASSUMPTION" in block[block.rindex("links:") :]


def test_calibration_values_are_fractions_or_times():
    c = load_hardware("sn40l-16").calibration
    for field in (
        "gemm_efficiency",
        "attention_efficiency",
        "simd_efficiency",
        "hbm_efficiency",
        "hbm_usable_fraction",
    ):
        assert 0 < getattr(c, field) <= 1
    for field in ("software_call_s", "hardware_call_s"):
        assert 0 < getattr(c, field) < 1e-3  # a kernel call takes microseconds, not seconds


def _calibration_comments(text: str) -> dict[str, str]:
    """Each key of the `calibration:` section, with the comment block just above it (up to a
    bare `#` line or a non-comment line)."""
    lines = text.splitlines()
    start = lines.index("calibration:") + 1
    out: dict[str, str] = {}
    for i in range(start, len(lines)):
        line = lines[i]
        if line and not line.startswith(" "):
            break  # the next top-level section
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        key = body.split(":", 1)[0].strip()
        block: list[str] = []
        j = i - 1
        while j >= start and lines[j].strip().startswith("#") and lines[j].strip() != "#":
            block.insert(0, lines[j].strip().lstrip("#").strip())
            j -= 1
        out[key] = " ".join(block)
    return out


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_calibration_value_says_what_it_was_fitted_on(name):
    comments = _calibration_comments(preset_text(name))
    assert set(comments) == set(Calibration.model_fields), name
    for key, comment in comments.items():
        fitted, not_fitted = "Fitted on" in comment, "Not fitted" in comment
        assert fitted != not_fitted, f"{name}: {key}: {comment!r}"
        # and the preset agrees with what reports quote
        assert FITTED_ON[key].startswith("fitted:" if fitted else "not fitted:"), key


def test_load_by_path_and_relative_to_base_dir(tmp_path):
    path = tmp_path / "my-hw.yaml"
    path.write_text(preset_text(), encoding="utf-8")
    assert load_hardware(path).sockets == 16
    assert load_hardware("my-hw.yaml", base_dir=tmp_path).sockets == 16


def test_what_if_bigger_sram(tmp_path):
    path, _ = write_variant(
        tmp_path,
        "  pmu_bytes: 500000 ",
        "  pmu_bytes: 1000000 ",
    )
    text = path.read_text(encoding="utf-8").replace("sram_bytes: 520.0e+6", "sram_bytes: 1040.0e+6")
    path.write_text(text, encoding="utf-8")
    assert load_hardware(path).socket.sram_bytes == 1040e6


def test_negative_pmus_names_the_key(tmp_path):
    path, line = write_variant(tmp_path, "  pmus: 1040 ", "  pmus: -1 ")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    err = exc.value
    assert (err.key, err.line, err.file) == ("socket.pmus", line, str(path))
    assert "-1" in err.problem
    assert err.fix


def test_misspelt_key_names_both_keys(tmp_path):
    path, line = write_variant(tmp_path, "  pcus: 1040 ", "  pcuz: 1040 ")
    with pytest.raises(SpecErrors) as exc:
        load_hardware(path)
    # the misspelt key is refused and the real one is missing: both are reported, located
    by_key = {e.key: e for e in exc.value.errors}
    assert set(by_key) == {"socket.pcuz", "socket.pcus"}
    assert by_key["socket.pcuz"].line == line
    assert by_key["socket.pcus"].fix == "add the key"
    assert all(e.file == str(path) for e in exc.value.errors)


def test_extra_key_is_refused(tmp_path):
    path, line = write_variant(tmp_path, "  tiles: 4 ", "  tiles: 4\n  tilez: 3 ")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    assert (exc.value.key, exc.value.line) == ("socket.tilez", line + 1)
    assert "remove the key or check its spelling" in str(exc.value)


def test_boolean_number_is_refused(tmp_path):
    path, line = write_variant(tmp_path, "  pcus: 1040 ", "  pcus: true ")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    assert (exc.value.key, exc.value.line) == ("socket.pcus", line)


def test_efficiency_above_one_is_refused(tmp_path):
    current = next(ln for ln in preset_text().splitlines() if ln.startswith("  gemm_efficiency:"))
    path, line = write_variant(tmp_path, current, "  gemm_efficiency: 1.5")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    assert (exc.value.key, exc.value.line) == ("calibration.gemm_efficiency", line)


def test_unknown_topology_is_refused(tmp_path):
    path, _ = write_variant(tmp_path, "  topology: fully-connected", "  topology: torus")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    assert exc.value.key == "links.topology"
    assert "torus" in exc.value.problem


def test_retired_topology_name_says_the_new_one(tmp_path):
    path, _ = write_variant(tmp_path, "  topology: fully-connected", "  topology: all-to-all")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    assert exc.value.key == "links.topology"
    assert "fully-connected" in exc.value.problem


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("  p2p_bandwidth: 400.0e+9", "  p2p_bandwidth: 1.0e+300"),
        ("  p2p_bandwidth: 400.0e+9", "  p2p_bandwidth: .inf"),
        ("  clock_hz: 1.6e+9 ", "  clock_hz: .inf "),
        ("  p2p_latency_s: 2.0e-6", "  p2p_latency_s: .nan"),
        ("  sockets: 16 ", "  sockets: 100000 "),
    ],
)
def test_values_must_be_finite_and_bounded(tmp_path, old, new):
    path, _ = write_variant(tmp_path, old, new)
    with pytest.raises(SpecError):
        load_hardware(path)


def test_sram_inconsistent_with_pmus(tmp_path):
    path, _ = write_variant(tmp_path, "  pmu_bytes: 500000 ", "  pmu_bytes: 100000 ")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    assert exc.value.key == "socket"
    assert "sram_bytes" in exc.value.problem


def test_missing_section(tmp_path):
    text = preset_text()
    text = text[: text.index("calibration:")]
    path = tmp_path / "hw.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    assert exc.value.key == "calibration"
    assert exc.value.fix == "add the key"


def test_unknown_preset_name():
    with pytest.raises(SpecError) as exc:
        load_hardware("sn40l-32")
    assert "sn40l-32" in exc.value.problem
    assert "sn40l-16" in exc.value.fix


def test_missing_hardware_file(tmp_path):
    with pytest.raises(SpecError) as exc:
        load_hardware(tmp_path / "nope.yaml")
    assert exc.value.file == str(tmp_path / "nope.yaml")
    assert "not found" in exc.value.problem
