"""The models a serving run serves, and the mappings each runs on.

A workload without `models:` serves one model on the `--prefill` and `--decode` mappings. A
workload with `models:` names each model's mappings itself, or names only the model
(`model:`), which then runs on the default mappings: the shipped templates
`rdusim/mappings/templates/gqa_prefill.yaml` and `gqa_decode.yaml` (every decoder layer
tensor-parallel over all sockets, decode attention data-parallel over a batch of 32 sequences,
the Llama-3.1-8B kernels without SnapStream) with

* `model=<the model>`;
* `seq_len` = the smaller of 32768 and the model's `max_position_embeddings`;
* on the prefill mapping, the attention kernel tensor-parallel over the largest power of two
  that divides the heads and the node's sockets when the sockets do not divide the heads (24
  heads on 16 sockets: 8), since a head is not split.

Only dense GQA families have default mappings (model_type llama, mistral, qwen2, qwen3): a model
of another family names its mappings. A model's own `set:` values apply after these (to both
mappings), the command line's `--set` after them, and a model's `decode_batch` last (to the
decode mapping alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rdusim.errors import SpecError
from rdusim.spec.catalog import package_dir, resolve_model, shipped_models
from rdusim.spec.hardware import load_hardware
from rdusim.spec.model import ModelSpec, load_model_config
from rdusim.spec.overrides import apply_hardware_overrides, parse_overrides
from rdusim.spec.workload import ModelClassSpec, ResolvedWorkload

DEFAULT_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
DEFAULT_SEQ_LEN = 32768
DEFAULT_HARDWARE = "sn40l-16"  # the templates' hardware


@dataclass(frozen=True)
class ServedModel:
    """One model of a run: its name, its two mappings and the `--set` values they take
    (`prefill_overrides` on the prefill mapping alone)."""

    name: str
    prefill: str
    decode: str
    overrides: tuple[str, ...] = ()
    prefill_overrides: tuple[str, ...] = ()
    decode_overrides: tuple[str, ...] = ()


def template(phase: str) -> str:
    """The default mapping template of a phase (`prefill` or `decode`)."""
    return str(package_dir("mappings") / "templates" / f"gqa_{phase}.yaml")


def served_models(
    workload: ResolvedWorkload,
    prefill: str | None,
    decode: str | None,
    overrides: Sequence[str] = (),
) -> list[ServedModel]:
    """The models `workload` serves: its `models:`, or the one on `--prefill`/`--decode`
    (`overrides`: the run's `--set`s, which a default mapping's head split must see)."""
    classes = workload.spec.models
    if classes is None:
        if prefill is None or decode is None:
            missing = "--prefill" if prefill is None else "--decode"
            raise SpecError(
                f"no {missing.lstrip('-')} mapping: the workload lists no models: and the "
                f"command gives no {missing}",
                key=missing,
                fix="give --prefill and --decode, or list the models in the workload "
                "(models: [{model: llama-3.1-8b}])",
            )
        return [ServedModel("", prefill, decode)]
    if prefill is not None or decode is not None:
        raise SpecError(
            f"the workload {workload.file} names its models' mappings (models:)",
            key="--prefill" if prefill is not None else "--decode",
            fix="drop --prefill and --decode, or drop models: from the workload",
        )
    return [_served(workload, i, c, overrides) for i, c in enumerate(classes)]


def _served(
    workload: ResolvedWorkload, index: int, spec: ModelClassSpec, overrides: Sequence[str] = ()
) -> ServedModel:
    own = tuple(spec.overrides())
    if spec.model is None:
        assert spec.prefill is not None and spec.decode is not None
        base = Path(workload.file).parent
        return ServedModel(
            spec.label,
            _mapping(spec.prefill, base),
            _mapping(spec.decode, base),
            own,
            decode_overrides=tuple(spec.decode_overrides()),
        )
    key = ("models", index, "model")
    model, where = _model(workload, spec.model, key)
    if model.model_type not in DEFAULT_FAMILIES:
        raise workload.error(
            f"{spec.model} is a {model.model_type} model, and default mappings exist for "
            f"dense GQA models only ({', '.join(DEFAULT_FAMILIES)})",
            key,
            "name its mappings instead: prefill: ... and decode: ...",
        )
    seq_len = min(DEFAULT_SEQ_LEN, model.max_position_embeddings)
    common = (f"model={where}", f"seq_len={seq_len}")
    return ServedModel(
        spec.label,
        template("prefill"),
        template("decode"),
        (*common, *own),
        _head_split(model, (*own, *overrides)),
        tuple(spec.decode_overrides()),
    )


def _mapping(text: str, base: Path) -> str:
    """A mapping named in the workload: relative to the workload file if that file exists,
    else as written (a path from the current directory, or a shipped name)."""
    here = base / text
    return str(here) if not Path(text).is_absolute() and here.is_file() else text


def _model(
    workload: ResolvedWorkload, text: str, key: tuple[str | int, ...]
) -> tuple[ModelSpec, str]:
    """The model a workload names (a path relative to the workload, or a shipped name), and how
    to name it in an override."""
    base = Path(workload.file).parent
    try:
        path = resolve_model(text, base)
    except SpecError as exc:
        raise workload.error(f"model {text!r} not found", key, exc.fix or "") from None
    where = (
        text
        if text in shipped_models() and not (base / text).exists()
        else str(Path(path).resolve())
    )
    return load_model_config(path), where


def _head_split(model: ModelSpec, sets: tuple[str, ...]) -> tuple[str, ...]:
    """The prefill attention kernel's degree when the node's sockets do not divide the heads:
    the sockets of the hardware the default mapping will run on, found as `load_mapping` finds
    it (the last `hardware=` preset, with every `hardware.*` and `calibration.*` set applied)."""
    file = template("prefill")
    parsed = parse_overrides(list(sets), file)
    named = [str(o.value) for o in parsed.mapping if o.key == "hardware"]
    hardware = load_hardware(named[-1] if named else DEFAULT_HARDWARE)
    sockets = apply_hardware_overrides(hardware, parsed.hardware, file).sockets
    heads = model.num_attention_heads
    if heads % sockets == 0:
        return ()
    common = math.gcd(heads, sockets)
    degree = common & -common  # the largest power of two dividing both
    return (f"kernels.dense.MHA.sharding.tp={degree}",)
