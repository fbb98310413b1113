"""What `rdusim serve` shows and writes: terminal text, JSON, per-request CSV, and figures.

Figures are `matplotlib.figure.Figure`s built without pyplot state (like `rdusim.report.plots`):

* `latency_cdf_figure`: empirical CDFs of TTFT, TPOT and end-to-end latency, one line per run,
  with the SLOs marked;
* `throughput_tpot_figure`: output-token throughput against median TPOT over a sweep of arrival
  rates, one line per setting (with and without SnapStream, say), each marker labelled with its
  rate: moving right along a line is paying latency for throughput, and a line above another
  delivers more tokens at the same TPOT;
* `occupancy_figure`: occupied decode slots over time.

JSON is written with sorted keys and the metrics' rounded floats, so the same inputs give the
same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rdusim.report.console import (
    columns_to_show,
    fits,
    seconds,
    seconds_with,
    si,
    table,
    table_blocks,
    terminal_width,
    wrap_text,
)
from rdusim.report.tables import to_csv

if TYPE_CHECKING:  # matplotlib loads only for the figures (--out), not for a report or --json
    from matplotlib.figure import Figure

STAT_KEYS = ("p50", "p90", "p99", "mean")
LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end to end"))
REQUEST_COLUMNS = (
    "point",
    "id",
    "model",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "graph_len",
    "prefill_node",
    "prefill_start_s",
    "first_token_s",
    "decode_node",
    "slot",
    "transfer_start_s",
    "transfer_end_s",
    "last_token_s",
    "steps",
    "ttft_s",
    "tpot_s",
    "e2e_s",
)


def dumps(data: Any) -> str:
    """JSON text with sorted keys: the same data always gives the same bytes."""
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


def _s(value: float | None) -> str:
    return seconds(value)


def _deployment_line(doc: Mapping[str, Any]) -> str:
    dep = doc["deployment"]
    if dep["mode"] == "colocated":
        nodes = dep["nodes"]
        where = f"colocated, {nodes} node{'s' if nodes != 1 else ''}, policy {dep['policy']}"
    else:
        where = (
            f"disaggregated, {dep['prefill_nodes']} prefill + {dep['decode_nodes']} decode "
            f"node(s), KV link {si(dep['kv_link_bandwidth'], 'B/s')}"
        )
    return f"{where}; decode step cost: {dep['decode_step']}"


def _graphs_line(g: Mapping[str, Any], name: str = "", iv: Mapping[str, Any] | None = None) -> str:
    """A model's graphs, each time with its 90% interval when the run has intervals."""
    iv = iv or {}
    prefill = ", ".join(
        f"{n} tokens {seconds_with(t, iv.get(f'graphs.prefill_s.{n}'))}"
        for n, t in g["prefill_s"].items()
    )
    ss = "SnapStream" if g["snapstream"] else "no SnapStream"
    step = seconds_with(g["decode_step_s"], iv.get("graphs.decode_step_s"))
    return (
        f"{name + ': ' if name else ''}decode graph: {g['decode_slots']} slots x "
        f"{g['cache_len']} positions ({ss}), step {step}, "
        f"{g['tokens_per_step']:g} tokens/step; prefill graph(s) run: {prefill or 'none'}"
    )


MODEL_HEADERS = ("model", "done", "TTFT p50", "TTFT p99", "TPOT p50", "tokens/s", "switches")
# columns left out, in this order, when the per-model table does not fit the terminal
MODEL_DROP = (3, 5)


def _model_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for name, m in doc["per_model"].items():
        rows.append(
            [
                name,
                f"{m['completed']:,}",
                _s(m["ttft_s"]["p50"]),
                _s(m["ttft_s"]["p99"]),
                _s(m["tpot_s"]["p50"]),
                f"{m['throughput_tokens_per_s'] or 0:,.1f}",
                f"{m['model_switches']} ({_s(m['switch_time_s'])})",
            ]
        )
    return rows


