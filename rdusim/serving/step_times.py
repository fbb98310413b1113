"""How long one prefill graph and one decode step take: the only times the serving simulation uses.

The engine asks a `StepTimes` for two numbers and nothing else: `prefill_s(graph_len)`, one
execution of the prefill graph compiled for prompts of `graph_len` tokens, and
`decode_step_s(slots, cache_len)`, one step of a decode graph of `slots` sequences over caches of
`cache_len` positions. Any object with those two methods will do: `LinearStepTimes` is a synthetic
source for tests and what-ifs; `SimulatedStepTimes` gets them from rdusim's compiler and
simulator, never from a typed-in number.

Simulating a mapping costs about 0.15 s (an R1 decode step), far too much per simulated step, so
`SimulatedStepTimes` computes each time once and keeps it:

* prefill: one simulation per graph length (the prefill mapping's `seq_len`, and each bucket);
* decode at the compiled graph's own shape (its batch, its cache length): one simulation. With
  the paper's static graph (`decode_step: static`) this is the only decode time a run uses;
* decode at other shapes (`decode_step: occupied`): a grid of simulations over slots (powers of
  two up to the graph's batch) and cache lengths (`CACHE_FRACTIONS` of the graph's), bilinearly
  interpolated in between (`DecodeGrid`). A step's time is close to affine in both: the cache
  bytes read grow linearly with slots x length, the weights streamed do not depend on either,
  and the routed experts a batch touches grow smoothly with the slots. `tests/serving/
  test_step_times.py` checks an off-grid point against a direct simulation.

`simulated_step_times` keeps one `SimulatedStepTimes` per (prefill, decode, overrides), so a
sweep over arrival rates simulates each graph once.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from rdusim.compiler.capacity import does_not_fit, max_batch
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Program
from rdusim.compiler.residency import hbm_capacity, model_weights, switch_bandwidth, switch_seconds
from rdusim.errors import SpecError
from rdusim.ir.model import summarize
from rdusim.sim.model import SimResult, simulate
from rdusim.spec.catalog import resolve_mapping
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import ResolvedMapping, load_mapping
from rdusim.spec.placement import Tier

# Cache lengths of the decode grid, as fractions of the compiled graph's.
CACHE_FRACTIONS = (1 / 16, 1 / 4, 1 / 2, 3 / 4, 1.0)


class StepTimes(Protocol):
    """A source of graph execution times for the serving engine."""

    def prefill_s(self, graph_len: int) -> float:
        """One execution of the prefill graph compiled for prompts of `graph_len` tokens."""
        ...

    def decode_step_s(self, slots: int, cache_len: int) -> float:
        """One decode step of `slots` sequences over caches of `cache_len` positions."""
        ...

    def chunk_s(self, index: int, chunk_tokens: int) -> float:
        """One execution of the chunk graph on chunk `index` (from 0) of a prompt cut into
        chunks of `chunk_tokens`: what the chunk adds to the prompt's prefill (its tokens'
        work, attention over the chunks before it included) plus one execution's kernel calls
        (`chunk_time`)."""
        ...


def chunk_time(work_s: Callable[[int], float], calls_s: float, index: int, tokens: int) -> float:
    """Chunk `index` of `tokens`-token chunks: W((index + 1) x tokens) - W(index x tokens) +
    `calls_s`, where W(L) is a prefill graph of L tokens without its kernel calls (W(0) = 0),
    never below the calls alone. A prompt's chunks add up to the prefill of its length rounded
    up to whole chunks, plus one set of kernel calls per chunk."""
    before = work_s(index * tokens) if index > 0 else 0.0
    return calls_s + max(0.0, work_s((index + 1) * tokens) - before)


@dataclass(frozen=True)
class LinearStepTimes:
    """Synthetic times, affine in their arguments: a prefill costs `prefill_base_s` plus
    `prefill_per_token_s` per graph token; a decode step `decode_base_s` plus
    `decode_per_slot_s` per slot plus `decode_per_token_s` per slot and cached position."""

    prefill_base_s: float
    prefill_per_token_s: float
    decode_base_s: float
    decode_per_slot_s: float = 0.0
    decode_per_token_s: float = 0.0

    def prefill_s(self, graph_len: int) -> float:
        return self.prefill_base_s + self.prefill_per_token_s * graph_len

    def decode_step_s(self, slots: int, cache_len: int) -> float:
        per_slot = self.decode_per_slot_s + self.decode_per_token_s * cache_len
        return self.decode_base_s + per_slot * slots

    def chunk_s(self, index: int, chunk_tokens: int) -> float:
        """`prefill_base_s` (the calls) + `prefill_per_token_s` per chunk token."""
        return chunk_time(
            lambda n: self.prefill_per_token_s * n, self.prefill_base_s, index, chunk_tokens
        )


@dataclass(frozen=True)
class DecodeGrid:
    """Decode step times on a grid of (slots, cache length), bilinear in between and clamped to
    the grid's edges outside it."""

    slots: tuple[int, ...]  # increasing
    cache_lens: tuple[int, ...]  # increasing
    times: tuple[tuple[float, ...], ...]  # times[i][j] at (slots[i], cache_lens[j])

    def __post_init__(self) -> None:
        if list(self.slots) != sorted(set(self.slots)) or not self.slots:
            raise ValueError("grid slots must be increasing")
        if list(self.cache_lens) != sorted(set(self.cache_lens)) or not self.cache_lens:
            raise ValueError("grid cache lengths must be increasing")
        if len(self.times) != len(self.slots) or any(
            len(row) != len(self.cache_lens) for row in self.times
        ):
            raise ValueError("grid times must have one row per slot count, one column per length")

    def __call__(self, slots: float, cache_len: float) -> float:
        i, u = _bracket(self.slots, slots)
        j, v = _bracket(self.cache_lens, cache_len)
        t = self.times
        i2 = min(i + 1, len(self.slots) - 1)
        j2 = min(j + 1, len(self.cache_lens) - 1)
        low = t[i][j] * (1 - v) + t[i][j2] * v
        high = t[i2][j] * (1 - v) + t[i2][j2] * v
        return low * (1 - u) + high * u


