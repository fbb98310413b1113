"""Typed model specs, written with Hugging Face `config.json` field names.

Each supported family (`model_type`) is one config class registered with `@family`, which also
names the builders that turn it into IR graphs (`rdusim.ir.families`): adding a family is one
class and one registration. A `config.json` of a registered family is accepted as it is. A key
rdusim does not read is ignored only when it cannot change what the model computes; a key whose
value would make a model rdusim cannot build exactly is refused with the key named, so a model is
never silently another one. rdusim adds one optional section of its own, `dtypes`, because
precision decides what fits in HBM; its defaults are documented on `Dtypes`.

Any other key is an error with the nearest known key suggested (a misspelt
`num_key_value_heads` would otherwise make a different model), except the keys listed in
`IGNORED_KEYS` (and a family's `ignored_keys`): keys that leave every shape and cost unchanged.
README.md lists the same keys, and a test keeps the two lists equal.

Every size has an upper limit (`LIMITS`), several times the largest published model's, so that no
model file can make a run take unbounded time or memory; an error names the key and its limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.catalog import resolve_model
from rdusim.spec.limits import MAX_SEQ_LEN
from rdusim.spec.yamlio import (
    did_you_mean,
    line_of,
    read_document,
    reject_bools,
    to_plain,
    validate,
)

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


# Upper limits of the model keys. For scale: DeepSeek-R1 has 61 layers, hidden size 7168, 256
# routed experts and a vocabulary of 129280; Llama-3.1-405B has 126 layers, hidden size 16384 and
# intermediate size 53248.
LIMITS: dict[str, int] = {
    "hidden_size": 131_072,
    "intermediate_size": 1_048_576,
    "num_hidden_layers": 1024,
    "num_attention_heads": 1024,
    "num_key_value_heads": 1024,
    "vocab_size": 4_194_304,
    "max_position_embeddings": MAX_SEQ_LEN,
    "head_dim": 4096,
    "moe_intermediate_size": 1_048_576,
    "n_routed_experts": 4096,
    "n_shared_experts": 64,
    "num_experts_per_tok": 4096,
    "n_group": 4096,
    "topk_group": 4096,
    "first_k_dense_replace": 1024,
    "moe_layer_freq": 1024,
    "q_lora_rank": 131_072,
    "kv_lora_rank": 131_072,
    "qk_nope_head_dim": 4096,
    "qk_rope_head_dim": 4096,
    "v_head_dim": 4096,
    "num_nextn_predict_layers": 16,
    "sliding_window": MAX_SEQ_LEN,
    "num_local_experts": 4096,
    "num_experts": 4096,
    "shared_expert_intermediate_size": 1_048_576,
    "decoder_sparse_step": 1024,
}


# Keys of Hugging Face config.json files that rdusim accepts and ignores because they change no
# shape or cost, grouped by why. README.md ("Model files") lists the same groups.
IGNORED_KEY_GROUPS: dict[str, tuple[str, ...]] = {
    "name the code and version that load the checkpoint": (
        "architectures",
        "auto_map",
        "transformers_version",
        "_name_or_path",
    ),
    "token ids": ("bos_token_id", "eos_token_id", "pad_token_id"),
    "set RoPE's rotation angles, tables indexed by position; the rotary op is the same "
    "multiply-add per element whatever the angles, and YaRN's attention factor folds into them": (
        "rope_theta",
        "rope_scaling",
        "rope_interleave",
    ),
    "the checkpoint's storage precision; `dtypes` decides precision": ("torch_dtype", "dtype"),
    "numerics that cost nothing extra: a norm's epsilon, a constant scale of the routed experts' "
    "sum, renormalising k router weights": (
        "rms_norm_eps",
        "routed_scaling_factor",
        "norm_topk_prob",
    ),
    "training only: initialisation, dropout, router losses and noise, tensor-parallel "
    "pretraining": (
        "initializer_range",
        "attention_dropout",
        "router_aux_loss_coef",
        "output_router_logits",
        "router_jitter_noise",
        "aux_loss_alpha",
        "seq_aux",
        "pretraining_tp",
    ),
    "runtime settings of the reference code: the generation cache, its expert-parallel size": (
        "use_cache",
        "ep_size",
    ),
}
IGNORED_KEYS: frozenset[str] = frozenset(k for keys in IGNORED_KEY_GROUPS.values() for k in keys)


def _size(name: str, default: Any = ..., *, least: int = 1) -> Any:
    """A whole number from `least` to `LIMITS[name]` (required unless a default is given)."""
    return Field(default=default, ge=least, le=LIMITS[name])


def check_limit(name: str, value: Any) -> Any:
    """Refuse a number above the key's limit before pydantic parses it, so that `1e29` reads
    "less than or equal to 1024" rather than an integer-parsing failure."""
    limit = LIMITS.get(name)
    if limit is None or isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return value  # pydantic names it: "Input should be a finite number"
    if value > limit:
        raise PydanticCustomError(
            "less_than_equal", "Input should be less than or equal to {le}", {"le": limit}
        )
    return value


def _inconsistent(message: str) -> PydanticCustomError:
    return PydanticCustomError("inconsistent", message)


class Dtypes(BaseModel):
    """Precisions. Defaults: BF16 activations and KV cache (the paper's Listings use bf16).

    Weights default to the checkpoint's precision: FP8 for DeepSeek-V3/R1 (published with
    128x128 block scales; 671B parameters only fit in 16 x 64 GB of HBM in FP8), BF16 for the
    other families. Embedding, LM head, norms, biases and the MoE gates stay in BF16
    (`dense_weights`), as in the FP8 checkpoint.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    weights: Dtype | None = None
    dense_weights: Dtype = "bf16"
    activations: Dtype = "bf16"
    kv_cache: Dtype = "bf16"


