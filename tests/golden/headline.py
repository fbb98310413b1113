"""Golden values of rdusim's headline numbers: a drift detector, not a statement of truth.

The published figures live in `rdusim/validation/evidence/` and `rdusim validate` compares the
model with them, each within an interval. Inside an interval the model can move unnoticed, so
`tests/golden/metrics.json` records what the model computes now (Table 4's shares, Table 5's
cells, time to first token, decode steps, the kernel-looping speed-up, the naive on-chip update),
and `tests/validation/test_golden.py` fails when any of them moves by more than 1e-9 relative
(integers exactly). A golden value is neither right nor wrong: a failure says only that a
headline number changed, so the change is seen and accepted on purpose.

After an intended change to the model, review and accept the new values with

    python -m tests.golden.headline --update

which rewrites the file and prints each changed value before and after. Without `--update` the
command prints the same table and exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdusim.api import MapRun, run_mapping
from rdusim.spec.catalog import package_dir
from rdusim.spec.mapping import MappingSpec, load_mapping

Value = int | float
Metrics = dict[str, Value]

GOLDEN_FILE = Path(__file__).resolve().parent / "metrics.json"
UPDATE_COMMAND = "python -m tests.golden.headline --update"
RELATIVE_TOLERANCE = 1e-9

# Table 4: one prefill MoE layer at a 128K prompt; Table 5: the paper's three prompt lengths, each
# without and with SnapStream, in the deployment it measured (r1_decode_paper).
TABLE4_SEQ_LEN = 131072
TABLE5_SEQ_LENS = (131072, 65536, 32768)
# The kernel-looping speed-up in one configuration: Llama-3.1-8B, batch 1, an 8K cache.
LOOPING = ("batch=1", "seq_len=8192", "snapstream.enabled=false", "orchestration=hardware")
# Prompt lengths every shipped prefill mapping is also pinned at, besides its own.
PREFILL_SEQ_LENS = (4096, 32768)
# Decode points: every mapping at its largest batch, and a short, uncompressed single sequence
# (where kernel calls dominate the step).
DECODE_POINTS: dict[str, tuple[str, ...]] = {
    "batch_max": ("batch=max",),
    "batch1_8k": ("batch=1", "seq_len=8192", "snapstream.enabled=false"),
}


# ---------------------------------------------------------------------------------------------
# Collecting the metrics


class _Runs:
    """`run_mapping` memoised on (mapping, overrides): several figures read the same run, and
    every run is deterministic."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, tuple[str, ...]], MapRun] = {}

    def get(self, name: str, overrides: Sequence[str]) -> MapRun:
        key = (name, tuple(overrides))
        if key not in self._done:
            self._done[key] = run_mapping(name, list(overrides), uncertainty=False)
        return self._done[key]


def shipped_mappings() -> dict[str, MappingSpec]:
    """Every mapping in `mappings/` by file stem: a new one adds its keys to the golden file."""
    folder = package_dir("mappings")
    return {path.stem: load_mapping(path).spec for path in sorted(folder.glob("*.yaml"))}


def _table4(runs: _Runs) -> Metrics:
    """Every kernel's share of the R1 prefill MoE layer at a 128K prompt."""
    layer = runs.get("r1_prefill", [f"seq_len={TABLE4_SEQ_LEN}"]).report["layers"]["moe"]
    return {f"table4.{k['name']}.share_percent": 100.0 * k["share"] for k in layer["kernels"]}


def _table5(runs: _Runs) -> Metrics:
    """Each Table 5 cell in the paper's deployment (r1_decode_paper), and each improvement."""
    out: Metrics = {}
    for seq_len in TABLE5_SEQ_LENS:
        label = f"table5.{seq_len // 1024}K"
        tput: dict[bool, float] = {}
        for snapstream in (False, True):
            report = runs.get(
                "r1_decode_paper",
                [f"seq_len={seq_len}", f"snapstream.enabled={str(snapstream).lower()}"],
            ).report
            tag = f"{label}.{'snapstream' if snapstream else 'no_snapstream'}"
            out[f"{tag}.max_batch"] = int(report["max_batch_size"])
            out[f"{tag}.step_s"] = float(report["total_latency_s"])
            out[f"{tag}.throughput_tokens_per_s"] = float(report["throughput_tokens_per_s"])
            tput[snapstream] = float(report["throughput_tokens_per_s"])
        out[f"{label}.improvement"] = tput[True] / tput[False]
    return out


