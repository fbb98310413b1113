"""Hardware presets and hardware-spec errors."""

from __future__ import annotations

import json
import re

import pytest

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.catalog import package_dir
from rdusim.spec.hardware import Calibration, Hardware, load_hardware, preset_path, presets
from rdusim.uncertainty.ensemble import ensemble_path


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


def test_presets_are_the_yaml_files_of_the_hardware_folder():
    folder = package_dir("hardware")
    assert presets() == tuple(sorted(p.stem for p in folder.glob("*.yaml")))
    assert {"sn40l-16", "sn40l-8"} <= set(presets())
    # the calibration ensemble lives beside them and is not a preset
    assert ensemble_path().parent == folder and ensemble_path().stem not in presets()
    for name in presets():
        assert preset_path(name) == folder / f"{name}.yaml"
        assert preset_path(name).is_file()


def test_an_unknown_preset_path_lists_the_presets():
    with pytest.raises(SpecError) as exc:
        preset_path("sn40l-32")
    assert "sn40l-32" in exc.value.problem
    assert all(name in exc.value.fix for name in presets())


def _is_value(line: str) -> bool:
    """A numeric leaf: `key: number`, maybe with an inline comment."""
    body = line.split("#", 1)[0]
    if ":" not in body or not body.split(":", 1)[1].strip():
        return False  # a section header, a comment or a blank line
    value = body.split(":", 1)[1].strip()
    return value.replace(".", "").replace("e+", "").replace("e-", "").isdigit()


def _uncommented_values(text: str) -> list[int]:
    """Lines (1-based) of numeric leaves without a comment: on their line, or in a comment block
    just above them or above the run of uncommented keys they close (one block may describe a
    pair such as `config_bytes_per_pcu` / `config_bytes_per_pmu`)."""
    lines = text.splitlines()
    missing = []
    for i, line in enumerate(lines):
        if not _is_value(line) or "#" in line:
            continue
        j = i - 1
        while j >= 0 and _is_value(lines[j]) and "#" not in lines[j]:
            j -= 1  # a key of the same run, itself without a comment of its own
        if j < 0 or not lines[j].lstrip().startswith("#"):
            missing.append(i + 1)
    return missing


@pytest.mark.parametrize("name", presets())
def test_every_preset_value_has_a_source_or_assumption_comment(name):
    """Each numeric leaf of a preset carries a comment on its line or just above it."""
    assert _uncommented_values(preset_text(name)) == []


def test_the_comment_check_finds_an_uncommented_value():
    text = "socket:\n  a: 1 # source\n  # a block\n  b: 2\n  c: 3\n\n  d: 4\n  e: x\n"
    assert _uncommented_values(text) == [7]
    # a preset value whose inline source is dropped is caught: the line above is another value
    text = preset_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("  pcus: 1040"))
    stripped = text.replace(line, "  pcus: 1040")
    assert _uncommented_values(stripped) == [text.splitlines().index(line) + 1]
    bare = preset_text().replace("calibration:\n", "calibration:\n  bare_value: 0.5\n")
    assert len(_uncommented_values(bare)) == 1


def _comment_above(text: str, key: str) -> str:
    """The comment lines directly above a `  key:` line."""
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(f"  {key}:"))
    block = []
    while i > 0 and lines[i - 1].strip().startswith("#"):
        i -= 1
        block.append(lines[i])
    return "\n".join(reversed(block))


def test_link_values_say_they_are_calibrated_with_a_prior():
    """The P2P bandwidth and latency are not published: their comments say they are calibrated
    and give the prior."""
    for key in ("p2p_bandwidth", "p2p_latency_s"):
        comment = _comment_above(preset_text(), key)
        assert "Calibrated" in comment and "Prior" in comment, key


FRACTIONS = (
    "gemm_efficiency",
    "attention_efficiency",
    "simd_efficiency",
    "hbm_efficiency",
    "hbm_usable_fraction",
)
TIMES = ("argument_load_s", "host_round_trip_s")
BANDWIDTHS = ("config_bandwidth",)


@pytest.mark.parametrize("name", presets())
def test_calibration_values_are_fractions_times_or_bandwidths(name):
    hw = load_hardware(name)
    c = hw.calibration
    # every calibration key is one of the three, so a new key has to be classified here
    assert set(Calibration.model_fields) == {*FRACTIONS, *TIMES, *BANDWIDTHS}
    for field in FRACTIONS:
        assert 0 < getattr(c, field) <= 1, field
    for field in TIMES:
        assert 0 < getattr(c, field) < 1e-3, field  # a call's parts take microseconds
    for field in BANDWIDTHS:
        assert 1e9 <= getattr(c, field) <= 1e13, field  # bytes/s: GB/s to 10 TB/s
    # loading a whole socket's program is a matter of microseconds too
    socket = hw.socket
    whole = socket.pcus * socket.config_bytes_per_pcu + socket.pmus * socket.config_bytes_per_pmu
    assert 0 < whole / c.config_bandwidth < 1e-3


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


PROVENANCE = ("Fitted on", "Not fitted", "Prior")


def _calibration_provenance_problems(text: str) -> list[str]:
    """The calibration keys of a preset whose comment does not say what pins them, or says both
    fitted and not fitted (and a line for each key missing or not in the schema)."""
    comments = _calibration_comments(text)
    problems = [f"{key}: no entry" for key in set(Calibration.model_fields) - set(comments)]
    problems += [
        f"{key}: not a calibration key" for key in set(comments) - set(Calibration.model_fields)
    ]
    for key, comment in comments.items():
        if not any(m in comment for m in PROVENANCE):
            problems.append(f"{key}: {comment!r}")
        if "Fitted on" in comment and "Not fitted" in comment:
            problems.append(f"{key}: both fitted and not fitted")
    return problems