class ModelConfig(BaseModel):
    """The keys every family shares; a family's class adds its own and its layer kinds."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    # Keys this family accepts and ignores besides `IGNORED_KEYS`, and why (README lists them).
    ignored_keys: ClassVar[dict[str, str]] = {}

    model_type: str
    name: str = ""
    hidden_size: int = _size("hidden_size")
    intermediate_size: int = _size("intermediate_size")
    num_hidden_layers: int = _size("num_hidden_layers")
    num_attention_heads: int = _size("num_attention_heads")
    num_key_value_heads: int | None = _size("num_key_value_heads", None)
    vocab_size: int = _size("vocab_size")
    tie_word_embeddings: bool = False
    max_position_embeddings: int = _size("max_position_embeddings", 131072)
    hidden_act: str = "silu"
    dtypes: Dtypes = Field(default_factory=Dtypes)
    # A checkpoint's quantization scheme: accepted when `dtypes` says the precision (see
    # `unmodelled`), since rdusim takes precision from `dtypes` alone.
    quantization_config: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        """Refuse every key the family neither reads nor lists as changing nothing."""
        if isinstance(data, dict):
            _raise_all(unknown_model_keys(cls, data))
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        annotation = field.annotation if field else None
        if bool in get_args(annotation):  # `bool | None`: a boolean key that may be absent
            annotation = bool
        return check_limit(info.field_name or "", reject_bools(v, annotation))

    @model_validator(mode="after")
    def _modelled(self) -> ModelConfig:
        """Refuse, key by key, values that would describe a model rdusim cannot build."""
        _raise_all(self.unmodelled())
        return self

    def unmodelled(self) -> list[SpecError]:
        """Problems with keys whose values rdusim cannot model exactly.

        `hidden_act` must be `silu`: every family here has a SwiGLU FFN, and another activation
        would cost differently. A `quantization_config` is accepted when the weights' precision
        it implies is the one rdusim uses: `dtypes.weights` given explicitly, or FP8 where the
        family's default is FP8 (DeepSeek-V3's published checkpoint).
        """
        out = []
        if self.hidden_act != "silu":
            out.append(
                SpecError(
                    f"hidden_act {self.hidden_act!r} is not modelled: rdusim builds SwiGLU FFNs "
                    "(SiLU(gate) * up)",
                    key="hidden_act",
                    fix="use a model whose hidden_act is silu",
                )
            )
        quant = self.quantization_config
        if quant is not None and self.dtypes.weights is None:
            method = quant.get("quant_method")
            if not (method == "fp8" and self.default_weight_dtype == "fp8"):
                out.append(
                    SpecError(
                        f"quantization_config (quant_method {method!r}) is not read: rdusim "
                        f"takes the weights' precision from dtypes.weights, which defaults to "
                        f"{self.default_weight_dtype} for {self.model_type}",
                        key="quantization_config",
                        fix="set dtypes.weights to the checkpoint's weight precision (e.g. "
                        "dtypes: {weights: int4} for a 4-bit checkpoint); quantization_config "
                        "is then ignored",
                    )
                )
        return out

    def bytes_of(self, which: str) -> float:
        dt = getattr(self.dtypes, which)
        if dt is None:
            dt = self.default_weight_dtype
        return DTYPE_BYTES[dt]

    @property
    def default_weight_dtype(self) -> str:
        return "bf16"

    def layer_kind(self, index: int) -> str:
        """The kind ('dense' | 'moe') of decoder layer `index`."""
        return "dense"


def _raise_all(errors: list[SpecError]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)


def family_name(cls: type[ModelConfig]) -> str:
    """The `model_type` a config class is registered under (its class name if none)."""
    args = get_args(cls.model_fields["model_type"].annotation)
    return str(args[0]) if len(args) == 1 else cls.__name__


def accepted_keys(cls: type[ModelConfig]) -> set[str]:
    """Every top-level key a model file of this family may hold."""
    return set(cls.model_fields) | IGNORED_KEYS | set(cls.ignored_keys)


def unknown_model_keys(cls: type[ModelConfig], data: dict[str, Any]) -> list[SpecError]:
    """One error per key of `data` (and of its `dtypes` section) that `cls` does not accept,
    with the nearest accepted key suggested."""
    errors = []
    fields = sorted(cls.model_fields)
    accepted = accepted_keys(cls)
    for key in data:
        if key in accepted:
            continue
        suggestion = did_you_mean(str(key), accepted)
        listed = "" if suggestion else f"; a {family_name(cls)} model reads: {', '.join(fields)}"
        errors.append(
            SpecError(
                f"unknown key: {family_name(cls)} reads no such key, and rdusim ignores only "
                "the keys listed as changing nothing (README.md, Model files)",
                key=str(key),
                fix=suggestion + f"remove the key or check its spelling{listed}",
            )
        )
    dtypes = data.get("dtypes")
    if isinstance(dtypes, dict):
        for key in dtypes:
            if key not in Dtypes.model_fields:
                errors.append(
                    SpecError(
                        f"unknown key {key!r} in dtypes",
                        key=f"dtypes.{key}",
                        fix=did_you_mean(str(key), Dtypes.model_fields)
                        + "remove the key or check its spelling; dtypes takes: "
                        + ", ".join(Dtypes.model_fields),
                    )
                )
    return errors


M = TypeVar("M", bound=ModelConfig)


@dataclass(frozen=True)
class Family:
    """A registered model family: its config class, and the module under `rdusim.ir.builders`
    that builds its graphs (resolved by `rdusim.ir.families`)."""

    config: type[ModelConfig]
    builders: str


FAMILIES: dict[str, Family] = {}


def family(*, builders: str) -> Callable[[type[M]], type[M]]:
    """Register a config class under the `model_type` its `Literal` names."""

    def register(cls: type[M]) -> type[M]:
        (model_type,) = get_args(cls.model_fields["model_type"].annotation)
        if model_type in FAMILIES:
            raise ValueError(f"model family {model_type!r} registered twice")
        FAMILIES[model_type] = Family(cls, builders)
        return cls

    return register


@family(builders="deepseek")
class DeepSeekV3Config(ModelConfig):
    """DeepSeek-V3 / R1: MLA attention, first `first_k_dense_replace` layers dense, rest MoE."""

    model_type: Literal["deepseek_v3"]
    moe_intermediate_size: int = _size("moe_intermediate_size")
    n_routed_experts: int = _size("n_routed_experts")
    n_shared_experts: int = _size("n_shared_experts", least=0)
    num_experts_per_tok: int = _size("num_experts_per_tok")
    n_group: int = _size("n_group", 1)
    topk_group: int = _size("topk_group", 1)
    first_k_dense_replace: int = _size("first_k_dense_replace", least=0)
    moe_layer_freq: int = _size("moe_layer_freq", 1)
    q_lora_rank: int = _size("q_lora_rank")
    kv_lora_rank: int = _size("kv_lora_rank")
    qk_nope_head_dim: int = _size("qk_nope_head_dim")
    qk_rope_head_dim: int = _size("qk_rope_head_dim")
    v_head_dim: int = _size("v_head_dim")
    num_nextn_predict_layers: int = _size("num_nextn_predict_layers", 0, least=0)
    scoring_func: Literal["sigmoid", "softmax"] = "sigmoid"
    # The bias-corrected group-limited top-k that `router_topk` models (DeepSeek-V3's only one).
    topk_method: Literal["noaux_tc"] = "noaux_tc"
    attention_bias: bool = False

    def unmodelled(self) -> list[SpecError]:
        out = super().unmodelled()
        if self.attention_bias:
            out.append(
                SpecError(
                    "attention_bias: true (biases on the MLA projections) is not modelled",
                    key="attention_bias",
                    fix="set attention_bias: false, as DeepSeek-V3 and R1 are published",
                )
            )
        return out

    @property
    def default_weight_dtype(self) -> str:
        return "fp8"

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    # Cross-key checks are field validators on the later key, so an error names its key and line.
    @field_validator("num_experts_per_tok")
    @classmethod
    def _topk_fits(cls, v: int, info: ValidationInfo) -> int:
        n = info.data.get("n_routed_experts")
        if n is not None and v > n:
            raise _inconsistent(f"num_experts_per_tok = {v} exceeds n_routed_experts = {n}")
        return v

    @field_validator("n_group")
    @classmethod
    def _groups_divide(cls, v: int, info: ValidationInfo) -> int:
        n = info.data.get("n_routed_experts")
        if n is not None and n % v:
            raise _inconsistent(f"n_routed_experts = {n} is not a multiple of n_group = {v}")
        return v

    @field_validator("topk_group")
    @classmethod
    def _topk_group_fits(cls, v: int, info: ValidationInfo) -> int:
        g = info.data.get("n_group")
        if g is not None and v > g:
            raise _inconsistent(f"topk_group = {v} exceeds n_group = {g}")
        return v

    @field_validator("first_k_dense_replace")
    @classmethod
    def _dense_fits(cls, v: int, info: ValidationInfo) -> int:
        n = info.data.get("num_hidden_layers")
        if n is not None and v > n:
            raise _inconsistent(f"first_k_dense_replace = {v} exceeds num_hidden_layers = {n}")
        return v

    def layer_kind(self, index: int) -> str:
        if index >= self.first_k_dense_replace and index % self.moe_layer_freq == 0:
            return "moe"
        return "dense"


# ------------------------------------------------------------------------------------------------
# Llama-style families: GQA attention with RoPE, SwiGLU FFN (dense, or routed experts)

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
FFN_PROJECTIONS = ("ffn_up_proj", "ffn_down_proj")
AttentionType = Literal["full_attention", "sliding_attention"]


class GQAConfig(ModelConfig):
    """Llama-style decoders. Families differ in traits transformers hard-codes for each (the
    class attributes below) and in a few keys (biases, sliding window, experts)."""

    # Projections transformers always gives a bias in this family, whatever the config says.
    fixed_biases: ClassVar[tuple[str, ...]] = ()
    # Whether `attention_bias` (q, k, v, o) and `mlp_bias` (gate, up, down) are keys of the family.
    attention_bias_key: ClassVar[bool] = False
    mlp_bias_key: ClassVar[bool] = False
    # RMSNorm of each query and key head before RoPE (Qwen3).
    qk_norm: ClassVar[bool] = False

    head_dim: int | None = _size("head_dim", None)
    attention_bias: bool | None = None
    mlp_bias: bool | None = None
    layer_types: list[AttentionType] | None = None

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def attention_window(self) -> int | None:
        """Keys each query attends to at most (a sliding window), or None for full attention."""
        return None

    @property
    def biased(self) -> frozenset[str]:
        """Projections with a bias vector (parameters, and an add folded into the GEMM)."""
        out = set(self.fixed_biases)
        if self.attention_bias_key and self.attention_bias:
            out.update(ATTENTION_PROJECTIONS)
        if self.mlp_bias_key and self.mlp_bias:
            out.update(FFN_PROJECTIONS)
        return frozenset(out)

    @field_validator("num_key_value_heads")
    @classmethod
    def _gqa_groups(cls, v: int | None, info: ValidationInfo) -> int | None:
        n = info.data.get("num_attention_heads")
        if v is not None and n is not None and n % v:
            raise _inconsistent(
                f"num_attention_heads = {n} is not a multiple of num_key_value_heads = {v}"
            )
        return v

    def unmodelled(self) -> list[SpecError]:
        return [
            *super().unmodelled(),
            *self._head_dim_problems(),
            *self._bias_problems(),
            *self._layer_type_problems(),
        ]

    def _head_dim_problems(self) -> list[SpecError]:
        """Without `head_dim` each head is hidden_size / num_attention_heads wide, which must be
        whole (transformers would truncate it and build another model)."""
        hidden, heads = self.hidden_size, self.num_attention_heads
        if self.head_dim is not None or hidden % heads == 0:
            return []
        return [
            SpecError(
                f"hidden_size = {hidden} is not a multiple of num_attention_heads = {heads} "
                f"({hidden} / {heads} = {hidden / heads:.4g}), and no head_dim gives each "
                "head's width",
                key="num_attention_heads",
                fix=f"set head_dim (hidden_size // num_attention_heads would truncate it to "
                f"{hidden // heads}), or use a head count that divides {hidden}",
            )
        ]

    def _bias_problems(self) -> list[SpecError]:
        """`attention_bias` / `mlp_bias` where the family does not read them: accepted only when
        they agree with the biases transformers builds anyway."""
        out = []
        fixed = set(self.fixed_biases)
        if not self.attention_bias_key and self.attention_bias is not None:
            implied = set(ATTENTION_PROJECTIONS) if self.attention_bias else set()
            if implied != fixed & set(ATTENTION_PROJECTIONS):
                has = (
                    "biases the q, k and v projections and not o"
                    if fixed
                    else "has no projection biases"
                )
                out.append(
                    SpecError(
                        f"{self.model_type} {has} whatever attention_bias says (transformers "
                        f"does not read it for this family), so attention_bias: "
                        f"{str(self.attention_bias).lower()} would describe another model",
                        key="attention_bias",
                        fix="remove attention_bias (model_type llama reads it: biases on q, k, "
                        "v and o)",
                    )
                )
        if not self.mlp_bias_key and self.mlp_bias:
            out.append(
                SpecError(
                    f"{self.model_type} has no FFN biases (transformers does not read mlp_bias "
                    "for this family), so mlp_bias: true would describe another model",
                    key="mlp_bias",
                    fix="remove mlp_bias (model_type llama reads it)",
                )
            )
        return out

    def _layer_type_problems(self) -> list[SpecError]:
        """`layer_types` must give every layer the attention the family's keys describe:
        rdusim builds one attention kind for all layers of a model."""
        if self.layer_types is None:
            return []
        n = self.num_hidden_layers
        if len(self.layer_types) != n:
            return [
                SpecError(
                    f"layer_types lists {len(self.layer_types)} layers, and num_hidden_layers "
                    f"is {n}",
                    key="layer_types",
                    fix="give one attention type per layer, or remove layer_types",
                )
            ]
        kinds = sorted(set(self.layer_types))
        if len(kinds) > 1:
            return [
                SpecError(
                    "layer_types mixes full_attention and sliding_attention layers; rdusim "
                    "builds one attention kind for every layer of a model",
                    key="layer_types",
                    fix="give every layer the same type (or remove layer_types); a mixed model "
                    "is not modelled",
                )
            ]
        expected = "sliding_attention" if self.attention_window else "full_attention"
        if kinds[0] != expected:
            window = (
                f"a sliding window of {self.attention_window}"
                if self.attention_window
                else "no sliding window"
            )
            return [
                SpecError(
                    f"layer_types makes every layer {kinds[0]}, and the other keys give "
                    f"{self.model_type} {window}",
                    key="layer_types",
                    fix="make layer_types agree with sliding_window (or remove layer_types)",
                )
            ]
        return []


class _QwenWindow(GQAConfig):
    """The Qwen families' sliding-window keys: off unless `use_sliding_window` is true."""

    ignored_keys: ClassVar[dict[str, str]] = {
        "sliding_window": "read only when use_sliding_window is true, which is refused",
        "max_window_layers": "read only when use_sliding_window is true, which is refused",
    }
    use_sliding_window: bool = False

    def unmodelled(self) -> list[SpecError]:
        out = super().unmodelled()
        if self.use_sliding_window:
            out.append(
                SpecError(
                    f"use_sliding_window: true gives {self.model_type}'s layers from "
                    "max_window_layers on a sliding window and the others full attention; "
                    "rdusim builds one attention kind for every layer",
                    key="use_sliding_window",
                    fix="set use_sliding_window: false (as the published checkpoints do) to "
                    "model full attention in every layer",
                )
            )
        return out


