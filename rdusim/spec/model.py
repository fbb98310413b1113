"""Typed model specs, written with Hugging Face `config.json` field names.

A user can drop in the `config.json` of another model of a supported family (`deepseek_v3`,
`llama`). rdusim adds one optional section of its own, `dtypes`, because precision decides what
fits in HBM; its defaults are documented on `Dtypes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from rdusim.errors import SpecError
from rdusim.spec.yamlio import line_of, read_document, to_plain, validate

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


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
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt | None = None
    vocab_size: PositiveInt
    tie_word_embeddings: bool = False
    max_position_embeddings: PositiveInt = 131072
    dtypes: Dtypes = Field(default_factory=Dtypes)

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
    moe_intermediate_size: PositiveInt
    n_routed_experts: PositiveInt
    n_shared_experts: int = Field(ge=0)
    num_experts_per_tok: PositiveInt
    n_group: PositiveInt = 1
    topk_group: PositiveInt = 1
    first_k_dense_replace: int = Field(ge=0)
    moe_layer_freq: PositiveInt = 1
    q_lora_rank: PositiveInt
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt
    num_nextn_predict_layers: int = Field(default=0, ge=0)
    scoring_func: Literal["sigmoid", "softmax"] = "sigmoid"

    @property
    def default_weight_dtype(self) -> str:
        return "fp8"

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @model_validator(mode="after")
    def _check(self) -> DeepSeekV3Config:
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError("num_experts_per_tok exceeds n_routed_experts")
        if self.n_routed_experts % self.n_group:
            raise ValueError("n_routed_experts must be a multiple of n_group")
        if self.topk_group > self.n_group:
            raise ValueError("topk_group exceeds n_group")
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError("first_k_dense_replace exceeds num_hidden_layers")
        return self

    def layer_kind(self, index: int) -> str:
        if index >= self.first_k_dense_replace and index % self.moe_layer_freq == 0:
            return "moe"
        return "dense"


class LlamaConfig(_Base):
    """Llama-3.x: GQA attention with RoPE, SwiGLU FFN."""

    model_type: Literal["llama"]
    head_dim: PositiveInt | None = None

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @model_validator(mode="after")
    def _check(self) -> LlamaConfig:
        if self.num_attention_heads % self.kv_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        return self

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
