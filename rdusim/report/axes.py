"""Conventions every rdusim figure shares, so the figures of one notebook read alike.

* Times are plotted in the unit that suits them (s, ms or µs) and labelled with it, never as
  4×10⁻² s; log axes get plain tick labels.
* Sequence lengths tick as 32K, 64K, 128K.
* A series keeps one colour across figures: SnapStream on is orange and off is grey wherever a
  series is told apart by it; other series take matplotlib's cycle in order.
* Point labels that would overlap are moved aside, or left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import FuncFormatter, NullFormatter

SS_COLOR = "tab:orange"  # SnapStream on
NO_SS_COLOR = "tab:gray"  # SnapStream off

_SNAPSTREAM_OFF = re.compile(
    r"snapstream(\.enabled)?\s*=\s*(false|off)|no snapstream|snapstream off|without snapstream",
    re.IGNORECASE,
)
_SNAPSTREAM_ON = re.compile(
    r"snapstream(\.enabled)?\s*=\s*(true|on)|snapstream on|^snapstream$|with snapstream",
    re.IGNORECASE,
)

# column names of reports and sweeps, as an axis says them
AXIS_LABELS = {
    "seq_len": "sequence length (tokens)",
    "batch": "batch (sequences)",
    "max_batch_size": "largest batch that fits HBM",
    "throughput_tokens_per_s": "throughput (tokens/s)",
    "tokens_per_step": "tokens per step",
    "total_latency_s": "latency per prompt or step",
    "tpot_s": "time per output token",
    "kernel_calls": "kernel calls",
    "kernel_call_time_s": "kernel call time",
    "hbm_traffic_bytes": "HBM traffic per socket (bytes)",
    "sram_peak_bytes": "peak SRAM per socket (bytes)",
    "hbm_kv_cache_bytes": "KV cache per socket (bytes)",
    "hbm_weights_bytes": "weights per socket (bytes)",
}


def time_unit(values_s: Iterable[float]) -> tuple[float, str]:
    """(scale, unit) that shows `values_s` (seconds) as plain numbers: s, ms or µs."""
    finite = [abs(v) for v in values_s if v is not None and math.isfinite(v) and v != 0]
    top = max(finite, default=1.0)
    if top >= 1:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def is_seconds(column: str) -> bool:
    """A report column in seconds (`total_latency_s`, `<kind>.<kernel>.latency_s`)."""
    return column.endswith("_s") and not column.endswith("_per_s")


def axis_label(column: str, unit: str | None = None) -> str:
    """`column` as an axis says it, with `unit` (a time unit) when given."""
    name = column.rsplit(".", 2)
    if column in AXIS_LABELS:
        text = AXIS_LABELS[column]
    elif len(name) == 3:  # <kind>.<kernel>.<metric>: a kernel's figure
        text = f"{name[1]} ({name[0]}) {AXIS_LABELS.get(name[2], name[2].replace('_', ' '))}"
    else:
        text = column.replace("_", " ")
    if unit is not None:
        text = re.sub(r" s$", "", text) + f" ({unit})"
    return text


def tokens_label(n: float) -> str:
    """4096 -> '4K', 131072 -> '128K', 1000 -> '1000'."""
    if n >= 1024 and float(n).is_integer() and int(n) % 1024 == 0:
        return f"{int(n) // 1024}K"
    return f"{n:g}"


def plain_ticks(ax: Axes, which: str = "x") -> None:
    """Tick labels as plain numbers ('0.04', '100'), never powers of ten; on a log axis the
    minor ticks stay unlabelled."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.6g}"))
    axis.set_minor_formatter(NullFormatter())


def series_color(label: str, index: int) -> str:
    """The colour of a series: SnapStream on or off by their fixed colours, else the `index`th
    colour of matplotlib's cycle."""
    if _SNAPSTREAM_OFF.search(label):
        return NO_SS_COLOR
    if _SNAPSTREAM_ON.search(label):
        return SS_COLOR
    return f"C{index % 10}"


def declutter(fig: Figure, labels: Sequence[Annotation]) -> None:
    """Move each point label that overlaps an earlier one (or another axes' text) to the first
    free place around its point, and hide it when none is free."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    taken: list[Any] = []
    offsets = [(4, 4), (4, -12), (-8, 8), (-8, -14), (10, -4), (-14, -4)]
    for label in labels:
        placed = False
        for dx, dy in offsets:
            label.set_position((dx, dy))
            label.set_horizontalalignment("left" if dx >= 0 else "right")
            box = label.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in taken):
                taken.append(box)
                placed = True
                break
        label.set_visible(placed)
