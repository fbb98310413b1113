"""Small models for the search's fast tests (their fixtures are in `conftest.py`): a Llama of
hidden size 256 whose layer has 15 ops (a whole search of it takes about a second), variants
that make one of the search's paths run, and a DeepSeek-V3 of the same size with a dense and an
MoE layer kind.

`load_tiny(folder, phase, *overrides, model=...)` (the `tiny` fixture) loads the tiny mapping of
a phase (`prefill` at seq_len 1024, `decode` at batch 4 over a 1024-token cache, both on sn40l-8
without SnapStream, `kernels: auto`) with `--set` overrides. `small_sram(pmu_bytes)` shrinks a
socket's SRAM to 1040 PMUs of that size.
"""

from __future__ import annotations

from pathlib import Path

from rdusim.compiler.compile import compile_context, layer_workload
from rdusim.ir.graph import Phase
from rdusim.ir.model import build_model
from rdusim.search.costing import analytic_cost
from rdusim.search.layer import LayerSearch
from rdusim.spec.mapping import ResolvedMapping, load_mapping, snapstream_sizes

DTYPES = "dtypes:\n  weights: bf16\n  activations: bf16\n  kv_cache: bf16\n"

LLAMA = """\
name: {name}
model_type: llama
hidden_size: 256
intermediate_size: 512
num_hidden_layers: {layers}
num_attention_heads: {heads}
num_key_value_heads: {kv_heads}
head_dim: {head_dim}
vocab_size: 1024
max_position_embeddings: 32768
tie_word_embeddings: false
"""

DEEPSEEK = """\
name: tiny-ds
model_type: deepseek_v3
hidden_size: 256
intermediate_size: 512
moe_intermediate_size: 64
num_hidden_layers: 3
first_k_dense_replace: 1
moe_layer_freq: 1
num_attention_heads: 16
num_key_value_heads: 16
n_routed_experts: 16
n_shared_experts: 1
num_experts_per_tok: 2
n_group: 1
topk_group: 1
scoring_func: sigmoid
q_lora_rank: 64
kv_lora_rank: 32
qk_nope_head_dim: 16
qk_rope_head_dim: 16
v_head_dim: 16
vocab_size: 1024
num_nextn_predict_layers: 1
max_position_embeddings: 32768
tie_word_embeddings: false
"""

MODELS = {
    # two decoder layers: kernel looping is an option
    "tiny-llama": LLAMA.format(name="tiny-llama", layers=2, heads=16, kv_heads=8, head_dim=16),
    # one decoder layer: nothing to loop, so the search cuts the layer and explains its cuts
    "tiny-llama-1": LLAMA.format(name="tiny-llama-1", layers=1, heads=16, kv_heads=8, head_dim=16),
    # four heads: tensor parallelism over 8 sockets divides none of the attention ops
    "tiny-llama-4h": LLAMA.format(name="tiny-llama-4h", layers=2, heads=4, kv_heads=2, head_dim=64),
    # one dense layer, two MoE layers and an MTP module
    "tiny-ds": DEEPSEEK,
}

MAPPING = """\
name: tiny_{phase}
model: tiny-llama.yaml
hardware: sn40l-8
phase: {phase}
batch: {batch}
seq_len: 1024
snapstream:
  enabled: false
kernels: auto
"""

# SnapStream with a budget that suits a 1024-token prompt
SNAPSTREAM = (
    "snapstream.enabled=true",
    "snapstream.kv_len=512",
    "snapstream.sink=16",
    "snapstream.obs_window=16",
)


def small_sram(pmu_bytes: int) -> list[str]:
    """Overrides that give each of a socket's 1040 PMUs `pmu_bytes` (and the socket their sum)."""
    return [
        f"hardware.socket.pmu_bytes={pmu_bytes}",
        f"hardware.socket.sram_bytes={pmu_bytes * 1040}",
    ]


def write_tiny(folder: Path) -> Path:
    """The tiny models and mappings, written into `folder`."""
    for name, text in MODELS.items():
        (folder / f"{name}.yaml").write_text(text + DTYPES, encoding="utf-8")
    for phase, batch in (("prefill", 1), ("decode", 4)):
        text = MAPPING.format(phase=phase, batch=batch)
        (folder / f"{phase}.yaml").write_text(text, encoding="utf-8")
    return folder


def load_tiny(
    folder: Path, phase: str, *overrides: str, model: str = "tiny-llama"
) -> ResolvedMapping:
    return load_mapping(folder / f"{phase}.yaml", [f"model={model}.yaml", *overrides])


def layer_search(rm: ResolvedMapping, kind: str = "dense", batch: int | None = None) -> LayerSearch:
    """The search of one layer kind of `rm` at `batch` (default: the mapping's), ranked by the
    closed form."""
    phase = Phase(rm.spec.phase)
    graph = build_model(rm.model, phase, snapstream_sizes(rm.spec, rm.source.file)).layers[kind]
    if batch is None:
        assert isinstance(rm.spec.batch, int)
        batch = rm.spec.batch
    workload = layer_workload(rm, batch)
    return LayerSearch(
        graph, kind, workload, compile_context(rm), analytic_cost, rm.spec.orchestration
    )
