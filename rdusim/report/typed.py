"""The JSON report of `rdusim map` as typed objects: `Report.model_validate(build_report(...))`.

The models mirror `rdusim.report.schema.build_report` key for key (schema version 2) and forbid
any other key, so a key added to the report without a field here fails loudly instead of being
dropped. Numbers that are whole in one run and fractional in another are typed `int | float`, so
that `to_json()` reproduces the report's text exactly.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import pandas as pd

Num = int | float  # JSON numbers keep the form the report gave them
PANDAS_COLUMNS = (
    "layer",
    "kernel",
    "latency_s",
    "share",
    "call_s",
    "pipeline_s",
    "sram_bytes",
    "bottleneck",
    "sharding",
)


class _Part(BaseModel):
    """A section of the report: read-only, and every key is a field."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class OpTiming(_Part):
    """One op's timing inside its kernel's pipeline (per socket)."""

    op: str
    busy_s: Num
    hbm_s: Num
    ddr_s: Num
    stall_s: Num
    pcus: int
    bound: str


class Collective(_Part):
    """A P2P collective a kernel runs: its kind, the tensor, bytes each socket sends, rounds."""

    kind: str
    tensor: str
    bytes: Num
    rounds: int


class KernelReport(_Part):
    """One fused kernel: its ops, resources, costs and (when simulated) its timing."""

    name: str
    ops: list[str]
    sharding: str
    op_sharding: dict[str, str]
    pcus: int
    pmus: int
    sram_bytes: Num
    collectives: list[Collective]
    flops: Num
    hbm_traffic_bytes: Num
    ddr_traffic_bytes: Num
    latency_s: Num | None
    call_s: Num | None
    pipeline_s: Num | None
    share: Num | None  # fraction of its layer's latency
    bottleneck: str | None
    op_timing: list[OpTiming] | None


class LayerReport(_Part):
    """One layer kind: how many layers run it, one layer's latency and its kernels."""

    count: int
    latency_s: Num | None  # one layer
    total_s: Num | None  # all `count` layers
    calls: int
    looped: bool
    experts_touched: Num | None
    kernels: list[KernelReport]


class ExtraReport(_Part):
    """A part outside the decoder layers (embedding, head, MTP module)."""

    runs: int
    latency_s: Num | None
    total_s: Num | None
    calls: int
    experts_touched: Num | None
    kernels: list[str]


class DecodeUpdateSram(_Part):
    """On-chip bytes of the decode kernel that updates the compressed cache, per socket: as
    compiled (`ring`), and with the naive slices and concatenation (`naive`)."""

    naive: Num
    ring: Num
    naive_indexing: Num
    kernel: str
    sequences_per_socket: int
    ratio: Num


class SnapStreamReport(_Part):
    enabled: bool
    kv_len: int
    decode_update_sram_bytes: DecodeUpdateSram | None = None  # decode with SnapStream only


class HbmBytes(_Part):
    """HBM per socket: what is usable and what the run allocates."""

    capacity: Num
    weights: Num
    kv_cache: Num
    workspace: Num


class DdrBytes(_Part):
    """DDR per socket: its capacity, and the weights and KV cache `placement:` puts there."""

    capacity: Num
    weights: Num
    kv_cache: Num


class PlacementReport(_Part):
    """The tier (`hbm` or `ddr`) of each deployed part's weights and of the KV cache."""

    weights: dict[str, str]
    kv_cache: str


class TrafficBytes(_Part):
    """Bytes moved per socket over the whole run (a prompt, or a decode step)."""

    hbm: Num
    ddr: Num
    p2p: Num


class MtpReport(_Part):
    mode: str
    draft_tokens: int
    verified_tokens: int


class SpeculationReport(_Part):
    """A decode step's drafter (none, mtp or model), its k drafts at acceptance a, the tokens
    accepted per step, the step split into drafting and verifying, and the drafter's own HBM
    per socket (included in `hbm_bytes`)."""

    drafter: str
    draft: str | None
    draft_tokens: int
    acceptance: Num | None
    verified_tokens: int
    tokens_per_step: Num
    draft_step_s: Num | None
    draft_time_s: Num | None
    verify_s: Num | None
    draft_share: Num | None
    draft_weights_bytes: Num
    draft_kv_cache_bytes: Num


class CalibrationEntry(_Part):
    """A calibrated parameter: its value in this run, the shipped posterior's 90% interval and
    the evidence items that pin it most (none: only its prior speaks)."""

    value: Num
    p05: Num | None
    p95: Num | None
    pinned_by: list[str]


class Interval(_Part):
    """The 5th, 50th and 95th percentile of a number over the calibration ensemble."""

    p05: Num
    p50: Num
    p95: Num