def _bracket(points: Sequence[int], x: float) -> tuple[int, float]:
    """Index of the grid point at or below `x` and the fraction of the way to the next one
    (0 below the first point, 1 above the last: clamped)."""
    if x <= points[0]:
        return 0, 0.0
    if x >= points[-1]:
        return len(points) - 1, 0.0
    i = bisect.bisect_right(points, x) - 1
    return i, (x - points[i]) / (points[i + 1] - points[i])


def grid_slots(batch: int) -> tuple[int, ...]:
    """Powers of two below the graph's batch, and the batch itself."""
    out = [1 << k for k in range(batch.bit_length()) if (1 << k) < batch]
    return (*out, batch)


def grid_cache_lens(cache_len: int, least: int) -> tuple[int, ...]:
    """`CACHE_FRACTIONS` of the graph's cache length, none below `least`."""
    lens = {max(least, min(cache_len, round(cache_len * f))) for f in CACHE_FRACTIONS}
    return tuple(sorted(lens))


@dataclass(frozen=True)
class GraphFacts:
    """What the serving engine needs to know about the two compiled graphs."""

    decode_slots: int  # the decode graph's batch
    cache_len: int  # positions per slot (with SnapStream the compressed budget)
    max_sequence: int  # the decode mapping's seq_len: prompt + output must fit (paper §2.3)
    tokens_per_step: float  # tokens accepted per sequence and step (MTP)
    prefill_len: int  # the prefill mapping's seq_len: the longest prompt
    prefill_batch: int  # prompts one prefill graph execution takes
    kv_bytes_per_token: float  # every layer's cache bytes for one position (the model spec)
    snapstream: bool
    sockets: int  # sockets of a decode node
    p2p_bandwidth: float  # bytes/s each socket sends (hardware.links)
    p2p_latency_s: float
    prefill_hold: int  # finished caches a prefill node can hold beside its plan (disaggregated)
    min_cache_len: int  # the shortest cache the decode mapping compiles (SnapStream: sink + 1)
    draft_tokens: int = 0  # drafts verified per step, when the accepted tokens are a draw
    acceptance: float = 1.0  # their per-draft acceptance rate
    model: str = ""  # the model's name
    hardware: str = ""  # the decode node's hardware
    hbm_bytes: float = 0.0  # the decode plan per socket: weights, the slots' caches, workspace
    hbm_capacity: float = 0.0  # usable HBM per socket (what the plans are checked against)
    load_s: float = 0.0  # loading the weights' shard from DDR into HBM (a switch to the model)


