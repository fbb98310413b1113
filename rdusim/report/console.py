"""Plain-text tables and paragraphs for the terminal, fitted to its width (no dependency).

Output is plain text whether or not stdout is a terminal, so pipes, files and tests see the same
characters. Long cells wrap onto continuation lines rather than push a row past the width.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence

DEFAULT_WIDTH = 120  # when stdout is not a terminal and COLUMNS is unset
MIN_WIDTH = 40  # narrower than this, tables overflow rather than wrap every word
GAP = "  "  # between table columns


def terminal_width() -> int:
    """COLUMNS if set, else the terminal's width, else DEFAULT_WIDTH (a pipe or a file)."""
    if "COLUMNS" in os.environ or _is_tty():
        width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    else:
        width = DEFAULT_WIDTH
    return max(MIN_WIDTH, width)


def _is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """1.23e9 -> '1.23 G' + unit."""
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".rstrip()


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"


def _time_unit(value: float) -> tuple[float, str]:
    if value >= 1:
        return 1.0, "s"
    if value >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"


def sig3(value: float) -> str:
    """`value` to three significant digits and never with an exponent: 0.0123, 5.61, 102,
    1060 (where '{:.3g}' would print 1.06e+03)."""
    text = f"{value:.3g}"
    if "e" not in text or not math.isfinite(value):
        return text
    rounded = float(text)
    return f"{rounded:.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"


def seconds_with(value: float | None, interval: dict[str, float] | None) -> str:
    """'8.727 s (7.91–9.93)': a time and its 90% interval in the time's unit (an end past
    1000 of that unit stays a plain number: '937.229 ms (840–1060)')."""
    text = seconds(value)
    if value is None or not interval:
        return text
    scale, _ = _time_unit(value)
    return f"{text} ({sig3(interval['p05'] * scale)}–{sig3(interval['p95'] * scale)})"


def number_with(value: float | None, interval: dict[str, float] | None, fmt: str = ".0f") -> str:
    """'1594 (1512–1681)': a number and its 90% interval."""
    if value is None:
        return "-"
    text = format(value, fmt)
    if not interval:
        return text
    return f"{text} ({format(interval['p05'], fmt)}–{format(interval['p95'], fmt)})"


# --- paragraphs ------------------------------------------------------------------------------


def _wrap(text: str, width: int, indent: str = "", subsequent: str | None = None) -> list[str]:
    """Lines of `text` within `width`, broken at spaces or after a hyphen inside a word (a
    searched kernel's name, `first_op-last_op`); a word longer than a line is split."""
    lines = textwrap.wrap(
        text,
        width=max(width, len(subsequent or indent) + 1),
        initial_indent=indent,
        subsequent_indent=indent if subsequent is None else subsequent,
        break_on_hyphens=True,
    )
    return lines or [indent.rstrip()]


def wrap_text(text: str, width: int | None = None, indent: str = "", subsequent: str = "") -> str:
    """`text` as a paragraph within the terminal's width; later lines start with `subsequent`."""
    return "\n".join(_wrap(text, width or terminal_width(), indent, subsequent))


def wrap_items(
    items: Sequence[str], width: int | None = None, prefix: str = "", sep: str = ", "
) -> list[str]:
    """`prefix` then `items` joined by `sep`, never breaking inside an item (unless one item is
    wider than a whole line); continuation lines are indented to the end of `prefix`."""
    width = width or terminal_width()
    indent = " " * len(prefix)
    mark, space = sep.rstrip(), sep[len(sep.rstrip()) :]
    pieces = [item + (mark if i < len(items) - 1 else "") for i, item in enumerate(items)]
    lines: list[str] = []
    line, empty = prefix, True
    for piece in pieces:
        if not empty and len(line) + len(space) + len(piece) > width:
            lines.append(line)
            line, empty = indent, True
        if empty and len(line) + len(piece) > width:  # one item wider than a line
            *full, line = _wrap(piece, width, line, indent)
            lines += full
        else:
            line += piece if empty else space + piece
        empty = False
    lines.append(line)
    return [x.rstrip() for x in lines]


# --- tables ----------------------------------------------------------------------------------


def _longest_word(text: str) -> int:
    """The longest piece `_wrap` cannot break: words, split after their inner hyphens."""
    pieces = (p for w in text.split() for p in re.split(r"(?<=[^\s-])-(?=[^\s-])", w))
    return max((len(p) + 1 for p in pieces), default=0)


def _fit_widths(
    natural: list[int], floors: list[int], width: int, wrap: Sequence[int]
) -> list[int]:
    """Shrink the `wrap` columns, in that order, until the row fits `width`, none below its
    floor (the longest word it holds). A table that cannot fit keeps its natural widths: wrapping
    that still overflows only makes the overflow harder to read."""
    widths = list(natural)
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
    for i in wrap:
        if excess <= 0:
            break
        cut = min(excess, widths[i] - floors[i])
        if cut > 0:
            widths[i] -= cut
            excess -= cut
    return widths if excess <= 0 else list(natural)


