"""The text of `rdusim fit`: each model's weights, how many fit in HBM and DDR, each switch."""

from __future__ import annotations

from typing import Any

from rdusim.report.console import fits, seconds, si, table, terminal_width, wrap_text

TIER_NAMES = {"hbm": "HBM (usable)", "ddr": "DDR"}


def render_fit(r: dict[str, Any], width: int | None = None) -> str:
    """`rdusim fit`'s report (the dict of `Residency.as_dict`) within `width` columns."""
    width = width or terminal_width()
    n = len(r["models"])
    bw = si(r["switch_bandwidth_per_socket"], "B/s")
    parts = [
        wrap_text(
            f"{n} model{'s' if n != 1 else ''} on {r['hardware']} ({r['sockets']} sockets), "
            "weights sharded evenly over the sockets:",
            width,
        ),
        _models_table(r, width),
        _tiers_table(r, width),
        wrap_text(
            f"switch A -> B: B's shard loaded from DDR into HBM on every socket in parallel at "
            f"{bw} a socket; 0 when B is already resident:",
            width,
        ),
        _switch_table(r, width),
        wrap_text("assumes: " + "; ".join(r["assumptions"]) + ".", width, subsequent="  "),
    ]
    return "\n\n".join(parts)


def _models_table(r: dict[str, Any], width: int) -> str:
    rows = [
        [
            m["name"],
            si(m["weight_bytes"], "B"),
            si(m["per_socket_bytes"], "B"),
            "yes" if m["fits_hbm"] else "no",
            seconds(m["load_s"]),
        ]
        for m in r["models"]
    ]
    headers = ["model", "weights", "per socket", "fits HBM", "load"]
    return table(headers, rows, "<>>>>", width=width)


def _tiers_table(r: dict[str, Any], width: int) -> str:
    n = len(r["models"])
    rows = [
        [
            TIER_NAMES[name],
            si(t["capacity_per_socket_bytes"], "B"),
            si(t["needed_per_socket_bytes"], "B"),
            "yes" if t["all_fit"] else "no",
            f"{t['fit_in_order']} of {n}",
        ]
        for name, t in r["tiers"].items()
    ]
    headers = ["tier", "per socket", "all need", "all fit", "in order"]
    legend = (
        "per socket: capacity; all need: every model's shard together; in order: loaded in the "
        "order given, the first that many fit together"
    )
    return table(headers, rows, "<>>>>", width=width) + "\n" + wrap_text(legend, width)


def _switch_table(r: dict[str, Any], width: int) -> str:
    """A matrix (rows: the resident model, columns: the one switched to) where it fits, else a
    row per switch."""
    names = [m["name"] for m in r["models"]]
    cost = [
        [_cost(s["seconds"]) for s in r["switches"][i * len(names) : (i + 1) * len(names)]]
        for i in range(len(names))
    ]
    headers = ["from \\ to", *names]
    rows = [[a, *row] for a, row in zip(names, cost, strict=True)]
    if fits(headers, rows, width):
        return table(headers, rows, "<" + ">" * len(names), width=width)
    pairs = [[s["from"], s["to"], _cost(s["seconds"])] for s in r["switches"]]
    return table(["from", "to", "switch"], pairs, "<<>", width=width)


def _cost(value: float) -> str:
    return "0" if value == 0 else seconds(value)