@pytest.mark.parametrize("name", presets())
def test_every_calibration_value_says_what_it_was_fitted_on(name):
    """Each calibration key's comment says what pins it: "Fitted on: ..." (the data it was
    fitted on), "Not fitted: ..." or "Prior: ..." (where the value comes from); never both
    fitted and not fitted."""
    assert _calibration_provenance_problems(preset_text(name)) == []


def test_the_provenance_check_refuses_a_bare_comment():
    text = preset_text().replace("  hbm_efficiency:", "  #\n  # Just a number.\n  hbm_efficiency:")
    comments = _calibration_comments(text)
    assert comments["hbm_efficiency"] == "Just a number."
    assert not any(m in comments["hbm_efficiency"] for m in PROVENANCE)


def _old_call_keys(text: str) -> str:
    """A preset as written before calls had parts: software_call_s and hardware_call_s."""
    out = []
    for line in text.splitlines():
        key = line.split(":", 1)[0].strip()
        if key == "config_bandwidth":
            out.append("  software_call_s: 3.5e-4")
        elif key == "argument_load_s":
            out.append("  hardware_call_s: 2.0e-5")
        elif key != "host_round_trip_s":
            out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("keep_new_keys", [False, True])
def test_a_retired_call_key_is_refused_naming_the_new_ones(tmp_path, keep_new_keys):
    text = preset_text()
    if keep_new_keys:  # an old key left beside the new ones
        text = text.replace(
            "  hbm_usable_fraction:", "  software_call_s: 3.5e-4\n  hbm_usable_fraction:"
        )
    else:
        text = _old_call_keys(text)
        assert "  config_bandwidth:" not in text and "  hardware_call_s:" in text
    path = tmp_path / "old.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_hardware(path)
    err = exc.value
    assert err.key == "calibration" and err.file == str(path)
    assert "software_call_s" in err.problem
    for new in ("config_bandwidth", "argument_load_s", "host_round_trip_s"):
        assert new in err.problem, new


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


def _value_line(key: str) -> str:
    """A preset's `  key: value` line (the calibrated values change with each calibration)."""
    match = re.search(rf"^  {key}: \S+", preset_text(), re.M)
    assert match is not None
    return match.group(0)


P2P_BANDWIDTH = _value_line("p2p_bandwidth")
P2P_LATENCY = _value_line("p2p_latency_s")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (P2P_BANDWIDTH, "  p2p_bandwidth: 1.0e+300"),
        (P2P_BANDWIDTH, "  p2p_bandwidth: .inf"),
        ("  clock_hz: 1.6e+9 ", "  clock_hz: .inf "),
        (P2P_LATENCY, "  p2p_latency_s: .nan"),
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
    text = text[: text.index("\ncalibration:") + 1]
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


# --- a new hardware generation is one YAML file ----------------------------------------------

NEW = "sn40x-4"


def new_generation_text() -> str:
    """sn40l-8's preset as a hypothetical 4-socket node with twice the HBM bandwidth (read from
    the folder, not found by name: the folder is scanned once, and the new file is not yet in)."""
    text = (package_dir("hardware") / "sn40l-8.yaml").read_text(encoding="utf-8")
    edits = {
        r"^name: sn40l-8$": f"name: {NEW}",
        r"^    bandwidth: 1\.6e\+12 .*$": "    bandwidth: 3.2e+12        # ASSUMPTION: twice sn40l's",
        r"^  sockets: 8 .*$": "  sockets: 4                  # ASSUMPTION: a half node",
    }
    for pattern, line in edits.items():
        text, n = re.subn(pattern, line, text, flags=re.M)
        assert n == 1, pattern
    return text


def test_a_yaml_dropped_into_the_hardware_folder_is_a_preset(
    hardware_folder, run_cli, tmp_path, monkeypatch
):
    """A new generation needs its YAML file and nothing else: it is a preset name for
    `load_hardware`, `--set hardware=...` and `rdusim list`, and the provenance checks read it
    as they read the presets that ship."""
    (hardware_folder / f"{NEW}.yaml").write_text(new_generation_text(), encoding="utf-8")
    assert presets() == ("sn40l-16", "sn40l-8", NEW)
    hw = load_hardware(NEW)
    assert (hw.name, hw.sockets, hw.socket.hbm.bandwidth) == (NEW, 4, 3.2e12)
    for name in presets():
        text = preset_text(name)
        assert _uncommented_values(text) == [], name
        assert _calibration_provenance_problems(text) == [], name

    monkeypatch.chdir(tmp_path)  # no file of that name here: the preset is what is found
    code, out, err = run_cli(["map", "llama31_8b_decode", "--set", f"hardware={NEW}", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert (report["hardware"], report["sockets"]) == (NEW, 4)
    assert report["throughput_tokens_per_s"] > 0

    code, out, err = run_cli(["list", "--json"])
    assert code == 0, err
    listed = {h["name"]: h for h in json.loads(out)["hardware"]}
    assert list(listed) == list(presets())
    assert listed[NEW] == {"name": NEW, "sockets": 4, "file": str(hardware_folder / f"{NEW}.yaml")}
    code, out, _ = run_cli(["list"])
    assert code == 0 and NEW in out.split("\n\n")[0]


def test_a_dropped_in_preset_without_sources_fails_the_provenance_checks(hardware_folder):
    text = re.sub(r"\s*#.*$", "", new_generation_text(), flags=re.M)  # every comment dropped
    (hardware_folder / f"{NEW}.yaml").write_text(text, encoding="utf-8")
    assert load_hardware(NEW).sockets == 4  # a valid preset ...
    assert _uncommented_values(preset_text(NEW))  # ... that the checks refuse
    assert _calibration_provenance_problems(preset_text(NEW))
