"""Output files: checked before any work is done, then written together through temporaries.

A path the operating system cannot use, a directory where a file is meant, a parent that cannot be
written, or a refusal while writing (a full disk, a read-only file system) is a `SpecError` on
the option or argument that named the file; nothing is left half-written (`write_files`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from rdusim.errors import SpecError
from rdusim.spec.yamlio import check_path

# How a fix shows an output being given: an option and its value on the command line.
USAGE = "{key} {path}"


def _nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists (`.` or `/` at worst)."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def _check_parent(path: Path, key: str) -> None:
    """The nearest existing ancestor of `path` must be a directory that may be written."""
    ancestor = _nearest_existing(path.parent)
    if not ancestor.is_dir():
        raise SpecError(
            f"cannot write here: {ancestor} is a file, not a directory",
            file=str(path),
            key=key,
            fix="choose a path whose parent directories are directories (or do not exist yet)",
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise SpecError(
            f"cannot write here: no permission to write in {ancestor}",
            file=str(path),
            key=key,
            fix="choose a directory you may write in",
        )


def _named(text: str, key: str, example: str, usage: str) -> Path:
    """A non-empty path the operating system can use."""
    if not text.strip():
        raise SpecError(
            "is empty", key=key, fix=f"name a path, e.g. {usage.format(key=key, path=example)}"
        )
    check_path(text, file=text, key=key)
    return Path(text)


def output_file(text: str, key: str, example: str, *, usage: str = USAGE) -> Path:
    """Check an output file given on option (or argument) `key` before any work is done;
    `usage` shows how to give one in a fix."""
    path = _named(text, key, example, usage)
    if path.is_dir():
        raise SpecError(
            "is a directory, not a file",
            file=str(path),
            key=key,
            fix=f"name a file to write, e.g. {usage.format(key=key, path=path / example)}",
        )
    _check_parent(path, key)
    return path


def output_dir(text: str, key: str, names: Sequence[str]) -> Path:
    """Check an output directory (created if missing) and the `names` to be written in it."""
    out = _named(text, key, "out", USAGE)
    if out.exists() and not out.is_dir():
        raise SpecError(
            "exists and is not a directory",
            file=str(out),
            key=key,
            fix="name a directory (it is created if missing)",
        )
    _check_parent(out / "x", key)
    for name in names:
        if (out / name).is_dir():
            raise SpecError(
                "is a directory, not a file",
                file=str(out / name),
                key=key,
                fix=f"remove that directory or name another {key} directory",
            )
    return out


_WRITE_FIXES = {
    errno.ENOSPC: "free some space on that disk, or write somewhere else",
    errno.EDQUOT: "free some of your disk quota, or write somewhere else",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.EACCES: "choose a location you may write in",
    errno.EPERM: "choose a location you may write in",
}


def write_outputs(files: Mapping[Path, str | bytes], keys: Mapping[Path, str]) -> None:
    """Write all `files` at once; an operating-system refusal is a `SpecError` on the option
    (`keys[path]`) that named the file."""
    try:
        write_files(files)
    except OSError as exc:
        failed = Path(exc.filename) if isinstance(exc.filename, str) else None
        # the refused name is the file, its temporary sibling, or a directory on its way
        path = next(
            (p for p in files if failed is not None and p.is_relative_to(failed.parent)),
            next(iter(files)),
        )
        raise SpecError(
            f"cannot write the file: {exc.strerror or exc}",
            file=str(path),
            key=keys.get(path),
            fix=_WRITE_FIXES.get(
                exc.errno or 0,
                "check that its directory exists or can be created, and that you may write there",
            ),
        ) from None


def write_files(files: Mapping[Path, str | bytes]) -> None:
    """Write every file via a temporary sibling, then rename them all.

    All contents are written to temporaries first, so an error while writing leaves no output
    half-written (and, before the renames start, none of the outputs changed). Temporaries have
    unique names, so two runs writing the same directory do not collide. An existing device or
    pipe (`/dev/null`) is written in place, since a rename would replace it; a symlink keeps
    pointing where it did.
    """
    staged: list[tuple[Path, Path]] = []
    in_place: list[tuple[Path, bytes]] = []
    try:
        for path, data in files.items():
            raw = data if isinstance(data, bytes) else data.encode("utf-8", "backslashreplace")
            target = _resolved(path)
            if target.exists() and not target.is_file():
                in_place.append((target, raw))
            else:
                staged.append((_stage(target, raw), target))
        for target, raw in in_place:
            target.write_bytes(raw)
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise


def _resolved(path: Path) -> Path:
    """The file a write should land in: a symlink's target, so the link itself survives."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _stage(target: Path, raw: bytes) -> Path:
    """A temporary file beside `target` holding `raw`, with the mode `target` will have."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:64]}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, _mode_for(target))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _mode_for(target: Path) -> int:
    """An existing file's permissions, or what a plain `open()` would create under the umask."""
    with contextlib.suppress(OSError):
        return target.stat().st_mode & 0o7777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
