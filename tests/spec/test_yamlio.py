"""Reading spec files with line numbers, and turning validation errors into located messages."""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, PositiveInt

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.yamlio import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    check_path_keys,
    dotted,
    line_of,
    load_model,
    parse_document,
    parse_value,
    path_problem,
    read_document,
    reject_bools,
    shown_value,
    to_plain,
    validate,
)

NESTED = """\
top: 1
section:
  a: 2
  inner:
    b: 3
items:
  - x: 1
  - x: 2
    y: 3
"""


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    b: PositiveInt


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: PositiveInt
    inner: Inner


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top: int
    section: Section
    items: list[dict[str, int]]


# --------------------------------------------------------------------------------------------
# read_document


def test_read_document_keeps_lines(write_file):
    doc = read_document(write_file("a.yaml", NESTED))
    assert line_of(doc, ("top",)) == 1
    assert line_of(doc, ("section",)) == 2
    assert line_of(doc, ("section", "inner", "b")) == 5
    assert line_of(doc, ("items", 1)) == 8
    assert line_of(doc, ("items", 1, "y")) == 9


def test_line_of_stops_at_the_deepest_existing_key(write_file):
    doc = read_document(write_file("a.yaml", NESTED))
    assert line_of(doc, ("section", "inner", "missing")) == 4
    assert line_of(doc, ("section", "nope", "deeper")) == 2
    assert line_of(doc, ("items", 7)) == 6
    assert line_of(doc, ("absent",)) is None
    assert line_of(doc, ()) is None


def test_read_document_json(write_file):
    doc = read_document(write_file("c.json", '{\n  "a": 1,\n  "b": {"c": [1, 2]}\n}\n'))
    assert to_plain(doc) == {"a": 1, "b": {"c": [1, 2]}}
    assert line_of(doc, ("b",)) == 3


def test_missing_file(tmp_path):
    with pytest.raises(SpecError) as exc:
        read_document(tmp_path / "nope.yaml")
    assert exc.value.file == str(tmp_path / "nope.yaml")
    assert exc.value.problem == "file not found"
    assert exc.value.fix


def test_directory_is_not_a_spec(tmp_path):
    with pytest.raises(SpecError, match="directory"):
        read_document(tmp_path)


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_empty_file(write_file, text):
    with pytest.raises(SpecError, match="empty"):
        read_document(write_file("e.yaml", text))


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: 1\nb: [1, 2\nc: 3\n", 3),
        ("a: 1\n  b: 2\n", 2),
        ("a: 1\nb: 'unterminated\n", 3),
    ],
)
def test_malformed_yaml_names_the_line(write_file, text, line):
    path = write_file("m.yaml", text)
    with pytest.raises(SpecError) as exc:
        read_document(path)
    err = exc.value
    assert err.problem.startswith("malformed YAML")
    assert err.line == line
    assert err.file == str(path)
    assert "fix the YAML syntax" in err.fix


# --------------------------------------------------------------------------------------------
# helpers


def test_to_plain_converts_ruamel_containers(write_file):
    plain = to_plain(read_document(write_file("a.yaml", NESTED)))
    assert type(plain) is dict
    assert type(plain["items"]) is list
    assert type(plain["section"]["inner"]) is dict
    assert plain == {
        "top": 1,
        "section": {"a": 2, "inner": {"b": 3}},
        "items": [{"x": 1}, {"x": 2, "y": 3}],
    }


def test_to_plain_stringifies_keys():
    assert to_plain({1: [{"a": 2}]}) == {"1": [{"a": 2}]}


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), ""),
        (("a",), "a"),
        (("a", "b"), "a.b"),
        (("kernels", 0, "ops"), "kernels[0].ops"),
        ((0,), "[0]"),
        (("a", 1, 2, "b"), "a[1][2].b"),
    ],
)
def test_dotted(path, text):
    assert dotted(path) == text


def test_reject_bools():
    assert reject_bools(3, int) == 3
    assert reject_bools(True, bool) is True
    with pytest.raises(ValueError, match="boolean"):
        reject_bools(True, int)


# --------------------------------------------------------------------------------------------
# validate / load_model


def test_load_model_valid(write_file):
    doc = load_model(Doc, write_file("a.yaml", NESTED))
    assert doc.section.inner.b == 3


def test_single_error_is_a_located_spec_error(write_file):
    path = write_file("a.yaml", NESTED.replace("    b: 3", "    b: -3"))
    with pytest.raises(SpecError) as exc:
        load_model(Doc, path)
    err = exc.value
    assert (err.key, err.line, err.file) == ("section.inner.b", 5, str(path))
    assert "-3" in err.problem
    assert err.fix == "use a positive value"
    assert str(err) == (f"{path}:5: section.inner.b: {err.problem}\n  fix: use a positive value")


