"""`rdusim.validation.calibrate`: the shipped ensemble and presets agree with each other and with
the evidence; writing a calibration patches only the calibrated entries; and a posterior fitted
to a few evidence items has the shape the command reports (the full fit, minutes long, runs in
`tests/test_cli_reproduce.py`)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rdusim.errors import SpecError
from rdusim.spec.hardware import load_hardware, preset_path, presets
from rdusim.uncertainty.ensemble import ENSEMBLE_FILE, Ensemble, shipped_ensemble
from rdusim.uncertainty.parameters import BY_NAME, PARAMETERS
from rdusim.validation import calibrate as cal
from rdusim.validation.items import Use, evidence_dir, load_evidence, shipped_evidence
from tests.evidence_fakes import fake_calibration

NAMES = [p.name for p in PARAMETERS]


def ensemble() -> Ensemble:
    e = shipped_ensemble()
    assert e is not None, "rdusim ships a calibration ensemble"
    return e


# --- the shipped calibration ------------------------------------------------------------------


def test_the_shipped_ensemble_is_a_posterior_of_every_parameter() -> None:
    e = ensemble()
    assert list(e.names) == NAMES
    assert len(e) == cal.MEMBERS and e.seed == cal.SEED
    for name in NAMES:
        values = [e.values(i)[name] for i in range(len(e))]
        # the median the presets hold is the members' median
        assert e.median[name] == pytest.approx(float(np.median(values)), rel=1e-12)
        assert min(values) < max(values), f"{name}: every member alike"
    assert e.discrepancy > 0


def test_the_shipped_ensemble_was_fitted_to_the_evidence_as_it_is() -> None:
    """Its fitted items are exactly the evidence's, and its prior ranges are `priors.yaml`'s: an
    evidence edit that changes the fit without `rdusim calibrate --write` fails here."""
    e, ev = ensemble(), shipped_evidence()
    assert list(e.fitted_items) == ev.ids(Use.FIT)
    assert set(e.parameters) == set(NAMES)
    for name, s in e.parameters.items():
        prior = ev.priors.parameters[name]
        assert (s["prior"]["low"], s["prior"]["high"]) == (prior.low, prior.high), name
        assert s["prior"]["source"]  # the reasoning behind the range travels with it
        assert s["p05"] <= s["p50"] <= s["p95"], name
        assert s["narrowing"] > 0
        assert set(s["pinned_by"]) <= set(e.fitted_items), name
        assert s["unit"] == BY_NAME[name].unit
    # the readings of each shared deployment the evidence favours, weights summing to one
    deployments = {f"{f.source.id}/{d}" for f in ev.files for d in f.deployments}
    assert set(e.readings) <= deployments
    for name, weights in e.readings.items():
        assert len(weights) > 1 and sum(weights.values()) == pytest.approx(1.0), name


def test_parameter_intervals_are_the_members() -> None:
    """Each parameter's printed 90% interval and median are quantiles over the ensemble's
    members (on the parameter's free scale), the same sets every report's interval is priced
    with."""
    e = ensemble()
    for name, s in e.parameters.items():
        p = BY_NAME[name]
        free = [p.to_free(e.values(i)[name]) for i in range(len(e))]
        for key, q in (("p05", 0.05), ("p50", 0.5), ("p95", 0.95)):
            assert s[key] == pytest.approx(p.from_free(float(np.quantile(free, q))), rel=1e-9)


def test_every_narrowed_parameter_names_what_pins_it() -> None:
    """A parameter the evidence narrows (its posterior interval under 0.8 of its prior's, where
    `rdusim calibrate` prints what pins it) names the fitted items that carry that information;
    the maximum batches pin usable HBM, through capacity arithmetic rather than a slope."""
    for name, s in ensemble().parameters.items():
        if s["narrowing"] < 0.8:
            assert s["pinned_by"], f"{name} is narrowed to {s['narrowing']:.2f} by nothing"


@pytest.mark.parametrize("preset", presets())
def test_the_presets_hold_the_ensemble_median(preset: str) -> None:
    """The point values are the ensemble's median, to the four digits the presets keep, and
    writing them again would change nothing."""
    e = ensemble()
    hw = load_hardware(preset)
    for p in PARAMETERS:
        assert p.get(hw) == float(cal.format_value(e.median[p.name])), p.name
        assert p.get(hw) == pytest.approx(e.median[p.name], rel=5e-4), p.name
    text = preset_path(preset).read_text(encoding="utf-8")
    assert cal.patch_sections(text, cal.preset_values(e)) == text


# --- writing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.47982048, "0.4798"), (4.8075e11, "4.808e+11"), (3.2696e-6, "3.27e-06"), (0.5, "0.5")],
)
def test_format_value_keeps_four_significant_digits(value: float, text: str) -> None:
    assert cal.format_value(value) == text
    assert float(text) == pytest.approx(value, rel=5e-4)


YAML = """\
name: x  # gemm_efficiency: 9 (not a calibration entry)
socket:
  gemm_efficiency: 7
calibration:
  # a comment line: gemm_efficiency: 3
  gemm_efficiency: 0.513   # trailing comment
  argument_load_s: 2.1e-5
links:
  p2p_bandwidth: 5.0e+11  # collective bandwidth
  gemm_efficiency: 5
"""


def test_patch_sections_edits_only_the_named_entries() -> None:
    out = cal.patch_sections(
        YAML,
        {
            ("calibration", "gemm_efficiency"): "0.4798",
            ("links", "p2p_bandwidth"): "4.808e+11",
        },
    )
    want = YAML.replace("0.513   #", "0.4798  #").replace("5.0e+11  #", "4.808e+11 #")
    assert out == want  # comments stay in their column while there is room, else one space after


def test_patch_sections_keeps_crlf_line_ends() -> None:
    crlf = YAML.replace("\n", "\r\n")
    out = cal.patch_sections(crlf, {("calibration", "argument_load_s"): "1.943e-05"})
    assert out == crlf.replace("2.1e-5", "1.943e-05")


def test_patch_sections_names_missing_entries() -> None:
    with pytest.raises(KeyError, match=r"calibration\.host_round_trip_s"):
        cal.patch_sections(YAML, {("calibration", "host_round_trip_s"): "1"})
    with pytest.raises(KeyError, match=r"socket\.p2p_bandwidth"):
        cal.patch_sections(YAML, {("socket", "p2p_bandwidth"): "1"})


def test_preset_values_cover_every_parameter() -> None:
    values = cal.preset_values(ensemble())
    assert set(values) == {p.path for p in PARAMETERS}
    for p in PARAMETERS:
        assert values[p.path] == cal.format_value(ensemble().median[p.name])


def test_write_calibration_writes_the_ensemble_and_patched_presets(tmp_path: Path) -> None:
    e = ensemble()
    moved = {n: BY_NAME[n].from_free(BY_NAME[n].to_free(v) + 0.1) for n, v in e.median.items()}
    c = fake_calibration(dataclasses.replace(e, median=moved))
    shipped = {name: preset_path(name).read_bytes() for name in presets()}
    written = cal.write_calibration(c, tmp_path, [preset_path(name) for name in presets()])
    assert [p.name for p in written] == [ENSEMBLE_FILE, *(f"{n}.yaml" for n in presets())]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)
    data = json.loads((tmp_path / ENSEMBLE_FILE).read_text(encoding="utf-8"))
    assert Ensemble.from_dict(data) == c.ensemble
    for name in presets():
        hw = load_hardware(tmp_path / f"{name}.yaml")
        for p in PARAMETERS:
            assert p.get(hw) == float(cal.format_value(moved[p.name])), p.name
        old = preset_path(name).read_text(encoding="utf-8").splitlines()
        new = (tmp_path / f"{name}.yaml").read_text(encoding="utf-8").splitlines()
        assert len(old) == len(new)
        changed = {a.split(":")[0].strip() for a, b in zip(old, new, strict=True) if a != b}
        assert changed == {p.path[1] for p in PARAMETERS}  # only the calibrated entries
        assert preset_path(name).read_bytes() == shipped[name]  # the package is untouched


def test_write_calibration_refuses_a_preset_it_cannot_patch_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """A preset that holds a calibrated entry other than on its own `key: value` line (valid
    YAML, but not patchable in place) is named, with the entry, before any file is written."""
    text = preset_path("sn40l-8").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("  hbm_usable_fraction:"))
    odd = tmp_path / "odd.yaml"
    odd.write_text(text.replace(line, line.replace(": ", ":\n    ")), encoding="utf-8")
    assert load_hardware(odd) == load_hardware("sn40l-8")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SpecError) as exc:
        cal.write_calibration(fake_calibration(), out, [preset_path("sn40l-16"), odd])
    assert exc.value.file == str(odd)
    assert "calibration.hbm_usable_fraction" in exc.value.problem
    assert list(out.iterdir()) == []


def test_relative_spread() -> None:
    values = np.linspace(90.0, 110.0, 1001)
    assert cal.relative_spread(values) == pytest.approx(0.09)
    assert cal.relative_spread([0.0, 0.0, 0.0]) == float("inf")


# --- a small posterior: a real fit on two items (slow) --------------------------------------

SMALL = ("uuaa-llama3-8b-2024-05", "sambanova-blog-2024-09")  # one fitted item each


@pytest.fixture(scope="module")
def small_evidence(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("evidence")
    for name in (*SMALL, "priors"):
        shutil.copy(evidence_dir() / f"{name}.yaml", folder)
    return load_evidence(folder)


@pytest.fixture(scope="module")
def small(small_evidence) -> cal.Calibration:
    return cal.calibrate(small_evidence, draws=32, members=8, seed=3)


@pytest.mark.slow
def test_a_small_posterior_reports_what_the_command_prints(small, small_evidence) -> None:
    d = small.as_dict()
    assert set(d) == {
        "method",
        "seed",
        "members",
        "draws",
        "effective_sample_size",
        "evaluations",
        "discrepancy",
        "parameters",
        "readings",
        "fitted_items",
    }
    assert (d["seed"], d["members"], d["draws"]) == (3, 8, 32)
    assert d["fitted_items"] == small_evidence.ids(Use.FIT) and len(d["fitted_items"]) == 2
    assert 1.0 <= d["effective_sample_size"] <= 32.0
    assert d["evaluations"] > len(NAMES)  # at least one Jacobian
    assert d["readings"] == {}  # neither source shares a deployment
    assert "32 draws" in d["method"]
    assert set(d["parameters"]) == set(NAMES)
    json.dumps(d)  # plain data


@pytest.mark.slow
def test_a_small_posterior_ensemble(small) -> None:
    e = small.ensemble
    assert len(e) == 8 and list(e.names) == NAMES and e.seed == 3
    for name in NAMES:
        assert e.median[name] == pytest.approx(np.median([m[NAMES.index(name)] for m in e.members]))
        s = e.parameters[name]
        assert s["p05"] <= s["p50"] <= s["p95"]
        assert set(s["pinned_by"]) <= set(e.fitted_items)
    # no item of these two sources depends on usable HBM: nothing pins it
    assert e.parameters["hbm_usable_fraction"]["pinned_by"] == []
    assert e.discrepancy > 0


@pytest.mark.slow
def test_a_seed_gives_the_same_posterior(small, small_evidence) -> None:
    again = cal.calibrate(small_evidence, draws=32, members=8, seed=3)
    assert again.ensemble == small.ensemble
    other = cal.calibrate(small_evidence, draws=32, members=8, seed=4)
    assert other.ensemble.members != small.ensemble.members
