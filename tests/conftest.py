"""Shared fixtures: repository paths, the shipped model specs, a CLI runner, and a stand-in for
rdusim's hardware folder.

Fixtures here are generic on purpose so the spec, IR, compiler and simulator tests can share them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from rdusim.spec import catalog
from rdusim.spec.model import DeepSeekV3Config, LlamaConfig, load_model_config

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO_ROOT / "models"
MAPPINGS_DIR = REPO_ROOT / "mappings"

MODEL_NAMES = ("deepseek-r1", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b")
LLAMA_NAMES = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b")

CliResult = tuple[int, str, str]


def model_path(name: str) -> Path:
    """Path of a shipped model spec, e.g. `model_path("deepseek-r1")`."""
    return MODELS_DIR / f"{name}.yaml"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return MODELS_DIR


@pytest.fixture(scope="session")
def mappings_dir() -> Path:
    return MAPPINGS_DIR


@pytest.fixture(scope="session")
def model_file() -> Callable[[str], Path]:
    """`model_file("llama-3.1-8b")` is the path of a shipped model spec."""
    return model_path


@pytest.fixture(scope="session")
def r1_path() -> Path:
    return model_path("deepseek-r1")


@pytest.fixture(scope="session")
def r1(r1_path: Path) -> DeepSeekV3Config:
    """The DeepSeek-R1 spec (frozen, safe to share across tests)."""
    cfg = load_model_config(r1_path)
    assert isinstance(cfg, DeepSeekV3Config)
    return cfg


@pytest.fixture(scope="session")
def llama_configs() -> dict[str, LlamaConfig]:
    """The three Llama-3.1 specs by name."""
    out: dict[str, LlamaConfig] = {}
    for name in LLAMA_NAMES:
        cfg = load_model_config(model_path(name))
        assert isinstance(cfg, LlamaConfig)
        out[name] = cfg
    return out


@pytest.fixture(scope="session")
def llama8b(llama_configs: dict[str, LlamaConfig]) -> LlamaConfig:
    return llama_configs["llama-3.1-8b"]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[[Sequence[str]], CliResult]:
    """Run `rdusim ARGS` in-process: returns (exit code, stdout, stderr).

    Exceptions that are not user errors propagate, so a bug fails the test loudly.
    """
    from rdusim.cli import main

    def run(args: Sequence[str]) -> CliResult:
        capsys.readouterr()  # drop anything printed before this call
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write `text` to `tmp_path / name` and return the path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


def edited_text(source: Path, replace: dict[str, str | None]) -> str:
    """The text of `source` with top-level keys given new values (`None` deletes the key).

    A replaced key's nested block (its indented lines) goes with it.
    """
    lines = []
    seen = set()
    skipping = False
    for line in source.read_text(encoding="utf-8").splitlines():
        if skipping and line.startswith(" "):
            continue
        skipping = False
        key = line.split(":", 1)[0]
        if key in replace and not line.startswith((" ", "#")):
            seen.add(key)
            skipping = True
            if replace[key] is None:
                continue
            line = f"{key}: {replace[key]}"
        lines.append(line)
    missing = set(replace) - seen
    assert not missing, f"keys not in {source.name}: {sorted(missing)}"
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class EditedSpec:
    path: Path
    text: str

    def line(self, key: str) -> int:
        """1-based line of the first top-level `key:`."""
        for i, line in enumerate(self.text.splitlines(), start=1):
            if line.startswith(f"{key}:"):
                return i
        raise AssertionError(f"{key} not in {self.path.name}")


@pytest.fixture
def edit_spec(tmp_path: Path) -> Callable[..., EditedSpec]:
    """Copy a spec into tmp_path with some top-level keys changed (`None` deletes the key).

    `edit_spec(path, {"hidden_size": "seven-thousand"}).line("hidden_size")` is the line the
    error should name.
    """

    def edit(source: Path, replace: dict[str, str | None], name: str = "edited.yaml"):
        text = edited_text(source, replace)
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return EditedSpec(path, text)

    return edit


@pytest.fixture
def r1_mapping(tmp_path, mappings_dir, models_dir):
    """r1_prefill.yaml copied into tmp_path with text edits (it names its model by name)."""

    def write(*edits: tuple[str, str], name: str = "r1_edited.yaml", text: str | None = None):
        if text is None:
            text = (mappings_dir / "r1_prefill.yaml").read_text(encoding="utf-8")
        for old, new in edits:
            assert old in text, old
            text = text.replace(old, new, 1)
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path, text

    return write


def line_with(text: str, needle: str) -> int:
    """1-based number of the first line of `text` containing `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


@pytest.fixture
def hardware_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary folder holding copies of the shipped presets, found in place of rdusim's
    `hardware/` package folder: a YAML written into it is a shipped preset for the test."""
    folder = tmp_path / "hardware"
    folder.mkdir()
    for path in catalog.shipped_presets().values():
        shutil.copy(path, folder / path.name)
    package_dir = catalog.package_dir
    monkeypatch.setattr(
        catalog, "package_dir", lambda name: folder if name == "hardware" else package_dir(name)
    )
    catalog.shipped_presets.cache_clear()
    yield folder
    catalog.shipped_presets.cache_clear()
