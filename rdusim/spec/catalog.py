"""The shipped model specs, mappings and hardware presets, found by name wherever a path is
accepted.

They are package data (`rdusim/models/`, `rdusim/mappings/`, `rdusim/hardware/`), found by
scanning their folder for `*.yaml`: a file dropped in is shipped under its stem, so an installed
rdusim runs `rdusim map r1_prefill` from any directory, and a new hardware generation is one YAML
file. The rule, the same for models and mappings: an existing path wins; otherwise a shipped name,
with or without `.yaml`; otherwise "file not found", listing the shipped names. (A hardware preset
name wins over a path: `rdusim.spec.hardware.load_hardware`.)
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from rdusim.errors import SpecError
from rdusim.spec.yamlio import path_problem

SUFFIX = ".yaml"


def package_dir(folder: str) -> Path:
    """A package-data folder of rdusim (`models`, `mappings`, `hardware`), wherever rdusim is
    installed."""
    return Path(str(resources.files("rdusim").joinpath(folder)))


def _shipped(folder: str) -> dict[str, Path]:
    """Name -> file of the `*.yaml` files in a package-data folder, sorted by name."""
    return {p.stem: p for p in sorted(package_dir(folder).glob(f"*{SUFFIX}"))}


@cache
def shipped_models() -> dict[str, Path]:
    """The shipped model specs by name (`deepseek-r1`, `llama-3.1-8b`, ...)."""
    return _shipped("models")


@cache
def shipped_mappings() -> dict[str, Path]:
    """The shipped mappings by name (`r1_prefill`, `r1_decode`, ...)."""
    return _shipped("mappings")


@cache
def shipped_presets() -> dict[str, Path]:
    """The shipped hardware presets by name (`sn40l-16`, `sn40l-8`, ...): every `*.yaml` in
    `rdusim/hardware/` (its `ensemble.json` is the calibration ensemble, not a preset)."""
    return _shipped("hardware")


def _usable(path: Path) -> bool:
    """`path` exists (a name the operating system refuses is left for the reader to report)."""
    return path_problem(path) is None and path.exists()


def _shipped_name(text: str, shipped: dict[str, Path]) -> Path | None:
    """The shipped file `text` names: a bare name, with or without `.yaml` (never a path)."""
    if not text or Path(text).name != text:
        return None
    return shipped.get(text.removesuffix(SUFFIX))


def not_found_fix(kind: str, shipped: dict[str, Path], where: str) -> str:
    """The fix of a "not found" error: how paths are looked up, and the shipped names."""
    return (
        f"check the path ({where}), or name a shipped {kind}: {', '.join(shipped)} "
        "(an existing path wins over a shipped name; `rdusim list` shows them all)"
    )


def _resolve(text: str, candidates: list[Path], shipped: dict[str, Path], kind: str) -> str:
    """The first existing candidate, else the shipped file named `text`, else an error."""
    if path_problem(text) is not None:
        return text  # the reader says why the operating system refuses the name
    found = next((c for c in candidates if _usable(c)), None)
    if found is not None:
        return text if found == Path(text) else str(found)
    named = _shipped_name(text, shipped)
    if named is not None:
        return str(named)
    where = (
        "relative paths are taken from the current directory"
        if len(candidates) == 1
        else "relative paths are taken from the mapping file's directory, then the current one"
    )
    raise SpecError("file not found", file=text, fix=not_found_fix(kind, shipped, where))


def resolve_mapping(text: str | Path) -> str:
    """The mapping file `text` names: `text` itself when the file exists (kept verbatim, so
    messages show what the user typed), else a shipped mapping's path."""
    return _resolve(str(text), [Path(text)], shipped_mappings(), "mapping")


def resolve_model(text: str | Path, base_dir: Path | None = None) -> str:
    """The model spec `text` names: a path (relative to `base_dir`, the mapping's directory,
    first, then the current directory), else a shipped model's path."""
    path = Path(text)
    candidates = [path] if base_dir is None else [base_dir / path, path]
    return _resolve(str(text), candidates, shipped_models(), "model")
