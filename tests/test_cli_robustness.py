"""Every `rdusim` command under hostile conditions: a reader that closes stdout early, file names
no file system accepts, and operating-system refusals. Never a traceback; user errors exit 2."""

from __future__ import annotations

import errno
import gzip
import io
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from rdusim import cli
from rdusim.cli.commands import map as map_cli
from rdusim.validation import calibrate, check
from tests.conftest import MAPPINGS_DIR, MODELS_DIR
from tests.evidence_fakes import fake_calibration, fake_validation

Cli = Callable[[Sequence[object]], tuple[int, str, str]]
LONG = "x" * 5000
MAP_FAST = ["--set", "batch=1", "--set", "seq_len=16384"]


class ClosedPipe(io.TextIOBase):
    """A stdout whose reader has gone away (`rdusim ... | head -c1`)."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def _commands(tmp: Path) -> dict[str, list[str]]:
    decode = str(MAPPINGS_DIR / "llama31_8b_decode.yaml")
    return {
        "model": ["model", str(MODELS_DIR / "llama-3.1-8b.yaml")],
        "model-json": ["model", str(MODELS_DIR / "llama-3.1-8b.yaml"), "--json"],
        "map": ["map", decode, *MAP_FAST],
        "map-json": ["map", decode, *MAP_FAST, "--json"],
        "sweep": ["sweep", decode, *MAP_FAST, "--jobs", "1", "--out", str(tmp / "sweep")],
        "validate": ["validate"],
        "validate-json": ["validate", "--json"],
        "reproduce": ["reproduce", "table5", "--out", str(tmp / "reproduce")],
        "calibrate": ["calibrate"],
        "calibrate-json": ["calibrate", "--json", "--write", "--out", str(tmp)],
        "fit": ["fit", "deepseek-r1", str(MODELS_DIR / "llama-3.1-8b.yaml")],
        "fit-json": ["fit", "deepseek-r1", "--json"],
        "help": ["--help"],
    }


@pytest.mark.parametrize("name", list(_commands(Path())))
def test_closed_stdout_ends_quietly(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # validate and calibrate fit for minutes before they print: their results are stand-ins
    monkeypatch.setattr(check, "validate", lambda **_: fake_validation())
    monkeypatch.setattr(calibrate, "calibrate", lambda **_: fake_calibration())
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = cli.main(_commands(tmp_path)[name])
    err = capsys.readouterr().err
    # argparse's help swallows the error itself and exits 0; both codes are conventional
    assert code == (0 if name == "help" else cli.EXIT_BROKEN_PIPE), err
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_closed_pipe_in_a_real_process() -> None:
    """`rdusim model ... --json | head -c0`: exit 141 (or 0), nothing on stderr but progress."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rdusim.cli",
            "model",
            str(MODELS_DIR / "deepseek-r1.yaml"),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before rdusim writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, cli.EXIT_BROKEN_PIPE)
    assert "Traceback" not in err and "Exception ignored" not in err, err


# --------------------------------------------------------------------------------------------
# file names no file system accepts


def _mapping_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (MAPPINGS_DIR / "llama31_8b_decode.yaml").read_text(encoding="utf-8")
    assert old in text, old
    path = tmp_path / "edited.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def _assert_user_error(result: tuple[int, str, str], *needles: str) -> str:
    code, out, err = result
    assert code == 2, (out, err)
    assert "Traceback" not in err and "fix:" in err
    for needle in needles:
        assert needle in err, (needle, err)
    assert len(err) < 1000  # a 5000-character name is shown abbreviated
    return err


def test_over_long_model_file_on_the_command_line(run_cli: Cli) -> None:
    _assert_user_error(run_cli(["model", LONG + ".yaml"]), "file name is too long")


def test_over_long_mapping_file(run_cli: Cli) -> None:
    _assert_user_error(run_cli(["map", LONG + ".yaml"]), "file name is too long")


def test_over_long_model_key_in_a_mapping(run_cli: Cli, tmp_path: Path) -> None:
    path = _mapping_with(tmp_path, "model: llama-3.1-8b", "model: " + LONG + ".yaml")
    err = _assert_user_error(run_cli(["map", path]), "model:", "file name is too long")
    assert f"{path}:" in err


def test_over_long_hardware_key_in_a_mapping(run_cli: Cli, tmp_path: Path) -> None:
    path = _mapping_with(tmp_path, "hardware: sn40l-16", f"hardware: {LONG}.yaml")
    _assert_user_error(run_cli(["map", path]), "hardware:", "file name is too long")