def render_models(doc: Mapping[str, Any], width: int) -> list[str]:
    """A many-model run: the switches, each model's graphs, and a table of its metrics."""
    res = doc["deployment"].get("residency") or {}
    budget = res.get("hbm_bytes_per_socket")
    pinned = ", ".join(res.get("pinned") or []) or "none"
    lines = [
        f"models: {len(doc['per_model'])}; HBM for them {si(budget, 'B')} per socket, pinned: "
        f"{pinned}; {doc['model_switches']} switches, {_s(doc['switch_time_s'])} switching "
        "(the node serves nothing else meanwhile)",
        *(_graphs_line(m["graphs"], name) for name, m in doc["per_model"].items()),
    ]
    rows = _model_rows(doc)
    show = columns_to_show(MODEL_HEADERS, rows, width, drop=MODEL_DROP, wrap=(0,))
    text = table(MODEL_HEADERS, rows, "<" + ">" * 6, width=width, wrap=(0,), show=show)
    return [*(wrap_text(line, width, subsequent="  ") for line in lines), "", text]


LABEL = " " * 16  # the width of the labels of the lines under the latency table


def render_point(doc: Mapping[str, Any], width: int | None = None) -> str:
    """One run: what ran, the latency table, then throughput, goodput and occupancy, within
    `width` columns (default: the terminal's)."""
    width = width or terminal_width()
    settings = doc["settings"]
    slo = settings["slo"]
    head = [
        f"serving {settings['workload'] or 'workload'}: {doc['requests']} requests, "
        f"{doc['completed']} completed in {_s(doc['duration_s'])}",
        _deployment_line(doc),
    ]
    if "graphs" in doc:
        head.append(_graphs_line(doc["graphs"], iv=doc.get("intervals")))
    iv = doc.get("intervals") or {}
    rows = [[label, *(_s(doc[key][k]) for k in STAT_KEYS)] for key, label in LATENCIES]
    headers = ["latency", *STAT_KEYS]
    if iv:
        headers.append("mean 90%")
        for row, (key, _) in zip(rows, LATENCIES, strict=True):
            q = iv.get(f"{key}.mean")
            row.append(f"{_s(q['p05']).split()[0]}–{_s(q['p95'])}" if q else "-")
    lat = table(headers, rows, "<>>>>" + (">" if iv else ""), width=width)
    occ = doc["slot_occupancy"]
    rate = doc["arrival_rate"]
    tput = iv.get("throughput_tokens_per_s")
    tput_iv = f" ({tput['p05']:,.1f}–{tput['p95']:,.1f})" if tput else ""
    tail = [
        f"throughput      {doc['throughput_tokens_per_s'] or 0:,.1f}{tput_iv} output tokens/s "
        f"({doc['output_tokens']:,} tokens)",
        _goodput_line(doc, slo),
        f"arrivals        {rate:.4g} requests/s measured; {doc['mean_requests_in_system']:.4g} "
        "in the system on average"
        if rate is not None
        else f"arrivals        {doc['requests']} request(s)",
        f"slot occupancy  {100 * (occ['mean'] or 0):.1f}% of {occ['slots']} decode slots",
    ]
    if iv:
        tail.append(
            "(90% intervals: the same run under the calibration ensemble's members at the "
            "5th and 95th percentile of the graphs' times)"
        )
    models = render_models(doc, width) if "graphs" not in doc else []
    return "\n".join(
        [
            *(wrap_text(line, width, subsequent="  ") for line in head),
            *(["", *models] if models else []),
            "",
            lat,
            "",
            *(wrap_text(line, width, subsequent=LABEL if line[0] != "(" else "") for line in tail),
        ]
    )


def _goodput_line(doc: Mapping[str, Any], slo: Mapping[str, float] | None) -> str:
    if slo is None:
        return f"goodput         {doc.get('goodput_note') or 'not applicable: no slo'}"
    return (
        f"goodput         {doc['goodput_requests_per_s'] or 0:.4g} requests/s meet TTFT <= "
        f"{slo['ttft_s']:g} s and TPOT <= {slo['tpot_s']:g} s "
        f"({100 * (doc['slo_attainment'] or 0):.1f}% of requests)"
    )


