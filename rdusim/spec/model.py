"""Typed model specs, written with Hugging Face `config.json` field names.

A user can drop in the `config.json` of another model of a supported family (`deepseek_v3`,
`llama`). rdusim adds one optional section of its own, `dtypes`, because precision decides what
fits in HBM; its defaults are documented on `Dtypes`.

Every size has an upper limit (`LIMITS`), several times the largest published model's, so that no
model file can make a run take unbounded time or memory; an error names the key and its limit.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from rdusim.errors import SpecError
from rdusim.spec.yamlio import line_of, read_document, reject_bools, to_plain, validate

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
    "max_position_embeddings": 16_777_216,
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
}


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
    128x128 block scales; 671B parameters only fit in 16 x 64 GB of HBM in FP8), BF16 for Llama.
    Embedding, LM head, norms and the MoE gate stay in BF16 (`dense_weights`), as in the FP8
    checkpoint.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    weights: Dtype | None = None
    dense_weights: Dtype = "bf16"
    activations: Dtype = "bf16"
    kv_cache: Dtype = "bf16"


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str = ""
    hidden_size: int = _size("hidden_size")
    intermediate_size: int = _size("intermediate_size")
    num_hidden_layers: int = _size("num_hidden_layers")
    num_attention_heads: int = _size("num_attention_heads")
    num_key_value_heads: int | None = _size("num_key_value_heads", None)
    vocab_size: int = _size("vocab_size")
    tie_word_embeddings: bool = False
    max_position_embeddings: int = _size("max_position_embeddings", 131072)
    dtypes: Dtypes = Field(default_factory=Dtypes)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return check_limit(
            info.field_name or "", reject_bools(v, field.annotation if field else None)
        )

    def bytes_of(self, which: str) -> float:
        dt = getattr(self.dtypes, which)
        if dt is None:
            dt = self.default_weight_dtype
        return DTYPE_BYTES[dt]

    @property
    def default_weight_dtype(self) -> str:
        return "bf16"


class DeepSeekV3Config(_Base):
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


class LlamaConfig(_Base):
    """Llama-3.x: GQA attention with RoPE, SwiGLU FFN."""

    model_type: Literal["llama"]
    head_dim: int | None = _size("head_dim", None)

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @field_validator("num_key_value_heads")
    @classmethod
    def _gqa_groups(cls, v: int | None, info: ValidationInfo) -> int | None:
        n = info.data.get("num_attention_heads")
        if v is not None and n is not None and n % v:
            raise _inconsistent(
                f"num_attention_heads = {n} is not a multiple of num_key_value_heads = {v}"
            )
        return v

    def layer_kind(self, index: int) -> str:
        return "dense"


FAMILIES = ("deepseek_v3", "llama")


def load_model_config(path: str | Path) -> DeepSeekV3Config | LlamaConfig:
    """Load `models/*.yaml` or a Hugging Face `config.json` of a supported family."""
    doc = read_document(path)
    data = to_plain(doc)
    if not isinstance(data, dict):
        raise SpecError(
            "a model spec must be a mapping of keys", file=str(path), fix="see models/*.yaml"
        )
    family = data.get("model_type")
    if family not in FAMILIES:
        raise SpecError(
            f"unknown model family {family!r}" if family else "missing key",
            file=str(path),
            key="model_type",
            line=line_of(doc, ("model_type",)),
            fix=f"set model_type to one of: {', '.join(FAMILIES)}",
        )
    data.setdefault("name", Path(path).stem)
    cls: type[DeepSeekV3Config] | type[LlamaConfig] = (
        DeepSeekV3Config if family == "deepseek_v3" else LlamaConfig
    )
    return validate(cls, data, file=str(path), doc=doc)


ModelSpec = DeepSeekV3Config | LlamaConfig
