"""Typed mapping spec: which model on which hardware, the workload, SnapStream, and the kernels.

A mapping is data you can diff (Timeloop's split): `kernels:` lists, per layer kind, the fused
kernels in execution order, the ops each fuses (names or shell patterns over the IR's op names),
their sharding and tiling; `kernels: auto` asks the auto-mapper.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from rdusim.errors import SpecError
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.base import Strict
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.model import ModelSpec, load_model_config
from rdusim.spec.yamlio import line_of, parse_value, read_document, to_plain, validate


class Sharding(Strict):
    """How an op is split over sockets. At most one strategy; none (or degree 1) = replicated."""

    tp: PositiveInt | None = None
    dp: PositiveInt | None = None
    ep: PositiveInt | None = None

    @model_validator(mode="after")
    def _one(self) -> Sharding:
        set_ = [k for k in ("tp", "dp", "ep") if getattr(self, k) is not None]
        if len(set_) > 1:
            raise ValueError(f"give one of tp, dp, ep per op, not {' and '.join(set_)}")
        return self

    @property
    def strategy(self) -> str:
        for k in ("tp", "dp", "ep"):
            v = getattr(self, k)
            if v is not None and v > 1:
                return k
        return "replicate"

    @property
    def degree(self) -> int:
        for k in ("tp", "dp", "ep"):
            v = getattr(self, k)
            if v is not None:
                return int(v)
        return 1


class Tiling(Strict):
    tile_tokens: PositiveInt | None = Field(
        default=None, description="rows of a streamed tile (default: the compiler's choice)"
    )
    kv_block: PositiveInt | None = Field(
        default=None, description="K/V positions per block for flash-style attention"
    )


class KernelSpec(Strict):
    name: str = Field(min_length=1)
    ops: list[str] = Field(min_length=1)
    sharding: Sharding = Field(default_factory=Sharding)
    overrides: dict[str, Sharding] = Field(
        default_factory=dict, description="per-op sharding, keyed by op name or pattern"
    )
    tiling: Tiling = Field(default_factory=Tiling)


class SnapStreamSpec(Strict):
    """SnapStream's static sizes. `kv_len` (the compressed cache) defaults to seq_len/compression;
    sink is fixed, and the rest of the budget is split between the recent ring and top-K."""

    enabled: bool = False
    kv_len: PositiveInt | None = None
    compression: float = Field(default=4.0, ge=1.0)
    sink: int = Field(default=128, ge=0)
    recent: PositiveInt | None = None
    topk: int | None = Field(default=None, ge=0)
    obs_window: PositiveInt = 128
    pool_kernel: PositiveInt = 7


def _kernels_form(v: Any) -> str:
    return "literal['auto']" if isinstance(v, str) else "dict[str,list[KernelSpec]]"


# Kernels per layer kind, or "auto". The discriminator validates only the form the user wrote, so
# a mistake inside a kernel is one error (not a second "should be 'auto'"); the bracketed tags
# are dropped from the key paths errors report.
Kernels = Annotated[
    Annotated[dict[str, list[KernelSpec]], Tag("dict[str,list[KernelSpec]]")]
    | Annotated[Literal["auto"], Tag("literal['auto']")],
    Discriminator(_kernels_form),
]


class MappingSpec(Strict):
    name: str = ""
    model: str
    hardware: str = "sn40l-16"
    phase: Literal["prefill", "decode"]
    batch: PositiveInt | Literal["max"] = 1
    seq_len: PositiveInt
    tokens_per_step: float = Field(
        default=1.0, ge=1.0, description="tokens accepted per decode step (MTP; the paper uses 2.4)"
    )
    snapstream: SnapStreamSpec = Field(default_factory=SnapStreamSpec)
    kernels: Kernels = "auto"

    @field_validator("batch", mode="before")
    @classmethod
    def _batch(cls, v: Any) -> Any:
        """One error naming `batch` (not one per branch of the int-or-'max' union)."""
        if v == "max":
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise PydanticCustomError(
                "int_type", "Input should be a positive whole number or 'max'"
            )
        if v < 1:
            raise PydanticCustomError("greater_than", "Input should be greater than 0")
        return v


def snapstream_sizes(m: MappingSpec, file: str | None = None) -> SnapStreamConfig | None:
    """Resolve the compressed cache's regions for this mapping's seq_len (None when disabled)."""
    s = m.snapstream
    if not s.enabled:
        return None
    kv_len = s.kv_len or max(1, int(m.seq_len // s.compression))
    if kv_len > m.seq_len:
        raise SpecError(
            f"kv_len {kv_len} exceeds seq_len {m.seq_len}",
            file=file,
            key="snapstream.kv_len",
            path=("snapstream", "kv_len"),
            fix="choose a compressed length no larger than the prompt",
        )
    budget = kv_len - s.sink
    if budget < 1:
        raise SpecError(
            f"sink {s.sink} leaves no room in a {kv_len}-slot cache",
            file=file,
            key="snapstream.sink",
            path=("snapstream", "sink"),
            fix="use a smaller sink or a larger kv_len",
        )
    # the ring buffer needs at least one slot: decoding writes every new token into it
    recent = s.recent if s.recent is not None else max(1, budget // 2)
    topk = s.topk if s.topk is not None else budget - recent
    if s.sink + recent + topk != kv_len:
        raise SpecError(
            f"sink + recent + topk = {s.sink + recent + topk} but kv_len is {kv_len}",
            file=file,
            key="snapstream",
            path=("snapstream",),
            fix="set kv_len to their sum, or leave recent/topk to be derived",
        )
    if s.obs_window > m.seq_len:
        raise SpecError(
            f"obs_window {s.obs_window} is longer than the prompt ({m.seq_len})",
            file=file,
            key="snapstream.obs_window",
            path=("snapstream", "obs_window"),
            fix="use a window shorter than seq_len",
        )
    try:
        return SnapStreamConfig(s.sink, recent, topk, s.obs_window, s.pool_kernel)
    except (ValueError, TypeError) as exc:
        name = str(exc).split(" ", 1)[0]
        raise SpecError(
            str(exc),
            file=file,
            key=f"snapstream.{name}",
            path=("snapstream", name),
            fix="use a valid size for this SnapStream parameter",
        ) from None


@dataclass(frozen=True)
class Source:
    """Where a spec came from, so later errors can point at the line."""

    file: str
    doc: Any

    def locate(self, exc: SpecError) -> SpecError:
        path = getattr(exc, "path", None)
        line = line_of(self.doc, path) if path else None
        return exc.located(self.file, line)


@dataclass(frozen=True)
class ResolvedMapping:
    spec: MappingSpec
    model: ModelSpec
    hardware: Hardware
    source: Source


def apply_overrides(data: dict[str, Any], overrides: list[str], file: str) -> dict[str, Any]:
    """Apply `--set key.path=value` overrides to plain mapping data, checking every path."""
    for item in overrides:
        if "=" not in item:
            raise SpecError(
                f"--set expects key=value, got {item!r}",
                file=file,
                key="--set",
                fix="write e.g. --set seq_len=65536",
            )
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        if not _known_path(parts):
            raise SpecError(
                f"unknown mapping field {key!r}",
                file=file,
                key=f"--set {key}",
                fix="use a field of the mapping, e.g. seq_len, batch, phase, hardware, "
                "tokens_per_step, snapstream.enabled, snapstream.kv_len",
            )
        node = data
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise SpecError(f"{p} is not a section", key=f"--set {key}", fix="check the path")
        node[parts[-1]] = parse_value(value)
    return data


def _known_path(parts: list[str]) -> bool:
    model: Any = MappingSpec
    for i, p in enumerate(parts):
        fields = getattr(model, "model_fields", None)
        if fields is None or p not in fields:
            return False
        ann = fields[p].annotation
        if i < len(parts) - 1:
            if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
                return False
            model = ann
    return True


def load_mapping(path: str | Path, overrides: list[str] | None = None) -> ResolvedMapping:
    """Read a mapping, apply `--set` overrides, and load the model and hardware it names."""
    file = str(path)
    doc = read_document(path)
    data = to_plain(doc)
    if not isinstance(data, dict):
        raise SpecError("a mapping must be a set of keys", file=file, fix="see mappings/*.yaml")
    data = apply_overrides(data, overrides or [], file)
    spec = validate(MappingSpec, data, file=file, doc=doc)
    base = Path(path).parent
    model_path = Path(spec.model)
    if not model_path.is_absolute():
        candidates = [base / model_path, model_path]
        model_path = next((c for c in candidates if c.exists()), base / model_path)
    if not model_path.exists():
        raise SpecError(
            f"model file {spec.model!r} not found",
            file=file,
            key="model",
            line=line_of(doc, ("model",)),
            fix="give a path relative to the mapping file (e.g. ../models/deepseek-r1.yaml)",
        )
    try:
        hardware = load_hardware(spec.hardware, base_dir=base)
    except SpecError as exc:
        if exc.file is None:
            raise SpecError(
                exc.problem,
                file=file,
                key="hardware",
                line=line_of(doc, ("hardware",)),
                fix=exc.fix,
            ) from None
        raise
    model = load_model_config(model_path)
    _check_workload(spec, model, file, doc)
    return ResolvedMapping(spec, model, hardware, Source(file, doc))


def _check_workload(spec: MappingSpec, model: ModelSpec, file: str, doc: Any) -> None:
    """Checks that need the model too: what `batch: max` and `tokens_per_step` may mean."""
    if spec.batch == "max" and spec.phase != "decode":
        raise SpecError(
            "batch 'max' (the largest batch that fits in HBM) applies to decode only",
            file=file,
            key="batch",
            line=line_of(doc, ("batch",)),
            fix="give a number (prefill runs one prompt at a time: batch 1)",
        )
    drafts = getattr(model, "num_nextn_predict_layers", 0)
    if spec.phase == "decode" and spec.tokens_per_step > 1 and drafts == 0:
        raise SpecError(
            f"tokens_per_step {spec.tokens_per_step:g} needs a draft model, and "
            f"{model.name} has no MTP module",
            file=file,
            key="tokens_per_step",
            line=line_of(doc, ("tokens_per_step",)),
            fix="set tokens_per_step: 1",
        )
    if spec.seq_len > model.max_position_embeddings:
        raise SpecError(
            f"seq_len {spec.seq_len} exceeds the model's max_position_embeddings "
            f"({model.max_position_embeddings})",
            file=file,
            key="seq_len",
            line=line_of(doc, ("seq_len",)),
            fix="use a shorter sequence",
        )