def point_label(doc: Mapping[str, Any], with_rate: bool = True) -> str:
    """The settings that tell runs apart: the `--set` values, and the rate."""
    parts = [f"{k}={v}" for k, v in sorted(doc["settings"]["set"].items())]
    if with_rate and doc["settings"]["rate"] is not None:
        parts.append(f"rate={doc['settings']['rate']:g}")
    return ", ".join(parts)


POINT_HEADERS = (
    "point",
    "tokens/s",
    "goodput/s",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "in system",
    "slots used",
)
# columns left out, in this order, when a sweep's table does not fit the terminal
POINT_DROP = (7, 8, 4, 6)


def _point_row(d: Mapping[str, Any], label: str) -> list[str]:
    return [
        label,
        f"{d['throughput_tokens_per_s'] or 0:,.1f}",
        "n/a" if d["settings"]["slo"] is None else f"{d['goodput_requests_per_s'] or 0:.4g}",
        _s(d["ttft_s"]["p50"]),
        _s(d["ttft_s"]["p99"]),
        _s(d["tpot_s"]["p50"]),
        _s(d["tpot_s"]["p99"]),
        f"{d['mean_requests_in_system']:.4g}",
        f"{100 * (d['slot_occupancy']['mean'] or 0):.0f}%",
    ]


def render_points(docs: Sequence[Mapping[str, Any]], width: int | None = None) -> str:
    """A sweep: one row per run, within `width` columns (default: the terminal's). Narrower
    than the table, the runs are grouped under their `--set` values with a row per rate, and
    then the least telling columns are left out (the legend says which)."""
    width = width or terminal_width()
    align = "<" + ">" * (len(POINT_HEADERS) - 1)
    rows = [_point_row(d, point_label(d) or "-") for d in docs]
    if fits(POINT_HEADERS, rows, width, (0,)) or any(d["settings"]["rate"] is None for d in docs):
        show = columns_to_show(POINT_HEADERS, rows, width, drop=POINT_DROP, wrap=(0,))
        text = table(POINT_HEADERS, rows, align, width=width, wrap=(0,), show=show)
        return "\n".join([text, *_left_out(show, width)])
    # one group per setting, a row per rate under it
    groups: dict[str, list[list[str]]] = {}
    for d in docs:
        rate = f"{d['settings']['rate']:g}"
        groups.setdefault(point_label(d, with_rate=False), []).append(_point_row(d, rate))
    headers = ("rate/s", *POINT_HEADERS[1:])
    everything = [r for g in groups.values() for r in g]
    show = columns_to_show(headers, everything, width, drop=POINT_DROP)
    head, blocks = table_blocks(headers, everything, ">" * len(headers), width=width, show=show)
    lines, done = list(head), 0
    for label, group in groups.items():
        if label:
            lines.append(wrap_text(f"{label}:", width, subsequent="  "))
        lines += [line for b in blocks[done : done + len(group)] for line in b]
        done += len(group)
    return "\n".join([*lines, *_left_out(show, width)])


def _left_out(show: Sequence[int], width: int) -> list[str]:
    """The legend of a narrowed sweep table: which columns it leaves out, and where they are."""
    left = [POINT_HEADERS[i] for i in POINT_DROP if i not in show]
    if not left:
        return []
    text = (
        f"not shown in {width} columns: {', '.join(left)} (--json and --out's serve.json have them)"
    )
    return [wrap_text(text, width)]


def requests_csv(
    runs: Sequence[tuple[int, Sequence[Any]]], names: Sequence[Sequence[str]] = ()
) -> str:
    """Every request of every run: (point index, records) pairs, one row per request; `names`,
    each run's model names, name each request's model (else its index)."""

    def value(v: Any) -> Any:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    rows = []
    for point, records in runs:
        for r in records:
            row = {c: value(getattr(r, c)) for c in REQUEST_COLUMNS[1:] if hasattr(r, c)}
            if names:
                row["model"] = names[point][r.model]
            rows.append(
                row
                | {"point": point, "ttft_s": value(r.ttft_s), "tpot_s": r.tpot_s, "e2e_s": r.e2e_s}
            )
    return to_csv(REQUEST_COLUMNS, rows)