@dataclass
class SimulatedStepTimes:
    """Step times from rdusim's compiler and simulator for one pair of mappings and overrides."""

    prefill: str
    decode: str
    overrides: tuple[str, ...]
    prefill_overrides: tuple[str, ...] = ()  # applied to the prefill mapping only, after
    decode_overrides: tuple[str, ...] = ()  # applied to the decode mapping only, after
    facts: GraphFacts = field(init=False)
    _prefill: dict[int, float] = field(default_factory=dict, init=False)
    _prefill_calls: dict[int, float] = field(default_factory=dict, init=False)
    _decode: dict[tuple[int, int], float] = field(default_factory=dict, init=False)
    _grid: DecodeGrid | None = field(default=None, init=False)
    # the two graphs at their compiled shapes, simulated: what the calibration ensemble re-prices
    main: dict[str, SimResult] = field(default_factory=dict, init=False)
    hardware: dict[str, Hardware] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        decode_rm = load_mapping(self.decode, self._decode_overrides())
        prefill_rm = load_mapping(self.prefill, self._prefill_overrides())
        _check_phase(prefill_rm, "prefill", "--prefill")
        _check_phase(decode_rm, "decode", "--decode")
        decode_prog = _decode_program(decode_rm)
        prefill_prog = _fitting(prefill_rm, compile_mapping(prefill_rm))
        wl = decode_prog.workload
        hw = decode_rm.hardware
        ss = decode_rm.spec.snapstream
        self.facts = GraphFacts(
            decode_slots=wl.batch,
            cache_len=decode_prog.kv_len,
            max_sequence=decode_rm.spec.seq_len,
            tokens_per_step=decode_prog.tokens_per_step,
            prefill_len=prefill_rm.spec.seq_len,
            prefill_batch=prefill_prog.workload.batch,
            kv_bytes_per_token=summarize(decode_rm.model).kv_bytes_per_token,
            snapstream=decode_prog.snapstream,
            sockets=hw.sockets,
            p2p_bandwidth=hw.links.p2p_bandwidth,
            p2p_latency_s=hw.links.p2p_latency_s,
            prefill_hold=_prefill_hold(prefill_rm, prefill_prog, decode_prog.kv_len),
            min_cache_len=ss.sink + 1 if decode_prog.snapstream else 1,
            draft_tokens=_drafts(decode_prog)[0],
            acceptance=_drafts(decode_prog)[1],
            model=decode_rm.model.name,
            hardware=hw.name,
            hbm_bytes=decode_prog.hbm.used,
            hbm_capacity=hbm_capacity(hw),
            load_s=switch_seconds(
                model_weights(decode_rm.model, hw.sockets), None, hw.sockets, switch_bandwidth(hw)
            ),
        )
        _check_pair(prefill_rm, prefill_prog, decode_rm, decode_prog)
        self.main["decode"] = simulate(decode_prog, hw)
        self.main["prefill"] = simulate(prefill_prog, prefill_rm.hardware)
        self.hardware = {"decode": hw, "prefill": prefill_rm.hardware}
        self._decode[(wl.batch, decode_prog.kv_len)] = self.main["decode"].total_latency_s
        self._prefill[prefill_rm.spec.seq_len] = self.main["prefill"].total_latency_s
        self._prefill_calls[prefill_rm.spec.seq_len] = self.main["prefill"].kernel_call_time_s

    # --- the StepTimes protocol ------------------------------------------------------------

    def prefill_s(self, graph_len: int) -> float:
        if graph_len not in self._prefill:
            result = self._simulate_prefill(graph_len)
            self._prefill[graph_len] = result.total_latency_s
            self._prefill_calls[graph_len] = result.kernel_call_time_s
        return self._prefill[graph_len]

    def chunk_s(self, index: int, chunk_tokens: int) -> float:
        def work(n: int) -> float:
            return self.prefill_s(n) - self._prefill_calls[n]

        self.prefill_s(chunk_tokens)
        return chunk_time(work, self._prefill_calls[chunk_tokens], index, chunk_tokens)

    def decode_step_s(self, slots: int, cache_len: int) -> float:
        key = (slots, cache_len)
        if key in self._decode:
            return self._decode[key]
        return self.grid()(slots, cache_len)

    # --- simulations -------------------------------------------------------------------------

    def grid(self) -> DecodeGrid:
        """The decode grid, simulated on first use."""
        if self._grid is None:
            f = self.facts
            slots = grid_slots(f.decode_slots)
            lens = grid_cache_lens(f.cache_len, f.min_cache_len)
            times = tuple(tuple(self.decode_point_s(b, c) for c in lens) for b in slots)
            self._grid = DecodeGrid(slots, lens, times)
        return self._grid

    def decode_point_s(self, slots: int, cache_len: int) -> float:
        """A decode step simulated at exactly (slots, cache_len), kept for later."""
        key = (slots, cache_len)
        if key not in self._decode:
            rm = load_mapping(
                self.decode, [*self._decode_overrides(), *self._cache_override(cache_len)]
            )
            prog = compile_mapping(rm, batch=slots)
            self._decode[key] = simulate(prog, rm.hardware).total_latency_s
        return self._decode[key]

    def _prefill_overrides(self) -> list[str]:
        return [*self.overrides, *self.prefill_overrides]

    def _decode_overrides(self) -> list[str]:
        return [*self.overrides, *self.decode_overrides]

    def _cache_override(self, cache_len: int) -> list[str]:
        """The `--set` that compiles the decode graph with `cache_len` cached positions."""
        if self.facts.snapstream:
            return [f"snapstream.kv_len={cache_len}"]
        return [f"seq_len={cache_len}"]

    def _simulate_prefill(self, graph_len: int) -> SimResult:
        """The prefill graph compiled for `graph_len`-token prompts; with SnapStream its
        compressed cache keeps the decode graph's length (or the whole prompt, if shorter)."""
        extra = [f"seq_len={graph_len}"]
        if self.facts.snapstream:
            extra.append(f"snapstream.kv_len={min(self.facts.cache_len, graph_len)}")
        rm = load_mapping(self.prefill, [*self._prefill_overrides(), *extra])
        prog = _fitting(rm, compile_mapping(rm))
        return simulate(prog, rm.hardware)


