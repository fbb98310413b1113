"""`rdusim map --trace` and `--trace-full`: Chrome Trace Event files that Perfetto can open
and that add up.

`--trace` shows one representative layer per kind with aggregated op and transfer slices;
`--trace-full` every layer execution of the run, in order, with that detail for the first layer
of each kind. These tests check both the format (every event well-formed, every pid/tid named)
and that the timeline agrees with the report (kernel order, no overlap, layer and run latency).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from rdusim.api import run_mapping
from rdusim.sim.trace import chrome_trace, chrome_trace_full, default_layer_order

MAX_TRACE_BYTES = 5 * 1024 * 1024
REL = 1e-6


@pytest.fixture(scope="module")
def cli_trace(tmp_path_factory: pytest.TempPathFactory, mappings_dir: Path) -> dict[str, Any]:
    """Run `rdusim map r1_prefill --set seq_len=8192 --trace T --json` once for the module."""
    import contextlib
    import io

    from rdusim.cli import main

    path = tmp_path_factory.mktemp("trace") / "trace.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "map",
                str(mappings_dir / "r1_prefill.yaml"),
                "--set",
                "seq_len=8192",
                "--trace",
                str(path),
                "--json",
            ]
        )
    assert code == 0
    return {
        "path": path,
        "trace": json.loads(path.read_text()),
        "report": json.loads(out.getvalue()),
    }


def x_events(trace: dict[str, Any], tid_name: str | None = None) -> list[dict[str, Any]]:
    """Complete events, optionally only those on threads named `tid_name`."""
    names = thread_names(trace)
    return [
        e
        for e in trace["traceEvents"]
        if e["ph"] == "X" and (tid_name is None or names[(e["pid"], e["tid"])] == tid_name)
    ]


def thread_names(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def process_names(trace: dict[str, Any]) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def by_pid(events: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["ts"]):
        out[e["pid"]].append(e)
    return out


def expected_kernel_order(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(layer, kernel) in execution order: embedding, one layer per kind, the other extras."""
    extras = report["extras"]
    order = [("embedding", k) for k in extras.get("embedding", {}).get("kernels", [])]
    for kind, layer in report["layers"].items():
        order += [(kind, k["name"]) for k in layer["kernels"]]
    for name, extra in extras.items():
        if name != "embedding":
            order += [(name, k) for k in extra["kernels"]]
    return order


def check_structure(trace: dict[str, Any]) -> None:
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    assert trace["displayTimeUnit"] in ("ms", "ns")
    assert isinstance(trace["otherData"], dict)
    threads = thread_names(trace)
    procs = process_names(trace)
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            for key in ("name", "ph", "ts", "dur", "pid", "tid"):
                assert key in e, (key, e)
            assert isinstance(e["name"], str) and e["name"]
            assert e["ts"] >= 0 and e["dur"] >= 0, e
            assert e["pid"] in procs, f"pid {e['pid']} has no process_name"
            assert (e["pid"], e["tid"]) in threads, f"tid {e['tid']} has no thread_name"


def check_tracks(trace: dict[str, Any]) -> None:
    """Kernel, HBM and P2P tracks on every socket; slices on one track never overlap."""
    threads = thread_names(trace)
    pids = set(process_names(trace))
    for pid in pids:
        mine = {name for (p, _), name in threads.items() if p == pid}
        assert {"kernels", "HBM", "P2P"} <= mine, (pid, mine)
    per_track: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in x_events(trace):
        per_track[(e["pid"], e["tid"])].append(e)
    for key, events in per_track.items():
        events.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(events):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6 * max(1.0, a["ts"]), (threads[key], a, b)


# ---------------------------------------------------------------------------- CLI, prefill


def test_cli_trace_is_well_formed(cli_trace):
    check_structure(cli_trace["trace"])
    check_tracks(cli_trace["trace"])


def test_cli_trace_is_small(cli_trace):
    assert cli_trace["path"].stat().st_size < MAX_TRACE_BYTES


def test_track_per_socket(cli_trace):
    trace, report = cli_trace["trace"], cli_trace["report"]
    procs = process_names(trace)
    assert trace["otherData"]["sockets"] == report["sockets"]
    assert len(procs) == trace["otherData"]["sockets_simulated"] >= 1
    kernels = by_pid(x_events(trace, "kernels"))
    assert set(kernels) == set(procs)