# --- figures -----------------------------------------------------------------------------------


def latency_cdf_figure(
    series: Mapping[str, Mapping[str, Sequence[float]]], slo: Mapping[str, float] | None = None
) -> Figure:
    """CDFs of TTFT, TPOT and end-to-end latency; `series` maps a run's label to its values by
    metric key (`ttft_s`, `tpot_s`, `e2e_s`). Each metric is drawn in the unit that suits it
    (TPOT in ms, say), each run in its colour (SnapStream on or off alike everywhere)."""
    from matplotlib.figure import Figure

    from rdusim.report.axes import plain_ticks, series_color, time_unit

    fig = Figure(figsize=(13, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (key, label) in zip(axes, LATENCIES, strict=True):
        scale, unit = time_unit(v for vs in series.values() for v in vs.get(key, []))
        for i, (name, values) in enumerate(series.items()):
            xs = np.sort(np.asarray(values.get(key, []), dtype=float)) * scale
            if len(xs) == 0:
                continue
            ys = np.arange(1, len(xs) + 1) / len(xs)
            color = series_color(name, i)
            ax.step(xs, ys, where="post", label=name or "run", color=color)
        if slo and key in slo:
            ax.axvline(slo[key] * scale, color="tab:red", linestyle="--", linewidth=1, label="SLO")
        ax.set_xlabel(f"{label} ({unit})")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        positive = [v for vs in series.values() for v in vs.get(key, []) if v > 0]
        if positive and max(positive) / min(positive) > 100:
            ax.set_xscale("log")
        plain_ticks(ax, "x")
        ax.set_title(label)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)))
    return fig


def throughput_tpot_figure(docs: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """Throughput against median TPOT (in ms or s, as suits), one line per setting, its points
    in order of rate and labelled with it where the label has room."""
    from matplotlib.figure import Figure

    from rdusim.report.axes import declutter, plain_ticks, series_color, time_unit

    groups: dict[str, list[tuple[float, float, float]]] = {}
    for d in docs:
        tpot = d["tpot_s"]["p50"]
        thr = d["throughput_tokens_per_s"]
        rate = d["settings"]["rate"]
        if tpot is None or thr is None:
            continue
        groups.setdefault(point_label(d, with_rate=False), []).append((rate or 0.0, tpot, thr))
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    scale, unit = time_unit(p[1] for pts in groups.values() for p in pts)
    labels = []
    for i, (name, pts) in enumerate(groups.items()):
        pts.sort()
        xs = [p[1] * scale for p in pts]
        ax.plot(
            xs,
            [p[2] for p in pts],
            marker="o",
            label=name or "run",
            color=series_color(name, i),
        )
        for (rate, _, y), x in zip(pts, xs, strict=True):
            labels.append(
                ax.annotate(
                    f"{rate:g}/s", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7
                )
            )
    tpots = [p[1] for pts in groups.values() for p in pts if p[1] > 0]
    if tpots and max(tpots) / min(tpots) > 10:
        ax.set_xscale("log")
    plain_ticks(ax, "x")
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:,.0f}")
    ax.set_xlabel(f"median TPOT ({unit})")
    ax.set_ylabel("output tokens/s")
    ax.grid(alpha=0.3)
    ax.set_title(title or "throughput vs time per output token (labels: arrival rate)")
    if groups:
        ax.legend(fontsize=9)
    else:
        ax.text(0.5, 0.5, "no runs with TPOT to plot", transform=ax.transAxes, ha="center")
    declutter(fig, labels)
    return fig


def occupancy_figure(series: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Occupied decode slots over time, one line per run (`slot_occupancy` of each)."""
    from matplotlib.figure import Figure

    from rdusim.report.axes import series_color

    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    for i, (name, occ) in enumerate(series.items()):
        timeline = occ.get("timeline") or []
        ax.step(
            [t for t, _ in timeline],
            [v for _, v in timeline],
            where="post",
            label=name or "run",
            color=series_color(name, i),
        )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("occupied decode slots")
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=9)
    return fig