class RestsOn(_Part):
    """A calibrated parameter a cost term moves with: its elasticity, posterior 90% interval,
    how much the evidence narrowed its prior (1: not at all) and the items that pin it."""

    parameter: str
    elasticity: Num | None
    p05: Num | None
    p95: Num | None
    narrowing: Num | None
    pinned_by: list[str]


class TermReport(_Part):
    seconds: Num
    share: Num
    rests_on: list[RestsOn]


class DriversReport(_Part):
    """The run's time split by cost term, and its elasticity to each calibrated parameter."""

    terms: dict[str, TermReport]
    elasticity: dict[str, Num]


class UncertaintyReport(_Part):
    members: int
    discrepancy: Num
    method: str
    covers: str


class BoundaryReport(_Part):
    """Why two neighbouring kernels of an auto-mapped layer are not one."""

    after: str
    before: str
    reason: str
    detail: str


class AutoMappingReport(_Part):
    """What the auto-mapper's search chose and weighed."""

    objective: str
    batch: int
    kernel_looping: bool
    sharding_plans: dict[str, str]
    boundaries: dict[str, list[BoundaryReport]]
    estimated_layers_s: Num
    candidate_kernels_built: int
    mappings_simulated: int
    search_seconds: Num | None = None  # wall time: only with `rdusim map --timings`
    ranked_by: str = "mean"  # the finalists' ranking over the ensemble ("point": none shipped)
    # against the mapping's own kernels (with `--set kernels=auto` on a mapping that lists them)
    gain_vs_hand: Interval | None = None
    p_better: Num | None = None
    gain_at_point: Num | None = None
    hand_objective: Num | None = None
    note: str | None = None  # why the hand kernels could not be compared


class ReferenceDifference(_Part):
    key: str
    this: Any
    reference: Any


class ReferenceReport(_Part):
    """How the run differs from the mapping it names as its reference."""

    mapping: str
    differences: list[ReferenceDifference]


class AlternativeReport(_Part):
    """A runner-up mapping: its simulated objective and its kernels, as a mapping lists them."""

    total_latency_s: Num | None = None
    throughput_tokens_per_s: Num | None = None
    kernel_looping: bool
    sharding_plans: dict[str, str]
    kernels: dict[str, list[dict[str, Any]]]


class Report(_Part):
    """What `rdusim map --json` prints, with typed attributes.

    `report.total_latency_s`, `report.layers["moe"].kernels[0].latency_s`, `report.tpot_s`.
    Per-socket figures are per socket; a figure the run could not compute is None.
    """

    schema_version: Literal[2]
    mapping: str
    model: str
    hardware: str
    sockets: int
    phase: Literal["prefill", "decode"]
    batch: int
    seq_len: int
    snapstream: SnapStreamReport
    layers: dict[str, LayerReport]
    extras: dict[str, ExtraReport]
    sram_peak_bytes: Num
    hbm_bytes: HbmBytes
    ddr_bytes: DdrBytes
    placement: PlacementReport
    traffic_bytes: TrafficBytes | None
    total_latency_s: Num | None  # time to first token (prefill) or one step (decode)
    kernel_calls: int
    kernel_call_time_s: Num | None
    orchestration: str
    expert_loading: str
    kernel_looping: bool
    experts_touched: dict[str, Num]
    max_batch_size: int | None
    mtp: MtpReport | None
    tokens_per_step: Num | None
    tpot_s: Num | None
    speculation: SpeculationReport | None
    throughput_tokens_per_s: Num | None
    calibration: dict[str, CalibrationEntry] | None
    intervals: dict[str, Interval] | None = None  # metric -> its interval over the ensemble
    drivers: DriversReport | None = None
    uncertainty: UncertaintyReport | None = None
    reference: ReferenceReport | None = None
    auto_mapping: AutoMappingReport | None = None  # kernels: auto only
    alternatives: list[AlternativeReport] | None = None  # with --alternatives N

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data, key for key the dict it was built from."""
        return self.model_dump(exclude_unset=True)

    def to_json(self) -> str:
        """The same text as `rdusim map --json`."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def kernel_rows(self) -> list[dict[str, Any]]:
        """One row per kernel of every layer kind, with the columns of `to_pandas()`."""
        return [
            {
                "layer": kind,
                "kernel": k.name,
                "latency_s": k.latency_s,
                "share": k.share,
                "call_s": k.call_s,
                "pipeline_s": k.pipeline_s,
                "sram_bytes": k.sram_bytes,
                "bottleneck": k.bottleneck,
                "sharding": k.sharding,
            }
            for kind, layer in self.layers.items()
            for k in layer.kernels
        ]

    def to_pandas(self) -> pd.DataFrame:
        """The kernels as a DataFrame (pandas is optional: `pip install pandas`)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Report.to_pandas needs pandas, which rdusim does not install: "
                "pip install pandas (or use report.kernel_rows(), a list of dicts)"
            ) from None
        return pd.DataFrame(self.kernel_rows(), columns=list(PANDAS_COLUMNS))