def _prefill_point(spec: MappingSpec, seq_len: int) -> tuple[str, list[str]]:
    """Key part and overrides for a prompt of `seq_len`. A fixed compressed cache longer than the
    prompt has nothing to compress, so SnapStream is off there (and the key says so)."""
    overrides = [f"seq_len={seq_len}"]
    ss = spec.snapstream
    if ss.enabled and ss.kv_len is not None and ss.kv_len > seq_len:
        return f"seq_{seq_len}_no_snapstream", [*overrides, "snapstream.enabled=false"]
    return f"seq_{seq_len}", overrides


def _prefill(runs: _Runs, name: str, spec: MappingSpec) -> Metrics:
    """Time to first token and kernel calls at the mapping's own prompt length and a few more."""
    out: Metrics = {}
    for seq_len in sorted({spec.seq_len, *PREFILL_SEQ_LENS}):
        point, overrides = _prefill_point(spec, seq_len)
        report = runs.get(name, overrides).report
        out[f"{name}.{point}.ttft_s"] = float(report["total_latency_s"])
        out[f"{name}.{point}.kernel_calls"] = int(report["kernel_calls"])
    return out


def _decode(runs: _Runs, name: str) -> Metrics:
    """Step time, throughput, tokens per step and HBM traffic at each decode point."""
    out: Metrics = {}
    for point, overrides in DECODE_POINTS.items():
        report = runs.get(name, overrides).report
        prefix = f"{name}.{point}"
        out[f"{prefix}.step_s"] = float(report["total_latency_s"])
        out[f"{prefix}.throughput_tokens_per_s"] = float(report["throughput_tokens_per_s"])
        out[f"{prefix}.tokens_per_step"] = float(report["tokens_per_step"])
        out[f"{prefix}.hbm_traffic_bytes"] = float(report["traffic_bytes"]["hbm"])
        if point == "batch_max":
            out[f"{prefix}.max_batch"] = int(report["max_batch_size"])
    return out


def _text_figures(runs: _Runs) -> Metrics:
    """The kernel-looping speed-up and the naive decode update's on-chip figures."""
    looped = runs.get("llama31_8b_decode", [*LOOPING, "kernel_looping=true"]).report
    plain = runs.get("llama31_8b_decode", [*LOOPING, "kernel_looping=false"]).report
    update = runs.get("r1_decode_paper", ["seq_len=131072"]).report["snapstream"]
    upd = update["decode_update_sram_bytes"]
    return {
        "kernel_looping.speedup": plain["total_latency_s"] / looped["total_latency_s"],
        "naive_decode.indexing_on_chip_mb": upd["naive_indexing"] / 1e6,
        "naive_decode.on_chip_memory_vs_ring_buffer_x": float(upd["ratio"]),
    }


def _merge(parts: Sequence[Metrics]) -> Metrics:
    """One dict; two figures under one key would hide one of them, so that is an error."""
    out: Metrics = {}
    for part in parts:
        clash = out.keys() & part.keys()
        if clash:
            raise ValueError(f"golden keys collected twice: {sorted(clash)}")
        out.update(part)
    return out


def _check_values(metrics: Metrics) -> None:
    """JSON holds finite numbers only, and an int compared as a float would lose exactness."""
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"golden value {key} is {type(value).__name__}, not int or float")
        if not math.isfinite(value):
            raise ValueError(f"golden value {key} is {value}")


def collect() -> Metrics:
    """The headline figures the model computes now, by stable human-readable key."""
    runs = _Runs()
    specs = shipped_mappings()
    parts = [_table4(runs), _table5(runs)]
    parts += [_prefill(runs, n, s) for n, s in specs.items() if s.phase == "prefill"]
    parts += [_decode(runs, n) for n, s in specs.items() if s.phase == "decode"]
    parts.append(_text_figures(runs))
    metrics = _merge(parts)
    _check_values(metrics)
    return dict(sorted(metrics.items()))


