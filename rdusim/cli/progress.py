"""Progress on long work, on stderr and only when a person is watching it (a terminal).

Piped or redirected, stderr carries nothing but errors and notes, so a script can read it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def progress_bar(total: int, desc: str, unit: str) -> Any:
    """A tqdm bar on stderr, shown only on a terminal (one that reports no size gets 80 x 24,
    where tqdm would draw nothing)."""
    import shutil

    from tqdm import tqdm

    shown = stderr_is_tty()
    size = shutil.get_terminal_size((80, 24))
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=not shown,
        ncols=size.columns if shown else None,
        nrows=size.lines if shown else None,
    )


def search_messages() -> Callable[[str], None] | None:
    """The auto-mapper's stages, one line each on a terminal; None otherwise."""
    if not stderr_is_tty():
        return None
    return lambda message: print(f"auto-mapper: {message.strip()}", file=sys.stderr)


def status_line() -> Callable[[str], None] | None:
    """One line on a terminal that each message overwrites; None otherwise. A message is cut
    to the terminal's width less one column: a line that wrapped could not be overwritten."""
    if not stderr_is_tty():
        return None
    import shutil

    width = max(1, shutil.get_terminal_size((80, 24)).columns - 1)

    def show(text: str) -> None:
        sys.stderr.write("\r\033[K" + text[:width])
        sys.stderr.flush()

    return show


def clear_status_line(show: Callable[[str], None] | None) -> None:
    """Erase what `status_line` showed, if it showed anything."""
    if show is not None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
