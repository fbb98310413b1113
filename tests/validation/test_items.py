"""`rdusim.validation.items`: the shipped evidence (its size, its sources, every item usable as
its `use` says, each deployment's first reading the mapping as shipped) and the schema's errors
on small evidence folders written here."""

from __future__ import annotations

import functools
import shutil
import textwrap
from enum import Enum
from pathlib import Path

import pytest

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.mapping import load_mapping
from rdusim.uncertainty.parameters import PARAMETERS
from rdusim.validation.items import (
    PRIORS_FILE,
    Bound,
    Item,
    Use,
    evidence_dir,
    load_evidence,
    shipped_evidence,
)


@pytest.fixture(scope="module")
def evidence():
    return shipped_evidence()


# --- the shipped evidence ------------------------------------------------------------------------


def test_shipped_evidence_loads_with_enough_fitted_items_from_enough_sources(evidence):
    used = evidence.ids(Use.FIT, Use.HOLDOUT)
    assert len(used) >= 12
    assert len({evidence.source_of(i).id for i in used}) >= 4
    assert evidence.ids(Use.FIT), "nothing to fit"
    # ids are source/item, and every yaml in the folder but the priors is a source
    files = sorted(p.stem for p in evidence_dir().glob("*.yaml") if p.name != PRIORS_FILE)
    assert sorted(s.id for s in evidence.sources) == files
    for item_id in evidence.ids():
        source, _, item = item_id.partition("/")
        assert evidence.item(item_id).id == item
        assert evidence.source_of(item_id).id == source


def test_every_source_says_what_when_and_where(evidence):
    for s in evidence.sources:
        assert s.title.strip(), s.id
        assert s.date.strip(), s.id
        assert s.url.startswith(("http://", "https://")), s.id
        # a year, a month or a day; or `undated` when the source gives none (said so, not blank)
        assert s.date == "undated" or s.date[:4].isdigit(), s.id


def test_every_fitted_or_held_out_item_has_a_measure(evidence):
    for item_id in evidence.ids(Use.FIT, Use.HOLDOUT):
        item = evidence.item(item_id)
        assert item.measure is not None, item_id
        dep = evidence.deployment(item_id)
        assert (dep is None) == (item.measure.deployment is None), item_id
        assert dep.mapping if dep else item.measure.mapping, item_id


def test_every_predicted_item_says_what_its_source_leaves_open(evidence):
    """A fitted or held-out item writes down its unstated configuration: as notes
    (`unstated`), as choices of its own or of the deployment it shares, or as choices its
    figure is the largest over."""
    for item_id in evidence.ids(Use.FIT, Use.HOLDOUT):
        item = evidence.item(item_id)
        m = item.measure
        dep = evidence.deployment(item_id)
        assert m is not None
        open_ = {**item.unstated, **m.unstated, **m.over, **(dep.unstated if dep else {})}
        assert open_, item_id


def test_evidence_counts_of_the_goal(evidence):
    """At least 12 items from at least 4 sources that do not share an author list, each with
    its source; the items rdusim cannot express kept, each with why."""
    used = evidence.ids(Use.FIT, Use.HOLDOUT)
    sources = {evidence.source_of(i).id: evidence.source_of(i) for i in used}
    assert len(used) >= 12
    assert len({s.authors for s in sources.values()}) >= 4
    kept = evidence.ids(Use.CONTEXT)
    assert kept and all(evidence.item(i).reason for i in kept)


def test_every_context_item_says_why(evidence):
    for item_id in evidence.ids(Use.CONTEXT):
        reason = evidence.item(item_id).reason
        assert reason is not None and reason.strip(), item_id


def test_every_item_value_is_consistent_with_its_bound(evidence):
    for item_id in evidence.ids():
        item = evidence.item(item_id)
        assert 0 < item.low <= item.high, item_id
        if item.bound == Bound.RANGE:
            assert item.low < item.high, item_id
            assert item.central == pytest.approx((item.low * item.high) ** 0.5)
        else:
            assert item.low == item.high == item.central


def test_priors_cover_exactly_the_calibrated_parameters(evidence):
    assert set(evidence.priors.parameters) == {p.name for p in PARAMETERS}
    for name, prior in evidence.priors.parameters.items():
        assert 0 < prior.low < prior.high, name
        assert prior.source.strip(), name
    assert 0 < evidence.priors.discrepancy.low < evidence.priors.discrepancy.high


def field_value(spec, path: str):
    value = functools.reduce(getattr, path.split("."), spec)
    return value.value if isinstance(value, Enum) else value


def deployments(evidence):
    return [
        (f.source.id, name, dep)
        for f in evidence.files
        for name, dep in f.deployments.items()
        if dep.unstated
    ]


def test_the_evidence_has_deployments_with_open_choices(evidence):
    assert deployments(evidence)


def test_each_deployments_first_reading_is_the_mapping_as_shipped(evidence):
    """The first choice of every open setting is the mapping's own, so reading 0 of a shared
    deployment is the shipped mapping (with the deployment's settings) as it is."""
    for source, name, dep in deployments(evidence):
        rm = load_mapping(dep.mapping, list(dep.set))
        for key, choices in dep.unstated.items():
            first = choices[0]
            where = f"{source}/{name}: {key}"
            if isinstance(first, list):  # a labelled choice: a list of --set strings
                for setting in first:
                    path, _, value = setting.partition("=")
                    assert str(field_value(rm.spec, path)) == value, where
            else:
                assert field_value(rm.spec, key) == first, where
            # and every other choice is a real, different setting of that field
            for other in choices[1:]:
                if not isinstance(other, list):
                    assert other != first, where
                    changed = load_mapping(dep.mapping, [*dep.set, f"{key}={other}"])
                    assert field_value(changed.spec, key) == other, where