def test_kernels_in_mapping_order(cli_trace):
    trace, report = cli_trace["trace"], cli_trace["report"]
    order = expected_kernel_order(report)
    moe = [k["name"] for k in report["layers"]["moe"]["kernels"]]
    assert moe.index("QKV") < moe.index("MHA") < moe.index("Output Proj") < moe.index("MoE FFN")
    for pid, events in by_pid(x_events(trace, "kernels")).items():
        assert [(e["args"]["layer"], e["args"]["kernel"]) for e in events] == order, pid
        assert [e["name"] for e in events] == [k for _, k in order]
        for a, b in itertools.pairwise(events):  # end to end, no overlap
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6
            assert b["ts"] == pytest.approx(a["ts"] + a["dur"], rel=1e-9)


def test_moe_layer_sums_to_report_latency(cli_trace):
    trace, report = cli_trace["trace"], cli_trace["report"]
    layer = report["layers"]["moe"]
    for events in by_pid(x_events(trace, "kernels")).values():
        moe = [e for e in events if e["args"]["layer"] == "moe"]
        assert len(moe) == len(layer["kernels"])
        assert all(e["args"]["count"] == layer["count"] for e in moe)
        total_us = sum(e["dur"] for e in moe)
        assert total_us == pytest.approx(layer["latency_s"] * 1e6, rel=REL)
        for e, k in zip(moe, layer["kernels"], strict=True):
            assert e["dur"] == pytest.approx(k["latency_s"] * 1e6, rel=REL)


def test_one_layer_per_kind(cli_trace):
    trace, report = cli_trace["trace"], cli_trace["report"]
    layers = by_pid(x_events(trace, "layers"))
    for events in layers.values():
        kinds = [e["args"]["layer"] for e in events]
        assert len(kinds) == len(set(kinds))
        assert set(report["layers"]) | set(report["extras"]) == set(kinds)


def test_ops_are_aggregated(cli_trace):
    """One slice per op per kernel, inside its kernel's slice."""
    trace, report = cli_trace["trace"], cli_trace["report"]
    ops = [e for e in x_events(trace) if e.get("cat") == "op"]
    seen: dict[tuple[int, str, str, str], int] = defaultdict(int)
    for e in ops:
        seen[(e["pid"], e["args"]["layer"], e["args"]["kernel"], e["name"])] += 1
        assert e["args"]["tiles"] >= 1
    assert set(seen.values()) == {1}
    kernels = {
        (e["pid"], e["args"]["layer"], e["args"]["kernel"]): e for e in x_events(trace, "kernels")
    }
    for e in ops:
        k = kernels[(e["pid"], e["args"]["layer"], e["args"]["kernel"])]
        assert k["ts"] - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= k["ts"] + k["dur"] + 1e-6
    moe_ops = {name for (_, layer, kernel, name) in seen if layer == "moe" and kernel == "MHA"}
    mha = next(k for k in report["layers"]["moe"]["kernels"] if k["name"] == "MHA")
    assert moe_ops == set(mha["ops"])


def test_transfers_inside_their_kernel(cli_trace):
    trace = cli_trace["trace"]
    kernels = {
        (e["pid"], e["args"]["layer"], e["args"]["kernel"]): e for e in x_events(trace, "kernels")
    }
    for track in ("HBM", "P2P"):
        events = x_events(trace, track)
        assert events, f"no {track} slices"
        for e in events:
            k = kernels[(e["pid"], e["args"]["layer"], e["args"]["kernel"])]
            assert k["ts"] - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= k["ts"] + k["dur"] + 1e-6


# ---------------------------------------------------------------------------- API


@pytest.fixture(scope="module")
def prefill_small(mappings_dir: Path):
    return run_mapping(mappings_dir / "r1_prefill.yaml", ["seq_len=8192"], trace=True)


def test_every_simulated_socket_is_a_process(mappings_dir: Path):
    run = run_mapping(mappings_dir / "r1_prefill.yaml", ["seq_len=4096"], trace=True, sockets=16)
    trace = chrome_trace(run.result)
    check_structure(trace)
    check_tracks(trace)
    assert len(process_names(trace)) == 16
    kernels = by_pid(x_events(trace, "kernels"))
    first = [(e["name"], e["ts"], e["dur"]) for e in kernels[min(kernels)]]
    for events in kernels.values():  # identical schedules on every socket
        assert [(e["name"], e["ts"], e["dur"]) for e in events] == first
    assert len(json.dumps(trace)) < MAX_TRACE_BYTES