class MoEConfig(GQAConfig):
    """Llama-style families with routed experts (softmax routing): `layer_kind` places the MoE
    layers, and the properties below give every family's expert sizes one set of names."""

    num_experts_per_tok: int = _size("num_experts_per_tok")

    @property
    def n_routed_experts(self) -> int:
        raise NotImplementedError

    @property
    def expert_width(self) -> int:
        """Intermediate size of each routed expert."""
        raise NotImplementedError

    @property
    def shared_expert_width(self) -> int:
        """Intermediate size of the shared expert (0: none)."""
        return 0

    @property
    def shared_expert_gate(self) -> bool:
        """A sigmoid gate (a GEMM to one value per token) scales the shared expert (Qwen2-MoE)."""
        return False

    @model_validator(mode="after")
    def _topk_fits(self) -> MoEConfig:
        if self.num_experts_per_tok > self.n_routed_experts:
            raise SpecError(
                f"num_experts_per_tok = {self.num_experts_per_tok} exceeds the "
                f"{self.n_routed_experts} routed experts",
                key="num_experts_per_tok",
                fix="make this key agree with the number of experts",
            )
        return self


class _SparseStep(MoEConfig):
    """Qwen-MoE layer placement: layer i is MoE unless it is in `mlp_only_layers` or
    `(i + 1) % decoder_sparse_step != 0`; the others are dense FFNs of `intermediate_size`."""

    num_experts: int = _size("num_experts")
    moe_intermediate_size: int = _size("moe_intermediate_size")
    decoder_sparse_step: int = _size("decoder_sparse_step", 1)
    mlp_only_layers: list[Annotated[int, Field(strict=True, ge=0)]] = Field(default_factory=list)

    @property
    def n_routed_experts(self) -> int:
        return self.num_experts

    @property
    def expert_width(self) -> int:
        return self.moe_intermediate_size

    @field_validator("mlp_only_layers")
    @classmethod
    def _layers_exist(cls, v: list[int], info: ValidationInfo) -> list[int]:
        n = info.data.get("num_hidden_layers")
        bad = [i for i in v if n is not None and i >= n]
        if bad:
            raise _inconsistent(
                f"mlp_only_layers names layer {bad[0]}, and num_hidden_layers = {n} (layers "
                f"0 to {n - 1 if n else 0})"
            )
        return v

    def layer_kind(self, index: int) -> str:
        sparse = (index + 1) % self.decoder_sparse_step == 0
        return "moe" if sparse and index not in self.mlp_only_layers else "dense"


