"""Output files: checked before any work, written together through temporaries, and every
refusal a `SpecError` on the option or argument that named the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError
from rdusim.outputs import output_file, write_files, write_outputs


def test_write_files_all_or_nothing(tmp_path: Path) -> None:
    write_files({tmp_path / "a" / "x.txt": "x", tmp_path / "y.bin": b"\x00\x01"})
    assert (tmp_path / "a" / "x.txt").read_text() == "x"
    assert (tmp_path / "y.bin").read_bytes() == b"\x00\x01"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        write_files({tmp_path / "new.txt": "n", blocker / "sub" / "z.txt": "z"})
    assert not (tmp_path / "new.txt").exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_output_file_refuses_a_directory_showing_a_right_use(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as exc:
        output_file(str(tmp_path), "--trace", "trace.json")
    assert exc.value.key == "--trace" and f"--trace {tmp_path / 'trace.json'}" in str(exc.value)
    with pytest.raises(SpecError) as exc:
        output_file(str(tmp_path), "path", "m.yaml", usage="m.to_yaml('{path}')")
    assert f"m.to_yaml('{tmp_path / 'm.yaml'}')" in (exc.value.fix or "")


def test_write_outputs_names_the_key_of_a_refused_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = blocker / "sub" / "z.txt"
    with pytest.raises(SpecError) as exc:
        write_outputs({target: "z"}, {target: "--out"})
    assert exc.value.key == "--out" and exc.value.fix