# ---------------------------------------------------------------------------------------------
# Comparing


def relative_change(before: Value, after: Value) -> float:
    """(after - before) / |before|; infinite when a zero became non-zero."""
    if after == before:
        return 0.0
    if before == 0:
        return math.copysign(math.inf, after)
    return (after - before) / abs(before)


def differs(before: Value, after: Value, tolerance: float = RELATIVE_TOLERANCE) -> bool:
    """Integers must match exactly (and stay integers); floats within `tolerance` relative."""
    if isinstance(before, int) or isinstance(after, int):
        return type(before) is not type(after) or before != after
    return abs(relative_change(before, after)) > tolerance


@dataclass(frozen=True)
class Change:
    """One key of the golden file, before and after (None where the key is absent)."""

    key: str
    before: Value | None
    after: Value | None

    @property
    def status(self) -> str:
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        return "changed" if differs(self.before, self.after) else "same"

    @property
    def relative(self) -> float:
        if self.before is None or self.after is None:
            return math.inf
        return relative_change(self.before, self.after)


def compare(before: Mapping[str, Value], after: Mapping[str, Value]) -> list[Change]:
    """Every key of either side, the largest changes first (added and removed keys lead)."""
    changes = [Change(k, before.get(k), after.get(k)) for k in before.keys() | after.keys()]
    return sorted(changes, key=lambda c: (-abs(c.relative), c.key))


def _number(value: Value | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    text = f"{value:.12g}"
    return text if "." in text or "e" in text else f"{text}.0"  # 16.0 is not the integer 16


def _change_text(change: Change) -> str:
    if change.status in ("added", "removed"):
        return change.status
    return f"{100.0 * change.relative:+.3g}%"


def format_table(changes: Sequence[Change], *, show_same: bool = False) -> str:
    """key, before, after and relative change of each key that differs (of every key with
    `show_same`), then a line counting each status."""
    shown = [c for c in changes if show_same or c.status != "same"]
    rows = [("key", "before", "after", "change")] if shown else []
    rows += [(c.key, _number(c.before), _number(c.after), _change_text(c)) for c in shown]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(4)]
    lines = [
        f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}"
        for r in rows
    ]
    if lines:
        lines.insert(1, "  ".join("-" * w for w in widths))
    counts = {s: sum(c.status == s for c in changes) for s in ("changed", "added", "removed")}
    same = len(changes) - sum(counts.values())
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    lines.append(f"{summary}, {same} unchanged (tolerance {RELATIVE_TOLERANCE:g} relative)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The golden file


def dumps(metrics: Mapping[str, Value]) -> str:
    """The file's text: sorted keys, indent 2, a trailing newline."""
    return json.dumps(dict(metrics), sort_keys=True, indent=2, allow_nan=False) + "\n"


def load(path: Path = GOLDEN_FILE) -> Metrics:
    """The golden values, or an empty dict when there is no file yet."""
    if not path.exists():
        return {}
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of numbers")
    metrics: Metrics = data
    _check_values(metrics)
    return metrics


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same directory and rename it over `path`, so a
    reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.golden.headline",
        description="Compare the model's headline numbers with the golden file, or rewrite it.",
    )
    parser.add_argument("--update", action="store_true", help="rewrite the golden file")
    parser.add_argument("--all", action="store_true", help="list unchanged keys too")
    parser.add_argument("--file", type=Path, default=GOLDEN_FILE, help="the golden file")
    args = parser.parse_args(argv)

    before = load(args.file)
    after = collect()
    changes = compare(before, after)
    print(format_table(changes, show_same=args.all))
    if args.update:
        write_atomic(args.file, dumps(after))
        print(f"wrote {args.file}")
        return 0
    if any(c.status != "same" for c in changes):
        what = "differs from the model" if before else "does not exist yet"
        print(f"{args.file} {what}; after an intended change to the model run: {UPDATE_COMMAND}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