def test_decode_trace(mappings_dir: Path):
    run = run_mapping(mappings_dir / "r1_decode.yaml", ["seq_len=8192", "batch=16"], trace=True)
    trace = chrome_trace(run.result)
    check_structure(trace)
    check_tracks(trace)
    (events,) = by_pid(x_events(trace, "kernels")).values()
    assert [(e["args"]["layer"], e["name"]) for e in events] == expected_kernel_order(run.report)
    head = next(e for e in events if e["args"]["layer"] == "mtp_head")
    assert head["args"]["runs"] == run.report["extras"]["mtp_head"]["runs"] == 2  # per draft
    assert len(json.dumps(trace)) < MAX_TRACE_BYTES


def test_long_prefill_trace_stays_small(mappings_dir: Path):
    run = run_mapping(mappings_dir / "r1_prefill.yaml", ["seq_len=131072"], trace=True)
    assert len(json.dumps(chrome_trace(run.result))) < MAX_TRACE_BYTES


def test_merge_gap_controls_transfer_slices(prefill_small):
    def count(trace: dict[str, Any]) -> int:
        return len(x_events(trace, "HBM"))

    exact = chrome_trace(prefill_small.result, merge_gap_s=0.0)
    default = chrome_trace(prefill_small.result)
    coarse = chrome_trace(prefill_small.result, merge_gap_s=1.0)
    kernels = len(x_events(default, "kernels"))
    assert count(exact) >= count(default) >= count(coarse)
    assert count(coarse) <= kernels  # everything within a kernel merged into one slice
    # merged slices still cover every transfer: total union time never shrinks below the
    # per-socket HBM busy time
    # (slices simulated at fewer tiles are stretched onto the extrapolated pipeline)
    busy_us = (
        sum(
            k.hbm_busy_s * k.trace_scale
            for lr in (*prefill_small.result.layers.values(), *prefill_small.result.extras.values())
            for k in lr.kernels
        )
        * 1e6
    )
    assert sum(e["dur"] for e in x_events(exact, "HBM")) == pytest.approx(busy_us, rel=1e-6)
    assert sum(e["dur"] for e in x_events(coarse, "HBM")) >= busy_us * (1 - 1e-9)


def test_needs_traced_result(mappings_dir: Path):
    run = run_mapping(mappings_dir / "r1_prefill.yaml", ["seq_len=4096"])
    with pytest.raises(ValueError, match="trace=True"):
        chrome_trace(run.result)


def test_trace_is_json_serialisable_and_deterministic(prefill_small):
    a = json.dumps(chrome_trace(prefill_small.result), sort_keys=True)
    b = json.dumps(chrome_trace(prefill_small.result), sort_keys=True)
    assert a == b
    assert "NaN" not in a and "Infinity" not in a


# ---------------------------------------------------------------------------- full trace

MAX_FULL_TRACE_BYTES = 10 * 1024 * 1024


def model_order(run) -> list[str]:
    """The kind of each of the model's layers, in order."""
    cfg = run.mapping.model
    return [cfg.layer_kind(i) for i in range(cfg.num_hidden_layers)]


def trace_end_us(trace: dict[str, Any]) -> float:
    return max(e["ts"] + e["dur"] for e in x_events(trace))


def check_full(run, trace: dict[str, Any]) -> None:
    """Ends at the report's total; one layer slice per execution; kernels back to back."""
    check_structure(trace)
    check_tracks(trace)
    total_us = run.report["total_latency_s"] * 1e6
    assert trace_end_us(trace) == pytest.approx(total_us, rel=REL)
    assert trace["otherData"]["total_latency_s"] == run.report["total_latency_s"]
    (layers,) = by_pid(x_events(trace, "layers")).values()
    per_kind = Counter(e["args"]["layer"] for e in layers)
    for kind, layer in run.report["layers"].items():
        assert per_kind[kind] == layer["count"], kind
    for name, extra in run.report["extras"].items():
        assert per_kind[name] == (extra["runs"] if extra["kernels"] else 0), name
    (kernels,) = by_pid(x_events(trace, "kernels")).values()
    assert kernels[0]["ts"] == 0
    for a, b in itertools.pairwise(kernels):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], rel=1e-9, abs=1e-6)