@family(builders="gqa")
class LlamaConfig(GQAConfig):
    """Llama-3.x: GQA attention with RoPE, SwiGLU FFN; `attention_bias` and `mlp_bias` add
    biases to q, k, v, o and to gate, up, down."""

    model_type: Literal["llama"]
    attention_bias_key: ClassVar[bool] = True
    mlp_bias_key: ClassVar[bool] = True


@family(builders="gqa")
class MistralConfig(GQAConfig):
    """Mistral: Llama's layer with a sliding window of `sliding_window` keys in every layer
    (null: full attention). Defaults are transformers'."""

    model_type: Literal["mistral"]
    num_key_value_heads: int | None = _size("num_key_value_heads", 8)
    sliding_window: int | None = _size("sliding_window", 4096)

    @property
    def attention_window(self) -> int | None:
        return self.sliding_window


@family(builders="gqa")
class Qwen2Config(_QwenWindow):
    """Qwen2 / Qwen2.5: Llama's layer with biases on the q, k and v projections."""

    model_type: Literal["qwen2"]
    fixed_biases: ClassVar[tuple[str, ...]] = ("q_proj", "k_proj", "v_proj")


@family(builders="gqa")
class Qwen3Config(_QwenWindow):
    """Qwen3: Llama's layer with an RMSNorm on each query and key head (QK norm); `head_dim`
    defaults to 128 as in transformers, and `attention_bias` biases q, k, v and o."""

    model_type: Literal["qwen3"]
    qk_norm: ClassVar[bool] = True
    attention_bias_key: ClassVar[bool] = True
    head_dim: int | None = _size("head_dim", 128)