def test_several_errors_are_reported_together(write_file):
    text = NESTED.replace("top: 1", "top: one").replace("  a: 2", "  a: 2\n  extra: 1")
    path = write_file("a.yaml", text)
    with pytest.raises(SpecErrors) as exc:
        load_model(Doc, path)
    by_key = {e.key: e for e in exc.value.errors}
    assert set(by_key) == {"top", "section.extra"}
    assert by_key["top"].line == 1
    assert by_key["section.extra"].line == 4
    assert by_key["section.extra"].fix == "remove the key or check its spelling"
    rendered = str(exc.value)
    assert rendered.count("fix:") == 2


def test_a_misspelt_key_suggests_the_nearest_key_of_its_section(write_file):
    path = write_file("a.yaml", NESTED.replace("    b: 3", "    b: 3\n    bb: 4"))
    with pytest.raises(SpecError) as exc:
        load_model(Doc, path)
    assert exc.value.key == "section.inner.bb"
    assert exc.value.fix == "did you mean 'b'? remove the key or check its spelling"


class Choice(BaseModel):
    tier: Literal["hbm", "ddr"]


def test_a_misspelt_choice_suggests_the_nearest_allowed_value():
    with pytest.raises(SpecError) as exc:
        validate(Choice, {"tier": "dr"}, file="c.yaml")
    assert exc.value.fix == "did you mean 'ddr'? use one of the allowed values the message lists"
    with pytest.raises(SpecError) as exc:
        validate(Choice, {"tier": "xyzzy"}, file="c.yaml")  # nothing close: no guess
    assert exc.value.fix == "use one of the allowed values the message lists"


def test_errors_in_lists_carry_the_index(write_file):
    path = write_file("a.yaml", NESTED.replace("    y: 3", "    y: three"))
    with pytest.raises(SpecError) as exc:
        load_model(Doc, path)
    assert exc.value.key == "items[1].y"
    assert exc.value.line == 9


def test_validate_with_prefix_and_without_document():
    with pytest.raises(SpecError) as exc:
        validate(Inner, {"b": 0}, file="m.yaml", prefix=("outer",))
    assert exc.value.key == "outer.b"
    assert exc.value.line is None


def test_missing_key_has_no_got_suffix():
    with pytest.raises(SpecError) as exc:
        validate(Inner, {}, file="m.yaml")
    assert exc.value.key == "b"
    assert "got" not in exc.value.problem
    assert exc.value.fix == "add the key"


# --------------------------------------------------------------------------------------------
# SpecError itself


def test_spec_error_render():
    err = SpecError("bad value", file="f.yaml", key="a.b", line=7, fix="change it")
    assert str(err) == "f.yaml:7: a.b: bad value\n  fix: change it"
    assert str(SpecError("oops")) == "<input>: oops"


def test_spec_error_located_fills_only_what_is_missing():
    err = SpecError("bad", key="k", fix="f").located("m.yaml", 3)
    assert (err.file, err.line, err.key, err.fix) == ("m.yaml", 3, "k", "f")
    kept = SpecError("bad", file="a.yaml", line=1).located("b.yaml", 9)
    assert (kept.file, kept.line) == ("a.yaml", 1)


@settings(max_examples=40, deadline=None)
@given(
    keys=st.lists(
        st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True).filter(
            lambda k: k not in ("null", "true", "false")
        ),
        min_size=1,
        max_size=4,
        unique=True,
    ),
    depth=st.integers(0, 3),
)
def test_line_of_matches_the_text(tmp_path_factory, keys, depth):
    """For a generated nested mapping, line_of finds each key on the line that spells it."""
    lines = []
    for i, key in enumerate(keys):
        lines.append("  " * min(i, depth) + f"{key}:" + ("" if i < len(keys) - 1 else " 1"))
    path = tmp_path_factory.mktemp("lo") / "g.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = read_document(path)
    # walk the nesting the text encodes
    walk: list[str] = []
    for i, key in enumerate(keys):
        level = min(i, depth)
        walk = [*walk[:level], key]
        assert line_of(doc, tuple(walk)) == i + 1


# --------------------------------------------------------------------------------------------
# inputs that are not UTF-8 text


def _write_bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "hint"),
    [
        ("name: café\n".encode("latin-1"), "Latin-1"),
        ("name: x\n".encode("utf-16"), "UTF-16"),
        (gzip.compress(b"name: x\n"), "gzip"),
        (random.Random(7).randbytes(256), "binary"),
    ],
    ids=["latin-1", "utf-16", "gzip", "random"],
)
def test_not_utf8_is_a_spec_error(tmp_path, data, hint):
    path = _write_bytes(tmp_path, data)
    with pytest.raises(SpecError) as exc:
        read_document(path)
    text = str(exc.value)
    assert "file is not UTF-8 text" in text and hint in text
    assert str(path) in text and exc.value.fix


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    doc = read_document(_write_bytes(tmp_path, b"\xef\xbb\xbfname: x\n"))
    assert doc["name"] == "x"


# --------------------------------------------------------------------------------------------
# size and nesting limits


def _nested_flow(depth: int, closed: bool = True) -> str:
    return "[" * depth + ("]" * depth if closed else "")


def _nested_block(depth: int) -> str:
    return "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v\n"


