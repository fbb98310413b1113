"""Typed mapping spec: which model on which hardware, the workload, SnapStream, and the kernels.

A mapping is data you can diff (Timeloop's split): `kernels:` lists, per layer kind, the fused
kernels in execution order, the ops each fuses (names or shell patterns over the IR's op names),
their sharding and tiling; `kernels: auto` asks the auto-mapper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from rdusim.errors import InfeasibleError, SpecError, SpecErrors
from rdusim.snapstream.config import SnapStreamConfig, VoteNormalisation
from rdusim.spec.base import Strict
from rdusim.spec.catalog import resolve_mapping, resolve_model
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.limits import MAX_BATCH, MAX_SEQ_LEN
from rdusim.spec.model import ModelSpec, load_model_config
from rdusim.spec.overrides import (
    Override,
    apply_hardware_overrides,
    apply_kernel_overrides,
    parse_overrides,
    set_path,
)
from rdusim.spec.placement import PlacementSpec, check_placement
from rdusim.spec.speculation import Drafter, Speculation
from rdusim.spec.yamlio import (
    check_path_keys,
    did_you_mean,
    dotted,
    field_paths,
    line_of,
    read_document,
    to_plain,
    validate,
)

MAX_DEGREE = 1024
ALL_SOCKETS = "all"  # a degree meaning every socket of the node the mapping runs on


def _node_degree(v: Any) -> Any:
    """A sharding degree: a whole number of sockets, or 'all' (every socket of the node)."""
    if v is None or v == ALL_SOCKETS:
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise PydanticCustomError(
            "degree_type",
            "Input should be a whole number of sockets or 'all' (every socket of the node)",
        )
    if v < 1:
        raise PydanticCustomError("greater_than", "Input should be greater than 0")
    if v > MAX_DEGREE:
        raise PydanticCustomError(
            "less_than_equal", f"Input should be at most {MAX_DEGREE} (rdusim's limit)"
        )
    return v


# 'all' keeps a mapping right on any node: sn40l-16 runs it as 16, sn40l-8 as 8
Degree = Annotated[int | Literal["all"], BeforeValidator(_node_degree)]


class Sharding(Strict):
    """How an op is split over sockets. At most one strategy; none (or degree 1) = replicated.
    A degree is a number of sockets or `all`, every socket of the node (`on` resolves it).

    `sp` splits a decode attention's cached sequence over sockets (flash-decoding: each socket
    attends over its slice of every sequence, then the partial results are combined). It may
    be combined with `dp` ({dp: 4, sp: 4}: 4 groups of sequences, each spread over 4 sockets).
    """

    tp: Degree | None = None
    dp: Degree | None = None
    ep: Degree | None = None
    sp: Degree | None = None

    def on(self, sockets: int) -> Sharding:
        """This sharding on a node of `sockets`: every `all` replaced by the socket count."""
        alls = {k: sockets for k in ("tp", "dp", "ep", "sp") if getattr(self, k) == ALL_SOCKETS}
        return self.model_copy(update=alls) if alls else self

    @model_validator(mode="after")
    def _one(self) -> Sharding:
        set_ = [k for k in ("tp", "dp", "ep", "sp") if getattr(self, k) is not None]
        if len(set_) > 1 and set(set_) != {"dp", "sp"}:
            raise ValueError(
                f"give one of tp, dp, ep, sp per op (or dp with sp), not {' and '.join(set_)}"
            )
        return self

    @property
    def strategy(self) -> str:
        """The strategy; a degree of `all` counts as more than one socket (use `on` first on a
        one-socket node)."""
        for k in ("tp", "dp", "ep", "sp"):
            v = getattr(self, k)
            if v == ALL_SOCKETS or (v is not None and v > 1):
                return k
        return "replicate"

    @property
    def degree(self) -> int:
        """Sockets the chosen strategy spans (for dp with sp: the dp groups); `on` resolves
        `all` first."""
        strategy = self.strategy
        return 1 if strategy == "replicate" else _sockets(getattr(self, strategy))

    @property
    def seq_split(self) -> int:
        """Sockets each sequence's cache is split over alongside dp (1 unless dp and sp are
        both given; `sp` alone is the strategy itself)."""
        if self.strategy == "dp" and self.sp is not None:
            return _sockets(self.sp)
        return 1


def _sockets(v: int | str) -> int:
    if isinstance(v, str):
        raise ValueError(f"degree {v!r} needs the node's socket count: call Sharding.on first")
    return v


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
    normalisation: Literal["causal", "candidates"] = Field(
        default="causal",
        description="keys a window query's softmax runs over before it votes: all it sees "
        "(the original SnapKV) or the candidates only",
    )


class Orchestration(StrEnum):
    """Who issues kernel calls (MICRO'24 SN40L §IV-D)."""

    SOFTWARE = "software"  # the host launches every call and waits for every socket
    HARDWARE = "hardware"  # the AGCUs run a pre-loaded call sequence; sockets sync on the links


class MtpMode(StrEnum):
    """How multi-token prediction enters a decode step."""

    VERIFY = "verify"  # the main model verifies k+1 tokens, the MTP module drafts k times
    SCALED = "scaled"  # a plain one-token step whose throughput is multiplied by a factor


class MtpSpec(Strict):
    """Multi-token prediction in decode. `verify` charges the work: the main model checks
    k + 1 tokens per sequence and the MTP module runs k times in sequence; the accepted tokens
    per step are sum_{i=0..k} acceptance^i. `scaled` reproduces a figure reported as a plain
    step's throughput times `tokens_per_step` (the SnapStream paper's Table 5 convention)."""

    draft_tokens: int = Field(default=0, ge=0, le=16, description="draft tokens per step (k)")
    acceptance: float = Field(
        default=0.8, ge=0, le=1, allow_inf_nan=False, description="per-draft acceptance rate"
    )
    mode: MtpMode = MtpMode.VERIFY
    tokens_per_step: float | None = Field(
        default=None, ge=1, le=64, allow_inf_nan=False, description="mode scaled only"
    )

    @model_validator(mode="after")
    def _mode_fields(self) -> MtpSpec:
        if self.mode == MtpMode.SCALED and self.tokens_per_step is None:
            raise ValueError(
                "mode 'scaled' needs tokens_per_step, the reported multiplier (e.g. 2.4)"
            )
        if self.mode == MtpMode.VERIFY and self.tokens_per_step is not None:
            raise ValueError(
                "tokens_per_step is derived in mode 'verify' (sum of acceptance^i); "
                "give draft_tokens and acceptance, or set mode: scaled"
            )
        if self.mode == MtpMode.SCALED and self.draft_tokens:
            raise ValueError(
                "mode 'scaled' runs a plain one-token step, so draft_tokens must be 0 "
                f"(got {self.draft_tokens}); use mode: verify to verify drafts as work"
            )
        return self

    @property
    def speculation(self) -> Speculation:
        """The step's speculation with the MTP module as the drafter (`scaled`: no drafts, the
        reported factor)."""
        drafter = Drafter.MTP if self.uses_module else Drafter.NONE
        if self.mode == MtpMode.SCALED:
            return Speculation(drafter, reported=self.tokens_per_step)
        if not self.draft_tokens:
            return Speculation()
        return Speculation(drafter, self.draft_tokens, self.acceptance)

    @property
    def verified_tokens(self) -> int:
        """Tokens per sequence the main model processes in one step."""
        return self.speculation.verified_tokens

    @property
    def module_runs(self) -> int:
        """Sequential runs of the MTP module per step."""
        return self.speculation.draft_runs

    @property
    def accepted_tokens(self) -> float:
        """Expected tokens accepted per sequence and step."""
        return self.speculation.accepted_tokens

    @property
    def uses_module(self) -> bool:
        return self.draft_tokens > 0 or (self.tokens_per_step or 1.0) > 1.0


class DraftKernels(StrEnum):
    """How a draft model's layers are mapped onto the node."""

    TARGET = "target"  # the target mapping's kernels for the same layer kind (auto where none)
    AUTO = "auto"  # every draft graph auto-mapped: greedy fusion, each op TP over the node


class SpeculativeSpec(Strict):
    """Speculative decoding with a draft model held beside the target (decode only).

    Each step runs the draft's decode step k times, then the target verifies k + 1 tokens per
    sequence; the expected tokens accepted per step are (1 - a^(k+1)) / (1 - a). The draft's
    weights and its KV cache (the batch's sequences at the target's cache length) are charged to
    HBM. `acceptance` is the per-draft acceptance rate: an assumption about the pair and the
    task, not something rdusim derives."""

    draft: str = Field(
        min_length=1,
        max_length=4096,
        description="the draft model: a shipped model name or a model file (as `model:`)",
    )
    draft_tokens: int = Field(ge=1, le=16, description="draft tokens per step (k)")
    acceptance: float = Field(
        ge=0, le=1, allow_inf_nan=False, description="per-draft acceptance rate (a)"
    )
    kernels: DraftKernels = Field(
        default=DraftKernels.TARGET,
        description="target: the draft's layers run the target mapping's kernels for their "
        "layer kind; auto: every draft graph is auto-mapped",
    )

    @field_validator("draft_tokens", mode="before")
    @classmethod
    def _some_drafts(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            raise PydanticCustomError(
                "greater_than_equal",
                "a step drafts at least 1 token (k >= 1); to decode without drafts, remove the "
                "speculative section",
            )
        return v

    @field_validator("acceptance", mode="before")
    @classmethod
    def _probability(cls, v: Any) -> Any:
        if isinstance(v, int | float) and not isinstance(v, bool) and not 0 <= v <= 1:
            raise PydanticCustomError(
                "less_than_equal" if v > 1 else "greater_than_equal",
                "acceptance is the probability that the target accepts a draft token: from 0 to 1",
            )
        return v

    @property
    def speculation(self) -> Speculation:
        return Speculation(Drafter.MODEL, self.draft_tokens, self.acceptance, self.draft)


class RoutingSpec(Strict):
    """How tokens spread over routed experts: uniform, Zipf-skewed, or a measured histogram."""

    distribution: Literal["uniform", "zipf", "histogram"] = "uniform"
    exponent: float | None = Field(default=None, ge=0, le=10, allow_inf_nan=False)
    file: str | None = Field(
        default=None,
        min_length=1,
        description="per-expert loads, one number per line (relative to the mapping file)",
    )

    @model_validator(mode="after")
    def _fields_of(self) -> RoutingSpec:
        if self.distribution == "zipf" and self.exponent is None:
            raise ValueError(
                "distribution 'zipf' needs an exponent, e.g. 1.0 (0 is uniform, so a sweep "
                "over exponents can include it)"
            )
        if self.distribution == "histogram" and self.file is None:
            raise ValueError("distribution 'histogram' needs a file of per-expert loads")
        if self.distribution != "zipf" and self.exponent is not None:
            raise ValueError(f"exponent applies to distribution 'zipf', not {self.distribution!r}")
        if self.distribution != "histogram" and self.file is not None:
            raise ValueError(f"file applies to distribution 'histogram', not {self.distribution!r}")
        return self


class ExpertLoading(StrEnum):
    """Which routed experts' weights a step streams from HBM."""

    TOUCHED = "touched"  # a data-dependent expert loop streams only experts with tokens
    ALL = "all"  # a static trip count streams every expert every step


class MoeSpec(Strict):
    """Routed experts at run time. `touched`: a step streams only the experts some token was
    routed to (a data-dependent expert loop); `all`: every expert's weights stream every step (a
    static trip count)."""

    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    expert_loading: ExpertLoading = ExpertLoading.TOUCHED


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
    model: str = Field(min_length=1, max_length=4096)
    hardware: str = Field(default="sn40l-16", min_length=1, max_length=4096)
    phase: Literal["prefill", "decode"]
    batch: PositiveInt | Literal["max"] = 1
    seq_len: int = Field(gt=0, le=MAX_SEQ_LEN)
    orchestration: Orchestration = Orchestration.HARDWARE
    kernel_looping: bool = Field(
        default=False,
        description="run the layers of a kind that is one kernel as one call with a loop",
    )
    mtp: MtpSpec = Field(default_factory=MtpSpec)
    speculative: SpeculativeSpec | None = None
    moe: MoeSpec = Field(default_factory=MoeSpec)
    snapstream: SnapStreamSpec = Field(default_factory=SnapStreamSpec)
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    kernels: Kernels = "auto"
    reference: str | None = Field(
        default=None,
        max_length=4096,
        description="a mapping (file or shipped name) this one is compared with in its report: "
        "e.g. the deployment a paper measured",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tokens_per_step" in data:
            raise PydanticCustomError(
                "moved",
                "tokens_per_step moved under mtp: give mtp: {draft_tokens: 2, acceptance: 0.8} "
                "(verified work), or mtp: {mode: scaled, tokens_per_step: 2.4} (a reported "
                "multiplier)",
            )
        return data

    @property
    def speculation(self) -> Speculation:
        """What a step speculates: the draft model, else the MTP module, else nothing (a
        prefill runs no drafts)."""
        if self.phase != "decode":
            return Speculation()
        if self.speculative is not None:
            return self.speculative.speculation
        return self.mtp.speculation

    @property
    def tokens_per_step(self) -> float:
        """Tokens accepted per sequence and decode step."""
        return self.speculation.accepted_tokens

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
        if v > MAX_BATCH:
            raise PydanticCustomError(
                "less_than_equal", f"Input should be at most {MAX_BATCH} (rdusim's limit)"
            )
        return v


def snapstream_sizes(m: MappingSpec, file: str | None = None) -> SnapStreamConfig | None:
    """Resolve the compressed cache's regions for this mapping's seq_len (None when disabled)."""
    s = m.snapstream
    if not s.enabled:
        return None
    kv_len = s.kv_len or max(1, int(m.seq_len // s.compression))
    if kv_len > m.seq_len:
        raise InfeasibleError(
            f"kv_len {kv_len} exceeds seq_len {m.seq_len}",
            file=file,
            key="snapstream.kv_len",
            path=("snapstream", "kv_len"),
            fix="choose a compressed length no larger than the prompt",
        )
    budget = kv_len - s.sink
    if budget < 1:
        raise InfeasibleError(
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
        raise InfeasibleError(
            f"sink + recent + topk = {s.sink + recent + topk} but kv_len is {kv_len}",
            file=file,
            key="snapstream",
            path=("snapstream",),
            fix="set kv_len to their sum, or leave recent/topk to be derived",
        )
    if s.obs_window > m.seq_len:
        raise InfeasibleError(
            f"obs_window {s.obs_window} is longer than the prompt ({m.seq_len})",
            file=file,
            key="snapstream.obs_window",
            path=("snapstream", "obs_window"),
            fix="use a window shorter than seq_len",
        )
    try:
        return SnapStreamConfig(
            s.sink, recent, topk, s.obs_window, s.pool_kernel, VoteNormalisation(s.normalisation)
        )
    except (ValueError, TypeError) as exc:
        name = str(exc).split(" ", 1)[0]
        raise InfeasibleError(
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
    expert_loads: tuple[float, ...] = ()  # moe.routing histogram, read from its file
    draft: ModelSpec | None = None  # speculative.draft, loaded


def settable_paths() -> list[str]:
    """Every dotted path `--set` accepts: the fields of the mapping, and of its sections."""
    return field_paths(MappingSpec)


def _unknown_path(key: str, file: str) -> SpecError:
    """The error for a `--set` path that names no field, with the nearest valid path."""
    fields = "seq_len, batch, phase, orchestration, mtp.draft_tokens, snapstream.enabled"
    if key.split(".", 1)[0] == "kernels":
        fix = (
            "set a kernel's field as kernels.<layer kind>.<kernel name>.<field> (e.g. "
            "kernels.moe.MHA.tiling.kv_block=16384), or all kernels with kernels=auto"
        )
    else:
        fix = did_you_mean(key, settable_paths()) + f"use a field of the mapping, e.g. {fields}"
    return SpecError(f"unknown mapping field {key!r}", file=file, key=f"--set {key}", fix=fix)


def apply_overrides(data: dict[str, Any], overrides: list[str], file: str) -> dict[str, Any]:
    """Apply `--set key.path=value` overrides to plain mapping data, checking every path:
    mapping fields and named kernels' fields here; hardware fields once the hardware is loaded
    (`rdusim.spec.overrides`)."""
    parsed = parse_overrides(overrides, file)
    for ov in parsed.mapping:
        if not _known_path(ov.parts):
            raise _unknown_path(ov.key, file)
        set_path(data, ov.parts, ov.value, ov.where, file)
    apply_kernel_overrides(data, parsed.kernels, file)
    return data


def _known_path(parts: list[str]) -> bool:
    return ".".join(parts) in settable_paths()


def check_layer_kinds(spec: MappingSpec, model: ModelSpec, file: str, doc: Any) -> None:
    """Every kind under `kernels:` must be one of the model's layer kinds: a misspelt kind would
    otherwise be ignored, and its layers mapped by nothing the user wrote."""
    if not isinstance(spec.kernels, dict):
        return
    kinds = {model.layer_kind(i) for i in range(model.num_hidden_layers)}
    if getattr(model, "num_nextn_predict_layers", 0):
        kinds.add("moe")  # the MTP module's decoder layer is mapped as a MoE layer
    listed = ", ".join(sorted(kinds))
    errors = [
        SpecError(
            f"{model.name} has no {kind!r} layers (its layer kinds: {listed})",
            file=file,
            key=dotted(("kernels", kind)),
            line=line_of(doc, ("kernels", kind)),
            fix=did_you_mean(kind, kinds) + f"key kernels by a layer kind of the model: {listed}",
        )
        for kind in spec.kernels
        if kind not in kinds
    ]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)


# Keys of a mapping that name files: one no file system accepts (too long, a NUL) is refused,
# naming its key, before the files it names are looked for.
PATH_KEYS = (("model",), ("hardware",), ("moe", "routing", "file"))


def load_mapping(path: str | Path, overrides: list[str] | None = None) -> ResolvedMapping:
    """Read a mapping (a path or a shipped name), apply `--set` overrides, and load the model
    and hardware it names."""
    path = file = resolve_mapping(path)
    doc = read_document(path)
    data = to_plain(doc)
    if not isinstance(data, dict):
        raise SpecError("a mapping must be a set of keys", file=file, fix="see mappings/*.yaml")
    data = apply_overrides(data, overrides or [], file)
    check_path_keys(data, PATH_KEYS, file=file, doc=doc, base=Path(path).parent)
    spec = validate(MappingSpec, data, file=file, doc=doc)
    hardware_overrides = parse_overrides(overrides or [], file).hardware
    return resolve_spec(spec, file, doc, Path(path).parent, hardware_overrides)


def resolve_spec(
    spec: MappingSpec,
    file: str,
    doc: Any,
    base: Path | None,
    hardware_overrides: Sequence[Override] = (),
) -> ResolvedMapping:
    """Load the model and hardware a validated mapping spec names (relative to `base`, the
    mapping's folder) and check the three together. `file` labels errors; `doc`, the parsed
    file when there is one, gives them line numbers."""
    here = base or Path(".")
    try:
        model_path = resolve_model(spec.model, base)
    except SpecError as exc:
        raise SpecError(
            f"model file {spec.model!r} not found",
            file=file,
            key="model",
            line=line_of(doc, ("model",)),
            fix=exc.fix,
        ) from None
    try:
        hardware = load_hardware(spec.hardware, base_dir=here)
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
    hardware = apply_hardware_overrides(hardware, list(hardware_overrides), file)
    model = load_model_config(model_path)
    _check_workload(spec, model, file, doc)
    check_layer_kinds(spec, model, file, doc)
    _check_moe(spec, model, file, doc)
    check_placement(spec.placement, model, file, doc, has_draft=spec.speculative is not None)
    loads = _expert_loads(spec, model, here, file, doc)
    draft = _draft_model(spec, model, base, file, doc)
    return ResolvedMapping(spec, model, hardware, Source(file, doc), loads, draft)


def _draft_model(
    spec: MappingSpec, model: ModelSpec, base: Path | None, file: str, doc: Any
) -> ModelSpec | None:
    """The draft model `speculative:` names, loaded (resolved like `model:`) and checked against
    the target: a decode mapping, no MTP besides it, the same vocabulary, a long enough context."""
    s = spec.speculative
    if s is None:
        return None

    def bad(problem: str, fix: str, key: tuple[str, ...] = ("speculative",)) -> SpecError:
        return SpecError(problem, file=file, key=dotted(key), line=line_of(doc, key), fix=fix)

    if spec.phase != "decode":
        raise bad(
            "speculative decoding applies to decode (a prefill runs no drafts)",
            "remove the speculative section from a prefill mapping",
        )
    if spec.mtp.uses_module:
        raise bad(
            "give one drafter: both mtp (the model's own module) and speculative (a draft "
            "model) are set",
            "remove the mtp section (or set mtp.draft_tokens: 0), or remove speculative",
        )
    try:
        path = resolve_model(s.draft, base)
    except SpecError as exc:
        raise bad(
            f"draft model {s.draft!r} not found", exc.fix or "", ("speculative", "draft")
        ) from None
    draft = load_model_config(path)
    if draft.vocab_size != model.vocab_size:
        raise bad(
            f"the draft {draft.name} has a vocabulary of {draft.vocab_size} tokens and "
            f"{model.name} one of {model.vocab_size}: the target verifies the draft's tokens, "
            "so both need the same tokenizer",
            f"choose a draft with vocab_size {model.vocab_size} (a smaller model of the same "
            "family)",
            ("speculative", "draft"),
        )
    if spec.seq_len > draft.max_position_embeddings:
        raise bad(
            f"seq_len {spec.seq_len} exceeds the draft {draft.name}'s max_position_embeddings "
            f"({draft.max_position_embeddings}); the draft reads every sequence's whole context",
            "use a shorter sequence or a draft with a longer context",
            ("speculative", "draft"),
        )
    return draft


def _check_moe(spec: MappingSpec, model: ModelSpec, file: str, doc: Any) -> None:
    """MoE settings need routed experts: on a dense model they would be silently ignored."""
    if spec.moe.model_fields_set and not getattr(model, "n_routed_experts", 0):
        raise SpecError(
            f"{model.name} has no routed experts, so moe settings do not apply",
            file=file,
            key="moe",
            line=line_of(doc, ("moe",)),
            fix="remove the moe section (and any --set moe.*)",
        )


def _expert_loads(
    spec: MappingSpec, model: ModelSpec, base: Path, file: str, doc: Any
) -> tuple[float, ...]:
    """The per-expert load histogram a `histogram` routing names: one number per expert."""
    routing = spec.moe.routing
    if routing.distribution != "histogram" or routing.file is None:
        return ()
    key = ("moe", "routing", "file")

    def bad(problem: str, fix: str) -> SpecError:
        return SpecError(
            problem, file=file, key="moe.routing.file", line=line_of(doc, key), fix=fix
        )

    experts = getattr(model, "n_routed_experts", 0)
    if not experts:
        raise bad(f"{model.name} has no routed experts", "remove moe.routing from this mapping")
    path = Path(routing.file)
    path = path if path.is_absolute() else base / path
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise bad(
            f"cannot read {routing.file!r}: {getattr(exc, 'strerror', None) or exc}",
            "give a text file of per-expert loads, relative to the mapping file",
        ) from None
    words = text.replace(",", " ").split()
    try:
        loads = tuple(float(w) for w in words)
    except ValueError:
        raise bad(
            f"{routing.file!r} holds something that is not a number",
            "write one non-negative number per expert (token counts or fractions)",
        ) from None
    if len(loads) != experts:
        raise bad(
            f"{routing.file!r} has {len(loads)} loads, and {model.name} has {experts} experts",
            f"write exactly {experts} numbers, one per expert",
        )
    if any(not (v >= 0 and v < float("inf")) for v in loads) or not any(loads):
        raise bad(
            f"{routing.file!r} needs finite, non-negative loads, not all zero",
            "write token counts or fractions per expert",
        )
    top_k = getattr(model, "num_experts_per_tok", 1)
    if sum(v > 0 for v in loads) < top_k:
        raise bad(
            f"{routing.file!r} gives {sum(v > 0 for v in loads)} experts a positive load, and "
            f"every token of {model.name} picks {top_k} distinct experts",
            f"give at least {top_k} experts a positive load",
        )
    return loads


def _check_workload(spec: MappingSpec, model: ModelSpec, file: str, doc: Any) -> None:
    """Checks that need the model too: what `batch: max` and `tokens_per_step` may mean."""
    if spec.batch == "max" and spec.phase != "decode":
        raise SpecError(
            "batch 'max' (the largest batch that fits in HBM) applies to decode only",
            file=file,
            key="batch",
            line=line_of(doc, ("batch",)),
            fix="give a number of prompts prefilled together (the paper's prefill runs 1)",
        )
    modules = getattr(model, "num_nextn_predict_layers", 0)
    if spec.mtp.uses_module and modules == 0:
        raise SpecError(
            f"multi-token prediction needs an MTP module, and {model.name} has none",
            file=file,
            key="mtp",
            line=line_of(doc, ("mtp",)),
            fix="remove the mtp section (or set mtp.draft_tokens: 0)",
        )
    if spec.mtp.uses_module and spec.phase != "decode":
        raise SpecError(
            "multi-token prediction applies to decode",
            file=file,
            key="mtp",
            line=line_of(doc, ("mtp",)),
            fix="remove the mtp section from a prefill mapping",
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