@pytest.mark.parametrize("key", ["hardware", "model"])
def test_over_long_file_name_through_set(run_cli: Cli, key: str) -> None:
    decode = MAPPINGS_DIR / "llama31_8b_decode.yaml"
    for command in (["map", decode], ["sweep", decode, "--out", "unused"]):
        _assert_user_error(
            run_cli([*command, "--set", f"{key}={LONG}.yaml"]), f"{key}:", "too long"
        )
    assert not Path("unused").exists()


def test_over_long_hardware_option(run_cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "r"
    _assert_user_error(
        run_cli(["reproduce", "--hardware", LONG + ".yaml", "--out", out]), "--hardware", "too long"
    )
    assert not out.exists()  # checked before any output


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["map", "M", "--trace", LONG], "--trace"),
        (["map", "M", "--out", LONG], "--out"),
        (["sweep", "M", "--out", LONG], "--out"),
        (["reproduce", "--out", LONG], "--out"),
        (["calibrate", "--write", "--out", LONG], "--out"),
    ],
    ids=["trace", "map-out", "sweep-out", "reproduce-out", "calibrate-out"],
)
def test_over_long_output_names(
    run_cli: Cli, monkeypatch: pytest.MonkeyPatch, args: list[str], option: str
) -> None:
    def never(**_: object) -> None:
        raise AssertionError("the fit started before its output was checked")

    monkeypatch.setattr(calibrate, "calibrate", never)
    args = [str(MAPPINGS_DIR / "llama31_8b_decode.yaml") if a == "M" else a for a in args]
    _assert_user_error(run_cli(args), option, "too long")


# --------------------------------------------------------------------------------------------
# operating-system refusals outside the checked paths


def test_an_unexpected_os_error_is_a_user_error(
    run_cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(args: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", "/somewhere/spec.yaml")

    monkeypatch.setattr(map_cli, "map_command", refuse)
    err = _assert_user_error(
        run_cli(["map", "m.yaml"]), "/somewhere/spec.yaml", "Permission denied"
    )
    assert err.startswith("rdusim: error:")


def test_option_errors_name_the_option_not_a_file(run_cli: Cli) -> None:
    code, _, err = run_cli(["model", MODELS_DIR / "llama-3.1-8b.yaml", "--seq-len", "99999999999"])
    assert code == 2
    assert err.startswith("rdusim: error: --seq-len: must be at most 16777216")
    code, _, err = run_cli(["model", MODELS_DIR / "llama-3.1-8b.yaml", "--batch", "99999999999"])
    assert code == 2 and "--batch: must be at most" in err


# --------------------------------------------------------------------------------------------
# spec files that are not UTF-8 text, or nested too deeply: model, mapping and hardware alike

NOT_UTF8 = {
    "latin-1": ("name: café\n".encode("latin-1"), "Latin-1"),
    "utf-16": ("name: x\n".encode("utf-16"), "UTF-16"),
    "gzip": (gzip.compress(b"name: x\n"), "gzip"),
    "binary": (bytes(range(256)) * 4, "binary"),
}


def _spec_command(role: str, path: Path) -> list[object]:
    """A command that reads `path` as a model, a mapping or a hardware file."""
    decode = MAPPINGS_DIR / "llama31_8b_decode.yaml"
    return {
        "model": ["model", path],
        "mapping": ["map", path],
        "hardware": ["map", decode, "--set", f"hardware={path}", *MAP_FAST],
    }[role]


@pytest.mark.parametrize("role", ["model", "mapping", "hardware"])
@pytest.mark.parametrize("encoding", list(NOT_UTF8))
def test_spec_that_is_not_utf8(run_cli: Cli, tmp_path: Path, role: str, encoding: str) -> None:
    data, hint = NOT_UTF8[encoding]
    path = tmp_path / "spec.yaml"
    path.write_bytes(data)
    err = _assert_user_error(run_cli(_spec_command(role, path)), "file is not UTF-8 text", hint)
    assert str(path) in err


@pytest.mark.parametrize("role", ["model", "mapping", "hardware"])
def test_deeply_nested_spec_fails_fast(run_cli: Cli, tmp_path: Path, role: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("name: [" + "[" * 10_000, encoding="utf-8")
    _assert_user_error(run_cli(_spec_command(role, path)), "more than 64 levels")


def test_a_closed_stdout_does_not_lose_the_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rdusim calibrate --write --json | head -c1`: the minutes-long fit is still written, as
    `rdusim reproduce` writes its files whatever becomes of stdout."""
    monkeypatch.setattr(calibrate, "calibrate", lambda **_: fake_calibration())
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = cli.main(["calibrate", "--json", "--write", "--out", str(tmp_path)])
    assert code == cli.EXIT_BROKEN_PIPE
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ensemble.json",
        "sn40l-16.yaml",
        "sn40l-8.yaml",
    ]