@pytest.mark.parametrize(
    "text",
    [_nested_flow(10_000, closed=False), _nested_flow(10_000), _nested_block(200)],
    ids=["open-flow", "closed-flow", "block"],
)
def test_deep_nesting_fails_fast_and_names_the_limit(text):
    with pytest.raises(SpecError, match=f"more than {MAX_DEPTH} levels"):
        parse_document(text, file="deep.yaml")


def test_nesting_up_to_the_limit_loads():
    doc = parse_document(f"x: {_nested_flow(MAX_DEPTH - 1)}", file="ok.yaml")
    depth, node = 0, doc["x"]
    while node:
        depth, node = depth + 1, node[0]
    assert depth == MAX_DEPTH - 2  # the innermost list is empty


def test_alias_expansion_is_bounded():
    """A "billion laughs" document: 10 levels of 10 aliases each."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    with pytest.raises(SpecError, match=f"more than {MAX_NODES} values"):
        parse_document("\n".join(lines), file="lol.yaml")


def test_oversized_file_is_refused(tmp_path):
    path = _write_bytes(tmp_path, b"# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    with pytest.raises(SpecError, match=f"larger than {MAX_FILE_BYTES} bytes"):
        read_document(path)


# --------------------------------------------------------------------------------------------
# values ruamel cannot construct, and text that cannot be printed


@pytest.mark.parametrize(
    "text", ["x: !!bool maybe", "x: !!int abc", "x: !!timestamp 2001-13-99", "x: 1" + "0" * 5000]
)
def test_unconstructible_values_are_spec_errors(text):
    with pytest.raises(SpecError, match="cannot read a value"):
        parse_document(text, file="tagged.yaml")


def test_surrogate_escape_names_its_key():
    with pytest.raises(SpecError) as exc:
        parse_document('a:\n  name: "\\udc80"\n', file="s.yaml")
    assert exc.value.key == "a.name" and exc.value.line == 2


# --------------------------------------------------------------------------------------------
# file names


def test_path_problem():
    assert path_problem("x" * 5000) == "the file name is too long (5000 characters)"
    assert path_problem("a\0b") == "the file name contains a NUL character"
    assert path_problem("no/such/file.yaml") is None


def test_over_long_spec_name_is_a_spec_error():
    with pytest.raises(SpecError, match="too long") as exc:
        read_document("x" * 5000 + ".yaml")
    assert len(str(exc.value)) < 400  # the name is shown abbreviated


def test_check_path_keys_names_key_and_line(tmp_path):
    doc = parse_document(f"name: m\nmodel: {'m' * 300}.yaml\n", file="m.yaml")
    with pytest.raises(SpecError, match="too long") as exc:
        check_path_keys(
            to_plain(doc), [("model",), ("hardware",)], file="m.yaml", doc=doc, base=tmp_path
        )
    assert (exc.value.key, exc.value.line) == ("model", 2)


# --------------------------------------------------------------------------------------------
# --set values and long values in messages


def test_parse_value_of_deep_nesting_is_quick_text():
    text = _nested_flow(10_000, closed=False)
    assert parse_value(text) == text


def test_shown_value_is_cut_short():
    assert shown_value(7) == "7"
    long = shown_value("y" * 10_000)
    assert len(long) < 120 and "10002 characters" in long


# --- parsed files kept by path and content --------------------------------------------------


def _counting_parser(monkeypatch) -> list[str]:
    from rdusim.spec import yamlio

    parsed: list[str] = []
    real = yamlio.parse_document

    def counting(data, *, file):
        parsed.append(file)
        return real(data, file=file)

    monkeypatch.setattr(yamlio, "parse_document", counting)
    yamlio.clear_parsed()
    return parsed


def test_a_file_read_again_is_parsed_once_and_each_read_is_its_own_copy(tmp_path, monkeypatch):
    from rdusim.spec.yamlio import line_of, read_document

    parsed = _counting_parser(monkeypatch)
    f = tmp_path / "m.yaml"
    f.write_text("name: a\nnested:\n  seq_len: 4096\n")
    first = read_document(f)
    first["nested"]["seq_len"] = 1  # a caller's change stays its own
    second = read_document(f)
    assert parsed == [str(f)]
    assert second["nested"]["seq_len"] == 4096
    assert line_of(second, ("nested", "seq_len")) == 3


def test_a_file_is_parsed_again_when_its_content_or_its_path_differs(tmp_path, monkeypatch):
    from rdusim.spec.yamlio import read_document

    parsed = _counting_parser(monkeypatch)
    f, g = tmp_path / "m.yaml", tmp_path / "n.yaml"
    f.write_text("seq_len: 4096\n")
    assert read_document(f)["seq_len"] == 4096
    f.write_text("seq_len: 8192\n")  # the content
    assert read_document(f)["seq_len"] == 8192
    g.write_text("seq_len: 8192\n")  # the path (its errors name it)
    assert read_document(g)["seq_len"] == 8192
    assert parsed == [str(f), str(f), str(g)]