@pytest.fixture(scope="module")
def prefill_128k(mappings_dir: Path):
    run = run_mapping(mappings_dir / "r1_prefill.yaml", ["seq_len=131072"], trace=True)
    return run, chrome_trace_full(run.result, layer_order=model_order(run))


def test_full_trace_covers_the_whole_prefill(prefill_128k):
    run, trace = prefill_128k
    check_full(run, trace)
    (layers,) = by_pid(x_events(trace, "layers")).values()
    names = [e["name"] for e in layers]
    assert names[0] == "embedding" and names[-1] == "head"
    assert names[1:4] == ["layer 0 (dense)", "layer 1 (dense)", "layer 2 (dense)"]
    assert names[4:-1] == [f"layer {i} (moe)" for i in range(3, 61)]
    assert [e["args"]["index"] for e in layers[1:-1]] == list(range(61))


def test_full_trace_is_small_valid_json(prefill_128k):
    _, trace = prefill_128k
    text = json.dumps(trace)
    assert len(text.encode()) < MAX_FULL_TRACE_BYTES
    assert json.loads(text) == trace
    assert "NaN" not in text and "Infinity" not in text


def test_full_trace_details_the_first_layer_of_each_kind_only(prefill_128k):
    run, trace = prefill_128k
    detail = [e for e in x_events(trace) if e["cat"] in ("op", "hbm", "p2p")]
    assert detail
    assert {e["args"]["execution"] for e in detail} == {1}
    detailed = {e["args"]["layer"] for e in detail}
    assert detailed == set(run.report["layers"]) | {"embedding", "head"}
    # every kernel of every layer still has its slice, spanning its call
    kernels = x_events(trace, "kernels")
    moe = run.report["layers"]["moe"]
    assert sum(e["args"]["layer"] == "moe" for e in kernels) == moe["count"] * len(moe["kernels"])
    for e in kernels:
        assert e["dur"] == pytest.approx(e["args"]["latency_s"] * 1e6, rel=REL)


def test_full_trace_of_decode_runs_the_mtp_drafts_in_order(mappings_dir: Path):
    run = run_mapping(mappings_dir / "r1_decode.yaml", ["seq_len=8192", "batch=16"], trace=True)
    trace = chrome_trace_full(run.result, layer_order=model_order(run))
    check_full(run, trace)
    (layers,) = by_pid(x_events(trace, "layers")).values()
    tail = [
        e["name"] for e in layers[layers.index(next(e for e in layers if e["name"] == "head")) :]
    ]
    draft = ["mtp_embedding", "mtp0_proj", "mtp0_layer", "mtp_head"]
    drafts = run.report["mtp"]["draft_tokens"]
    assert tail == ["head", *(f"{n} (draft {j})" for j in range(1, drafts + 1) for n in draft)]


def test_full_trace_of_a_looped_layer_shares_its_call(mappings_dir: Path):
    run = run_mapping(mappings_dir / "llama31_8b_decode.yaml", trace=True)
    assert run.report["layers"]["dense"]["looped"]
    trace = chrome_trace_full(run.result)  # one kind: the default order is the model's
    check_full(run, trace)


def test_full_trace_default_order_and_checks(prefill_small):
    result = prefill_small.result
    assert default_layer_order(result) == ["dense"] * 3 + ["moe"] * 58
    with pytest.raises(ValueError, match="layer_order"):
        chrome_trace_full(result, layer_order=["dense"] * 3 + ["moe"] * 57)
    bounded = chrome_trace_full(result, detailed=0)
    assert not [e for e in x_events(bounded) if e["cat"] == "op"]
    assert trace_end_us(bounded) == pytest.approx(result.total_latency_s * 1e6, rel=REL)


def test_representative_trace_is_one_layer_per_kind_long(prefill_small):
    """`--trace` keeps its meaning: its timeline is one layer of each kind, not the run."""
    trace = chrome_trace(prefill_small.result)
    report = prefill_small.report
    one_each = sum(layer["latency_s"] for layer in report["layers"].values()) + sum(
        e["latency_s"] for e in report["extras"].values() if e["runs"]
    )
    assert trace_end_us(trace) == pytest.approx(one_each * 1e6, rel=REL)
    assert trace_end_us(trace) < report["total_latency_s"] * 1e6
