"""`--set key=value`: where each dotted path lands.

Three kinds of path reach three places, so that every knob a user may want to turn is one `--set`
away:

* a field of the mapping (`seq_len`, `snapstream.enabled`, `mtp.draft_tokens`, `hardware`);
* a field of one kernel, by layer kind and kernel name: `kernels.moe.MHA.tiling.kv_block=16384`,
  `kernels.moe.MHA.sharding.tp=8`, `kernels.moe.MLA.overrides.attention.dp=16`,
  `"kernels.dense.Output Proj + FFN.ops=[o_proj, ...]"` (quote names with spaces);
* a field of the hardware the mapping names: `hardware.links.p2p_bandwidth=200e9`,
  `hardware.node.sockets=8`, and `calibration.gemm_efficiency=0.5` for
  `hardware.calibration.gemm_efficiency`.

Every path is checked; an unknown one is an error with the nearest valid path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from rdusim.errors import SpecError
from rdusim.spec.yamlio import did_you_mean, field_paths, parse_value

KERNEL_FIELDS = ("name", "ops", "sharding", "overrides", "tiling")


@dataclass
class Override:
    """One `--set`: the path as written, its parts, and the parsed value."""

    key: str
    parts: list[str]
    value: Any
    flag: str = "--set"  # how the user wrote it, for error keys; "" from the Python API

    @property
    def where(self) -> str:
        return f"{self.flag} {self.key}" if self.flag else self.key


@dataclass
class Overrides:
    mapping: list[Override] = field(default_factory=list)
    kernels: list[Override] = field(default_factory=list)
    hardware: list[Override] = field(default_factory=list)


def parse_overrides(items: list[str], file: str) -> Overrides:
    """Sort `--set` items by where they land."""
    out = Overrides()
    for item in items:
        if "=" not in item:
            raise SpecError(
                f"--set expects key=value, got {item!r}",
                file=file,
                key="--set",
                fix="write e.g. --set seq_len=65536",
            )
        key, value = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        ov = Override(key, parts, parse_value(value))
        if parts[0] == "calibration" and len(parts) > 1:
            ov.parts = ["calibration", *parts[1:]]
            out.hardware.append(ov)
        elif parts[0] == "hardware" and len(parts) > 1:
            ov.parts = parts[1:]
            out.hardware.append(ov)
        elif parts[0] == "kernels" and len(parts) > 1:
            out.kernels.append(ov)
        else:
            out.mapping.append(ov)
    return out


def set_path(node: dict[str, Any], parts: list[str], value: Any, where: str, file: str) -> None:
    """Set `value` at the dotted `parts` inside plain spec data, making sections as needed."""
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise SpecError(f"{p} is not a section", file=file, key=where, fix="check the path")
    node[parts[-1]] = value


def apply_kernel_overrides(data: dict[str, Any], overrides: list[Override], file: str) -> None:
    """Set fields of named kernels in the mapping's plain data."""
    for ov in overrides:
        where = ov.where
        kernels = data.get("kernels")
        if not isinstance(kernels, dict):
            raise SpecError(
                "this mapping's kernels are chosen by the auto-mapper; there is no kernel to set",
                file=file,
                key=where,
                fix="list the kernels first (a kernels: section in a copy of the mapping, or "
                "Mapping.set(kernels={...}) from Python), then set their fields",
            )
        if len(ov.parts) < 4:
            raise SpecError(
                f"{ov.key!r} names no kernel field",
                file=file,
                key=where,
                fix="write kernels.<layer kind>.<kernel name>.<field>, e.g. "
                "kernels.moe.MHA.tiling.kv_block=16384",
            )
        kind, name, fields = ov.parts[1], ov.parts[2], ov.parts[3:]
        if kind not in kernels:
            raise SpecError(
                f"no {kind!r} layer kind under kernels:",
                file=file,
                key=where,
                fix=did_you_mean(kind, list(kernels)) + "use one of: " + ", ".join(kernels),
            )
        names = [k.get("name") for k in kernels[kind] if isinstance(k, dict)]
        if name not in names:
            raise SpecError(
                f"no kernel named {name!r} in the {kind} layers",
                file=file,
                key=where,
                fix=did_you_mean(name, [n for n in names if n])
                + "use one of: "
                + ", ".join(str(n) for n in names),
            )
        if fields[0] not in KERNEL_FIELDS:
            raise SpecError(
                f"a kernel has no field {fields[0]!r}",
                file=file,
                key=where,
                fix=did_you_mean(fields[0], KERNEL_FIELDS)
                + "use one of: "
                + ", ".join(KERNEL_FIELDS),
            )
        kernel = kernels[kind][names.index(name)]
        set_path(kernel, fields, ov.value, where, file)


def apply_hardware_overrides(hw: BaseModel, overrides: list[Override], file: str) -> Any:
    """A copy of the hardware spec `hw` with its fields set, validated like a hardware file."""
    if not overrides:
        return hw
    kind = type(hw)
    data = hw.model_dump()
    valid = field_paths(kind)
    for ov in overrides:
        path = ".".join(ov.parts)
        if path not in valid:
            raise SpecError(
                f"the hardware has no field {path!r}",
                file=file,
                key=ov.where,
                fix=did_you_mean(path, valid)
                + "use a hardware field, e.g. hardware.links.p2p_bandwidth, hardware.node.sockets, "
                "calibration.gemm_efficiency",
            )
        set_path(data, ov.parts, ov.value, ov.where, file)
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        culprit = next(
            (ov.where for ov in overrides if ".".join(ov.parts) == loc), "--set hardware"
        )
        raise SpecError(
            f"{first['msg']} (hardware.{loc})",
            file=file,
            key=culprit,
            fix="give a value the hardware spec accepts (see the preset's comments)",
        ) from None