@family(builders="gqa")
class MixtralConfig(MoEConfig):
    """Mixtral: Mistral's attention; every layer's FFN is `num_local_experts` SwiGLU experts of
    `intermediate_size`, `num_experts_per_tok` picked per token by softmax routing, no shared
    expert."""

    model_type: Literal["mixtral"]
    num_key_value_heads: int | None = _size("num_key_value_heads", 8)
    sliding_window: int | None = _size("sliding_window", None)
    num_local_experts: int = _size("num_local_experts")

    @property
    def attention_window(self) -> int | None:
        return self.sliding_window

    @property
    def n_routed_experts(self) -> int:
        return self.num_local_experts

    @property
    def expert_width(self) -> int:
        return self.intermediate_size

    def layer_kind(self, index: int) -> str:
        return "moe"


@family(builders="gqa")
class Qwen2MoeConfig(_QwenWindow, _SparseStep):
    """Qwen1.5-MoE / Qwen2-MoE: Qwen2's attention (q, k, v biases); MoE layers route each token
    to `num_experts_per_tok` of `num_experts` experts (softmax) and add a shared expert of
    `shared_expert_intermediate_size`, scaled by a sigmoid gate."""

    model_type: Literal["qwen2_moe"]
    fixed_biases: ClassVar[tuple[str, ...]] = ("q_proj", "k_proj", "v_proj")
    shared_expert_intermediate_size: int = _size("shared_expert_intermediate_size")

    @property
    def shared_expert_width(self) -> int:
        return self.shared_expert_intermediate_size

    @property
    def shared_expert_gate(self) -> bool:
        return True