def _drafts(program: Program) -> tuple[int, float]:
    """(k, a) of a decode step whose accepted tokens are a draw; (0, 1.0) for a plain step or
    a reported factor, whose steps accept their mean."""
    sp = program.speculation
    return (sp.draft_tokens, sp.acceptance) if sp.sampled else (0, 1.0)


def _check_phase(rm: ResolvedMapping, phase: str, option: str) -> None:
    if rm.spec.phase != phase:
        raise SpecError(
            f"is a {rm.spec.phase} mapping; {option} needs a {phase} mapping",
            file=rm.source.file,
            key="phase",
            fix=f"name a {phase} mapping (rdusim list shows the shipped ones)",
        )


def _fitting(rm: ResolvedMapping, program: Program) -> Program:
    """`program`, or an infeasible error when it does not fit in HBM."""
    if program.fits:
        return program
    raise does_not_fit(rm, program)


def _prefill_hold(rm: ResolvedMapping, program: Program, cache_len: int) -> int:
    """Finished caches (at the graph's full length, compressed with SnapStream) that fit in the
    memory a prefill node's plan leaves free in the cache's tier (HBM, or DDR when `placement:`
    puts the cache there): a disaggregated prefill node keeps them there until a decode node
    takes them."""
    kv_tokens = cache_len if program.snapstream else rm.spec.seq_len
    per_socket = kv_tokens * summarize(rm.model).kv_bytes_per_token / rm.hardware.sockets
    tier = program.ddr if program.kv_tier == Tier.DDR else program.hbm
    free = max(0.0, tier.capacity - tier.used)
    return int(free // per_socket) if per_socket > 0 else 0


def _decode_program(rm: ResolvedMapping) -> Program:
    """The decode graph as deployed: `batch: max` becomes the largest batch that fits."""
    if rm.spec.batch == "max":
        return max_batch(rm)[1]
    return _fitting(rm, compile_mapping(rm))


def _check_pair(
    prefill_rm: ResolvedMapping, prefill: Program, decode_rm: ResolvedMapping, decode: Program
) -> None:
    """The two graphs must serve the same model, and the prefill graph must hand the decode
    graph the cache it expects: SnapStream in both or in neither, at the same compressed length."""
    where = f"{prefill_rm.source.file} and {decode_rm.source.file}"
    if prefill_rm.model.name != decode_rm.model.name:
        raise SpecError(
            f"the prefill mapping runs {prefill_rm.model.name} and the decode mapping "
            f"{decode_rm.model.name}",
            file=where,
            key="model",
            fix="pair mappings of the same model",
        )
    if prefill.snapstream != decode.snapstream:
        on, off = ("prefill", "decode") if prefill.snapstream else ("decode", "prefill")
        raise SpecError(
            f"SnapStream is enabled in the {on} mapping and not in the {off} mapping",
            file=where,
            key="snapstream.enabled",
            fix="enable it in both or neither (--set snapstream.enabled=... sets both)",
        )
    if prefill.snapstream and prefill.kv_len != decode.kv_len:
        raise SpecError(
            f"the prefill graph compresses the cache to {prefill.kv_len} positions and the "
            f"decode graph holds {decode.kv_len}",
            file=where,
            key="snapstream.kv_len",
            fix="give both mappings the same seq_len and compression (or the same "
            "snapstream.kv_len)",
        )


@lru_cache(maxsize=32)
def _cached(
    prefill: str,
    decode: str,
    overrides: tuple[str, ...],
    prefill_overrides: tuple[str, ...],
    decode_overrides: tuple[str, ...],
) -> SimulatedStepTimes:
    return SimulatedStepTimes(prefill, decode, overrides, prefill_overrides, decode_overrides)


def simulated_step_times(
    prefill: str,
    decode: str,
    overrides: Sequence[str] = (),
    prefill_overrides: Sequence[str] = (),
    decode_overrides: Sequence[str] = (),
) -> SimulatedStepTimes:
    """The step times of a mapping pair under `overrides` (then `prefill_overrides` on the
    prefill mapping alone and `decode_overrides` on the decode one), simulated once per
    process."""
    return _cached(
        resolve_mapping(prefill),
        resolve_mapping(decode),
        tuple(overrides),
        tuple(prefill_overrides),
        tuple(decode_overrides),
    )


@dataclass(frozen=True)
class ScaledStepTimes:
    """Another source's times, every prefill scaled by `prefill_scale` and every decode step by
    `decode_scale`: the serving run under a calibration ensemble member whose graphs run that
    much slower (or faster) than the point's."""

    base: StepTimes
    prefill_scale: float
    decode_scale: float

    def prefill_s(self, graph_len: int) -> float:
        return self.base.prefill_s(graph_len) * self.prefill_scale

    def decode_step_s(self, slots: int, cache_len: int) -> float:
        return self.base.decode_step_s(slots, cache_len) * self.decode_scale

    def chunk_s(self, index: int, chunk_tokens: int) -> float:
        return self.base.chunk_s(index, chunk_tokens) * self.prefill_scale