def _block(row: Sequence[str], widths: list[int], align: str) -> list[str]:
    """One row as lines: every cell wrapped to its column, shorter cells padded with blanks."""
    cells = [_wrap(c, w) if len(c) > w else [c] for c, w in zip(row, widths, strict=True)]
    height = max(len(c) for c in cells)
    return [
        GAP.join(
            f"{(c[j] if j < len(c) else ''):{align[i]}{widths[i]}}" for i, c in enumerate(cells)
        ).rstrip()
        for j in range(height)
    ]


def _measure(heads: Sequence[str], cells: Sequence[Sequence[str]]) -> tuple[list[int], list[int]]:
    """Each column's natural width and its floor (the longest word it holds)."""
    columns = [[h, *(r[i] for r in cells)] for i, h in enumerate(heads)]
    natural = [max(len(c) for c in col) for col in columns]
    floors = [max(_longest_word(c) for c in col) for col in columns]
    return natural, floors


def fits(
    headers: Sequence[object],
    rows: Sequence[Sequence[object]],
    width: int,
    wrap: Sequence[int] = (),
) -> bool:
    """Whether a table of these cells fits `width` with only the `wrap` columns wrapped, none
    narrower than the longest word it holds."""
    natural, floors = _measure([str(h) for h in headers], [[str(c) for c in r] for r in rows])
    excess = sum(natural) + len(GAP) * (len(natural) - 1) - width
    return excess - sum(max(0, natural[i] - floors[i]) for i in set(wrap)) <= 0


def columns_to_show(
    headers: Sequence[object],
    rows: Sequence[Sequence[object]],
    width: int,
    *,
    drop: Sequence[int],
    wrap: Sequence[int] = (),
) -> list[int]:
    """The columns a table shows within `width`: every one when they fit, else all but
    `drop[0]`, then all but `drop[0]` and `drop[1]`, and so on (the `wrap` columns wrapped as far
    as their longest words); all but the whole of `drop` when nothing fits. Give the rows of
    several tables with the same columns to have them drop the same ones."""
    keep = list(range(len(headers)))
    for k in range(len(drop) + 1):
        keep = [i for i in range(len(headers)) if i not in drop[:k]]
        if fits(
            [headers[i] for i in keep],
            [[r[i] for i in keep] for r in rows],
            width,
            [keep.index(i) for i in wrap if i in keep],
        ):
            break
    return keep


def table_blocks(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    align: str = "",
    *,
    width: int | None = None,
    wrap: Sequence[int] | None = None,
    show: Sequence[int] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """The header lines (with the rule) and each row's lines, so a caller can put notes between
    rows. Columns in `wrap` (default: the left-aligned ones, widest first) wrap in that order
    until the table fits `width` (default: the terminal's); other columns, numbers among them,
    never wrap, and a table that cannot fit is printed at its natural width instead. `show`
    (indices, as `wrap`'s are) keeps only those columns (see `columns_to_show`)."""
    cells = [[str(c) for c in row] for row in rows]
    heads = [str(h) for h in headers]
    al = align or "<" + ">" * (len(heads) - 1)
    if show is not None:
        heads = [heads[i] for i in show]
        cells = [[r[i] for i in show] for r in cells]
        al = "".join(al[i] for i in show)
        if wrap is not None:
            wrap = [list(show).index(i) for i in wrap if i in show]
    columns = [[h, *(r[i] for r in cells)] for i, h in enumerate(heads)]
    natural, floors = _measure(heads, cells)
    if wrap is None:
        wrap = sorted((i for i, a in enumerate(al) if a == "<"), key=lambda i: -natural[i])
    widths = _fit_widths(natural, floors, width or terminal_width(), wrap)
    # a wrapped column is as wide as its longest wrapped line
    widths = [
        max(len(line) for c in col for line in (_wrap(c, w) if len(c) > w else [c]))
        for col, w in zip(columns, widths, strict=True)
    ]
    head = [*_block(heads, widths, al), GAP.join("-" * w for w in widths)]
    return head, [_block(r, widths, al) for r in cells]


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    align: str = "",
    *,
    width: int | None = None,
    wrap: Sequence[int] | None = None,
    show: Sequence[int] | None = None,
) -> str:
    """A fixed-width table; `align` has one of '<' or '>' per column (default: text left), and
    long cells wrap to fit `width` (see `table_blocks`)."""
    head, blocks = table_blocks(headers, rows, align, width=width, wrap=wrap, show=show)
    return "\n".join([*head, *(line for b in blocks for line in b)])