@family(builders="gqa")
class Qwen3MoeConfig(_QwenWindow, _SparseStep):
    """Qwen3-MoE: Qwen3's attention (QK norm, `head_dim` default 128); MoE layers route each
    token to `num_experts_per_tok` of `num_experts` experts (softmax), no shared expert."""

    model_type: Literal["qwen3_moe"]
    qk_norm: ClassVar[bool] = True
    attention_bias_key: ClassVar[bool] = True
    head_dim: int | None = _size("head_dim", 128)


ModelSpec = ModelConfig


def _located(exc: SpecError, file: str, doc: Any) -> SpecError:
    """A refusal raised by a config class, with the file and the line of its key."""
    line = line_of(doc, tuple(exc.key.split("."))) if exc.key else None
    return exc.located(file, line)


def load_model_config(path: str | Path) -> ModelConfig:
    """Load a model spec by path or shipped name (`deepseek-r1`), or a Hugging Face
    `config.json` of a registered family."""
    path = resolve_model(path)
    file = str(path)
    doc = read_document(path)
    data = to_plain(doc)
    if not isinstance(data, dict):
        raise SpecError(
            "a model spec must be a mapping of keys", file=file, fix="see models/*.yaml"
        )
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise SpecError(
            f"unknown model family {model_type!r}" if model_type else "missing key",
            file=file,
            key="model_type",
            line=line_of(doc, ("model_type",)),
            fix=f"set model_type to one of the registered families: {', '.join(FAMILIES)}",
        )
    data.setdefault("name", Path(path).stem)
    try:
        return validate(FAMILIES[model_type].config, data, file=file, doc=doc)
    except SpecError as exc:
        raise _located(exc, file, doc) from None
    except SpecErrors as exc:
        raise SpecErrors([_located(e, file, doc) for e in exc.errors]) from None