# --- schema errors -------------------------------------------------------------------------------

SOURCE = """\
source: {id: toy, title: A toy source, authors: Someone, date: '2024-05-01', url: 'https://example.com', kind: paper}
deployments:
  dep: {mapping: r1_prefill, unstated: {orchestration: [software, hardware]}}
"""


def write_folder(tmp_path: Path, items: str, source: str = SOURCE, name: str = "toy") -> Path:
    shutil.copy(evidence_dir() / PRIORS_FILE, tmp_path / PRIORS_FILE)
    (tmp_path / f"{name}.yaml").write_text(
        source + "items:\n" + textwrap.indent(textwrap.dedent(items), "  "), encoding="utf-8"
    )
    return tmp_path


FIT_ITEM = """\
- id: {id}
  quantity: a time
  where: Table 1
  value: 1.5
  unit: s
  precision: 0.01
  use: fit
  measure: {{metric: total_latency_s, deployment: {dep}}}
"""


def errors_of(folder: Path) -> str:
    with pytest.raises((SpecError, SpecErrors)) as info:
        load_evidence(folder)
    return str(info.value)


def test_a_small_valid_folder_loads(tmp_path):
    ev = load_evidence(write_folder(tmp_path, FIT_ITEM.format(id="a", dep="dep")))
    assert ev.ids() == ["toy/a"]
    assert ev.deployment("toy/a").mapping == "r1_prefill"
    assert ev.ids(Use.CONTEXT) == []


def test_duplicate_item_ids_are_an_error(tmp_path):
    items = FIT_ITEM.format(id="a", dep="dep") + FIT_ITEM.format(id="a", dep="dep")
    msg = errors_of(write_folder(tmp_path, items))
    assert "item ids repeat: a" in msg
    assert "toy.yaml" in msg


def test_a_measure_naming_an_unknown_deployment_is_an_error(tmp_path):
    msg = errors_of(write_folder(tmp_path, FIT_ITEM.format(id="a", dep="table9")))
    assert "item a names an unknown deployment 'table9'" in msg


def test_a_context_item_without_a_reason_is_an_error(tmp_path):
    items = """\
    - {id: c, quantity: q, where: w, value: 2.0, unit: s, precision: 0.01, use: context}
    """
    msg = errors_of(write_folder(tmp_path, items))
    assert "context item says why" in msg and "(reason)" in msg
    assert "items[0]" in msg


@pytest.mark.parametrize(
    ("bound", "value"),
    [("range", "2.0"), ("value", "[2.0, 5.0]")],
    ids=["range-with-one-number", "pair-without-range"],
)
def test_a_range_value_must_be_a_pair_and_only_for_a_range(tmp_path, bound, value):
    items = f"""\
    - {{id: r, quantity: q, where: w, value: {value}, unit: '%', bound: {bound}, precision: 0.1,
        use: context, reason: not expressible}}
    """
    msg = errors_of(write_folder(tmp_path, items))
    assert "a range item's value is [low, high]" in msg


def test_a_fitted_item_needs_a_measure(tmp_path):
    items = """\
    - {id: f, quantity: q, where: w, value: 2.0, unit: s, precision: 0.01, use: fit}
    """
    assert "a fit item needs a measure" in errors_of(write_folder(tmp_path, items))


def test_a_source_id_must_match_its_file_name(tmp_path):
    msg = errors_of(write_folder(tmp_path, FIT_ITEM.format(id="a", dep="dep"), name="other"))
    assert "source id 'toy' differs from the file's name" in msg


def test_every_bad_file_is_reported_at_once(tmp_path):
    write_folder(tmp_path, FIT_ITEM.format(id="a", dep="nope"))
    second = SOURCE.replace("id: toy", "id: two")
    (tmp_path / "two.yaml").write_text(
        second + "items:\n" + textwrap.indent(FIT_ITEM.format(id="b", dep="gone"), "  "),
        encoding="utf-8",
    )
    msg = errors_of(tmp_path)
    assert "unknown deployment 'nope'" in msg and "unknown deployment 'gone'" in msg


def test_priors_must_cover_every_parameter(tmp_path):
    write_folder(tmp_path, FIT_ITEM.format(id="a", dep="dep"))
    text = (tmp_path / PRIORS_FILE).read_text(encoding="utf-8")
    start = text.index("  simd_efficiency:")
    end = text.index("  hbm_efficiency:")
    (tmp_path / PRIORS_FILE).write_text(text[:start] + text[end:], encoding="utf-8")
    assert "missing: simd_efficiency" in errors_of(tmp_path)


def test_item_model_refuses_a_bad_range_directly():
    with pytest.raises(ValueError, match=r"\[low, high\]"):
        Item(
            id="x",
            quantity="q",
            where="w",
            value=3.0,
            unit="s",
            bound="range",
            precision=0.1,
            use="context",
            reason="r",
        )
