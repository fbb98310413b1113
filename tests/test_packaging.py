"""A built wheel, installed away from the checkout, runs the shipped models and mappings by name.

The editable install used for development hides missing package data (the files are found in the
checkout), so this builds a wheel from a copy of the sources, installs it into a fresh virtual
environment and runs the commands from an empty directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600

pytestmark = pytest.mark.slow


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command; its stdout, or a failure showing both streams."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (args, done.returncode, done.stdout[-4000:], done.stderr[-4000:])
    return done.stdout


def _source_copy(dest: Path) -> Path:
    """The files a build reads, copied so that building leaves nothing in the checkout."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", *(p.name for p in REPO_ROOT.glob("LICENSE*"))):
        shutil.copy2(REPO_ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO_ROOT / "rdusim", dest / "rdusim", ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the venv's bin directory, an environment that runs it), with rdusim from the wheel.

    `--system-site-packages` lends the venv rdusim's dependencies without downloading them;
    the wheel is installed with `--ignore-installed`, so the venv's own copy is the one imported.
    """
    root = tmp_path_factory.mktemp("packaging")
    src = _source_copy(root / "src")
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", src, "--no-deps", "-w", dist], cwd=root)
    (wheel,) = dist.glob("rdusim-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], cwd=root)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    pip = [python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", wheel]
    _run(pip, cwd=root)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return bin_dir, env


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("empty")


def test_the_venv_imports_the_wheel(installed, empty_dir: Path) -> None:
    bin_dir, env = installed
    code = "import rdusim; print(rdusim.__file__)"
    imported = Path(_run([bin_dir / "python", "-c", code], empty_dir, env).strip())
    assert imported.is_relative_to(bin_dir.parent), imported


def test_rdusim_list(installed, empty_dir: Path) -> None:
    bin_dir, env = installed
    out = _run([bin_dir / "rdusim", "list", "--json"], empty_dir, env)
    cat = json.loads(out)
    assert {m["name"] for m in cat["mappings"]} >= {"r1_prefill", "r1_decode"}
    assert all(Path(m["file"]).is_relative_to(bin_dir.parent) for m in cat["models"])
    assert "r1_prefill" in _run([bin_dir / "rdusim", "list"], empty_dir, env)


def test_rdusim_map_by_name(installed, empty_dir: Path) -> None:
    bin_dir, env = installed
    report = json.loads(_run([bin_dir / "rdusim", "map", "r1_prefill", "--json"], empty_dir, env))
    assert (report["mapping"], report["model"], report["seq_len"]) == (
        "r1_prefill",
        "deepseek-r1",
        131072,
    )


def test_rdusim_model_by_name(installed, empty_dir: Path) -> None:
    bin_dir, env = installed
    report = json.loads(
        _run([bin_dir / "rdusim", "model", "deepseek-r1", "--json"], empty_dir, env)
    )
    assert report["model"] == "deepseek-r1"


def test_rdusim_validate(installed, empty_dir: Path) -> None:
    """Exit 0: every cell within tolerance, or a miss listed as known."""
    bin_dir, env = installed
    _run([bin_dir / "rdusim", "validate"], empty_dir, env)
    assert not any(empty_dir.iterdir()), "validate wrote into the current directory"
