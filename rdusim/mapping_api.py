"""An editable mapping: load one, move ops between kernels, reshard, retile, change fields, run
it, and write it back as an ordinary mapping file.

The mapping is kept as the plain data a mapping file holds, so `to_yaml` writes what was edited
and nothing else. Every edit is checked when it is made (kernel and op names, field values) and
leaves the mapping unchanged when it fails. Dependencies between kernels are checked when the
mapping is compiled, since an edit in several steps may pass through an order that does not run.

An edited mapping has no file: its errors are labelled `<name, edited>` and carry no line number,
so they never point at a line of the file it was loaded from. Relative paths in it (`model:`,
`hardware:`, `moe.routing.file`) stay relative to that file.
"""

from __future__ import annotations

import copy as _copy
import fnmatch
import io
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from ruamel.yaml import YAML

from rdusim.errors import SpecError, SpecTypeError
from rdusim.spec.catalog import resolve_mapping, resolve_model, shipped_models, shipped_presets
from rdusim.spec.mapping import (
    KernelSpec,
    MappingSpec,
    ResolvedMapping,
    Sharding,
    Tiling,
    resolve_spec,
    settable_paths,
    snapstream_sizes,
)
from rdusim.spec.overrides import Override, apply_kernel_overrides, set_path
from rdusim.spec.yamlio import did_you_mean, dotted, read_document, to_plain, validate

if TYPE_CHECKING:
    from rdusim.search.mapper import AutoMapping

Finder = Callable[[str, Path | None], Path | None]


def load_mapping(source: Mapping | str | Path | dict[str, Any]) -> Mapping:
    """An editable mapping from a file, a shipped mapping's name or a dict (a `Mapping` is
    copied), checked as `rdusim map` checks it."""
    if isinstance(source, Mapping):
        return source.copy()
    if isinstance(source, dict):
        return Mapping(_plain(source))
    if isinstance(source, str | Path):
        file = resolve_mapping(source)
        doc = read_document(file)
        data = to_plain(doc)
        if not isinstance(data, dict):
            raise SpecError("a mapping must be a set of keys", file=file, fix="see mappings/*.yaml")
        return Mapping(data, file=file, doc=doc)
    raise SpecTypeError(
        f"load_mapping takes a mapping file's path, a shipped mapping's name, a dict or a "
        f"Mapping, not {type(source).__name__}",
        key="source",
        fix="e.g. rdusim.load_mapping('r1_prefill') or rdusim.load_mapping('mine.yaml')",
    )


def text_argument(value: Any, name: str, call: str, *, file: str | None = None) -> str:
    """`value` when it is a string; else a `SpecTypeError` on argument `name` showing `call`,
    an example of calling it right."""
    if isinstance(value, str):
        return value
    raise SpecTypeError(
        f"{name} must be a string, not {type(value).__name__} ({value!r})",
        file=file,
        key=name,
        fix=f"e.g. {call}",
    )


class Mapping:
    """A mapping being edited in Python. Edits return the mapping, so they chain."""

    def __init__(self, data: dict[str, Any], *, file: str | None = None, doc: Any = None) -> None:
        if not isinstance(data, dict):
            raise SpecTypeError(
                f"a mapping is made from a dict of a mapping file's keys, not "
                f"{type(data).__name__}",
                file=file,
                key="data",
                fix="use rdusim.load_mapping(path, name or dict)",
            )
        self._file = file
        self._doc = doc
        # relative paths are taken from the mapping's directory, fixed now in case cwd changes
        self._base = Path(file).resolve().parent if file else None
        self._edited = False
        self._data = data
        name = data.get("name")
        self._spec = validate(
            MappingSpec, data, file=self._file or f"<{name or 'mapping'}>", doc=self._lines()
        )
        self.resolve()

    # --- reading ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The mapping's `name:`, else its file's stem, else "mapping"."""
        return self._spec.name or (Path(self._file).stem if self._file else "mapping")

    @property
    def spec(self) -> MappingSpec:
        """The validated mapping (read-only; edit through the methods)."""
        return self._spec

    @property
    def file(self) -> str | None:
        """The file it was loaded from (None for a dict)."""
        return self._file

    @property
    def edited(self) -> bool:
        """Whether it was changed since it was loaded (its errors then name no file line)."""
        return self._edited

    @property
    def layers(self) -> list[str]:
        """The layer kinds under `kernels:` (none when the auto-mapper chooses the kernels)."""
        return list(self._spec.kernels) if isinstance(self._spec.kernels, dict) else []

    def kernels(self, layer: str) -> list[KernelSpec]:
        """One layer kind's kernels, in execution order."""
        self._texts(layer=layer, call="m.kernels('moe')", optional=False)
        _kernel_list(self._data, layer, self._label())
        kernels = self._spec.kernels
        assert isinstance(kernels, dict)
        return list(kernels[layer])

    def kernel(self, name: str, layer: str | None = None) -> KernelSpec:
        """One kernel by name (`layer` may be left out when one layer kind has that name)."""
        self._texts(name=name, layer=layer, call="m.kernel('MHA', layer='moe')")
        label = self._label()
        layer = self._layer_of(name, layer, label=label)
        return self.kernels(layer)[self._kernel_index(self._data, name, layer, label=label)]

    def ops(self, layer: str) -> list[str]:
        """The op names one layer kind runs, in execution order (what kernels list)."""
        self._texts(layer=layer, call="m.ops('moe')", optional=False)
        rm = self.resolve()
        graphs = _graphs(rm, probe=False)
        if layer not in graphs:
            raise SpecError(
                f"{rm.model.name} has no {layer!r} layers",
                file=self._label(),
                key="layer",
                fix=did_you_mean(layer, graphs) + f"use one of: {', '.join(graphs)}",
            )
        return graphs[layer]

    def resolve(self) -> ResolvedMapping:
        """The spec with its model and hardware loaded and checked: what the compiler takes."""
        return resolve_spec(self._spec, self._label(), self._lines(), self._base)

    def to_dict(self) -> dict[str, Any]:
        """The mapping as plain data that means the same from the current directory: a path
        relative to the mapping's file is rewritten (a shipped name or an absolute path) when
        it would find another file from here."""
        return self._portable(Path.cwd())

    def to_yaml(self, path: str | Path) -> Path:
        """Write an ordinary mapping file that gives the same result; relative paths are
        rewritten when the new file's directory would find another file. Atomic."""
        from rdusim.outputs import output_file, write_outputs

        if not isinstance(path, str | Path):
            raise SpecTypeError(
                f"to_yaml takes a file name, not {type(path).__name__} ({path!r})",
                file=f"<{self.name}>",
                key="path",
                fix="e.g. m.to_yaml('mine.yaml')",
            )
        target = output_file(str(path), "path", "mapping.yaml", usage="m.to_yaml('{path}')")
        write_outputs({target: self.yaml_text(target.resolve().parent)}, {target: "path"})
        return target

    def yaml_text(self, target_dir: Path) -> str:
        """The text of a mapping file in `target_dir` that gives the same result."""
        data = self._portable(target_dir)
        yaml = YAML(typ="rt")
        yaml.default_flow_style = None  # lists of ops and {tp: 16} on one line
        yaml.indent(mapping=2, sequence=4, offset=2)
        yaml.width = 100
        text = io.StringIO()
        yaml.dump(data, text)
        # a wrapped flow list leaves a space at the end of the line; YAML ignores it there
        lines = (line.rstrip() for line in text.getvalue().splitlines())
        return "\n".join(lines) + "\n"

    @classmethod
    def from_spec(cls, spec: MappingSpec, file: str | None = None) -> Mapping:
        """A mapping holding `spec`; relative paths in it are taken from `file`'s directory."""
        if not isinstance(spec, MappingSpec):
            raise SpecTypeError(
                f"from_spec takes a MappingSpec (such as m.spec or run.mapping.spec), not "
                f"{type(spec).__name__}",
                file=file,
                key="spec",
                fix="for a mapping file's keys as a dict, use rdusim.load_mapping(data)",
            )
        if file is not None:
            text_argument(file, "file", "Mapping.from_spec(spec, file='mine.yaml')")
        return cls(_plain(spec), file=file)

    def copy(self) -> Mapping:
        """An independent copy: editing one leaves the other unchanged."""
        new = _copy.copy(self)
        new._data = _copy.deepcopy(self._data)
        return new

    def __repr__(self) -> str:
        state = ", edited" if self._edited else ""
        kernels = self._spec.kernels
        body = (
            ", ".join(f"{kind}: {len(ks)} kernels" for kind, ks in kernels.items())
            if isinstance(kernels, dict)
            else "kernels: auto"
        )
        return f"<Mapping {self.name}{state}: {body}>"

    # --- editing ---------------------------------------------------------------------------

    def set(self, **fields: Any) -> Mapping:
        """Set mapping fields by name or dotted path: `set(seq_len=65536)`,
        `set(**{"snapstream.enabled": False, "kernels.moe.MHA.tiling.kv_block": 16384})`."""
        if not fields:
            return self
        data = _copy.deepcopy(self._data)
        label = self._edit_label()
        for key, value in fields.items():
            _set_field(data, key, _plain(value), label)
        return self._commit(data, resolve=True)

    def move_op(self, op: str, *, to: str, layer: str | None = None) -> Mapping:
        """Move an op (or a pattern as listed) from its kernel to the end of kernel `to`; a
        kernel left with no op is dropped. Its per-op sharding override goes with it."""
        self._texts(
            op=op, to=to, layer=layer, call="m.move_op('attn_residual', to='FFN', layer='moe')"
        )
        label = self._edit_label()
        layer = self._layer_of(to, layer, op, label=label)
        data = _copy.deepcopy(self._data)
        kernels = _kernel_list(data, layer, label)
        dst = kernels[self._kernel_index(data, to, layer, op, label=label)]
        src = self._take_op(kernels, layer, op, f"moving it to kernel {to!r}", label)
        dst["ops"] = [*dst["ops"], op]
        if src is not dst:
            carried = self._carry_override(src, op, layer)
            if carried:  # first, so that it wins over the patterns `dst` has
                dst["overrides"] = {**carried, **dst.get("overrides", {})}
        _drop_empty(kernels)
        return self._commit(data)

    def split_op(self, op: str, *, into: str, layer: str) -> Mapping:
        """Move an op into a new kernel `into`, right after the kernel it leaves, with that
        kernel's sharding and tiling (and the op's own override)."""
        self._texts(
            op=op,
            into=into,
            layer=layer,
            optional=False,  # the new kernel's layer kind must be named
            call="m.split_op('o_proj', into='Out', layer='moe')",
        )
        data = _copy.deepcopy(self._data)
        label = self._edit_label()
        kernels = _kernel_list(data, layer, label)
        if any(k.get("name") == into for k in kernels):
            raise SpecError(
                f"the {layer} layers already have a kernel {into!r} (splitting op {op!r})",
                file=label,
                key=dotted(("kernels", layer, into)),
                fix=f"name the new kernel differently, or use move_op({op!r}, to={into!r})",
            )
        src = self._take_op(kernels, layer, op, f"splitting it into kernel {into!r}", label)
        new: dict[str, Any] = {"name": into, "ops": [op]}
        for key in ("sharding", "tiling"):
            if key in src:
                new[key] = _copy.deepcopy(src[key])
        carried = self._carry_override(src, op, layer)
        if carried:
            new["overrides"] = carried
        kernels.insert(next(i for i, k in enumerate(kernels) if k is src) + 1, new)
        _drop_empty(kernels)
        return self._commit(data)

    def set_sharding(self, kernel: str, *, layer: str | None = None, **sharding: int) -> Mapping:
        """Replace a kernel's sharding: `set_sharding("MHA", layer="moe", tp=16)`."""
        self._texts(kernel=kernel, layer=layer, call="m.set_sharding('MHA', layer='moe', tp=16)")
        label = self._edit_label()
        layer = self._layer_of(kernel, layer, label=label)
        value = _checked(Sharding, sharding, label, ("kernels", layer, kernel, "sharding"))
        return self._edit_kernel(kernel, layer, "sharding", value)

    def set_override(
        self, kernel: str, op: str, *, layer: str | None = None, **sharding: int
    ) -> Mapping:
        """Shard one op (a name or pattern of this kernel's ops) differently from its kernel;
        it takes precedence over the kernel's other overrides."""
        self._texts(
            kernel=kernel, op=op, layer=layer, call="m.set_override('MLA', 'attention', dp=16)"
        )
        label = self._edit_label()
        layer = self._layer_of(kernel, layer, op, label=label)
        data = _copy.deepcopy(self._data)
        i = self._kernel_index(data, kernel, layer, op, label=label)
        k = _kernel_list(data, layer, label)[i]
        names = self._names_in(k, layer)
        if not any(fnmatch.fnmatchcase(n, op) for n in names):
            raise SpecError(
                f"kernel {kernel!r} runs no op {op!r} (its ops: {', '.join(names)})",
                file=label,
                key=dotted(("kernels", layer, kernel, "overrides", op)),
                fix=did_you_mean(op, names) + "override an op of this kernel, or move it first",
            )
        rest = {p: s for p, s in k.get("overrides", {}).items() if p != op}
        where = ("kernels", layer, kernel, "overrides", op)
        k["overrides"] = {op: _checked(Sharding, sharding, label, where), **rest}
        return self._commit(data)

    def set_tiling(self, kernel: str, *, layer: str | None = None, **tiling: int | None) -> Mapping:
        """Set a kernel's tiling fields (`kv_block`, `tile_tokens`); None restores the
        compiler's choice."""
        self._texts(kernel=kernel, layer=layer, call="m.set_tiling('MHA', kv_block=8192)")
        label = self._edit_label()
        layer = self._layer_of(kernel, layer, label=label)
        i = self._kernel_index(self._data, kernel, layer, label=label)
        current = self.kernels(layer)[i].tiling.model_dump(exclude_none=True)
        merged = {k: v for k, v in {**current, **tiling}.items() if v is not None}
        value = _checked(Tiling, merged, label, ("kernels", layer, kernel, "tiling"))
        return self._edit_kernel(kernel, layer, "tiling", value)

    # --- internals -------------------------------------------------------------------------

    def _texts(self, *, call: str, optional: bool = True, **names: str | None) -> None:
        """Refuse a name argument (layer, kernel, op) that is not a string; a `layer` of None
        means "not given" where `optional`."""
        for name, value in names.items():
            if not (value is None and name == "layer" and optional):
                text_argument(value, name, call, file=f"<{self.name}>")

    def _label(self, *, edited: bool | None = None) -> str:
        """The file errors name: the file while the mapping is as loaded, else a label (an
        edit's errors are the edited mapping's, so they never point into the file)."""
        edited = self._edited if edited is None else edited
        if self._file is not None and not edited:
            return self._file
        return f"<{self.name}, edited>" if edited else f"<{self.name}>"

    def _edit_label(self) -> str:
        return self._label(edited=True)

    def _lines(self) -> Any:
        """The parsed file for line numbers, only while they still describe the mapping."""
        return self._doc if self._file is not None and not self._edited else None

    def _commit(self, data: dict[str, Any], *, resolve: bool = False) -> Mapping:
        """Validate `data` as this mapping's new state; on an error nothing changes."""
        label = self._edit_label()
        spec = validate(MappingSpec, data, file=label)
        if resolve:
            resolve_spec(spec, label, None, self._base)
        self._data, self._spec, self._edited = data, spec, True
        return self

    def _edit_kernel(self, kernel: str, layer: str, key: str, value: dict[str, Any]) -> Mapping:
        data = _copy.deepcopy(self._data)
        label = self._edit_label()
        k = _kernel_list(data, layer, label)[self._kernel_index(data, kernel, layer, label=label)]
        if value:
            k[key] = value
        else:
            k.pop(key, None)
        return self._commit(data)

    def _layer_of(
        self, kernel: str, layer: str | None, op: str | None = None, *, label: str
    ) -> str:
        """`layer`, or the one layer kind that has a kernel named `kernel`."""
        if layer is not None:
            return layer
        kernels = self._data.get("kernels")
        if not isinstance(kernels, dict):
            _kernel_list(self._data, "", label)  # raises: the kernels are chosen automatically
        assert isinstance(kernels, dict)
        kinds = [kind for kind, ks in kernels.items() if any(k.get("name") == kernel for k in ks)]
        if len(kinds) == 1:
            return kinds[0]
        if not kinds:
            names = [k["name"] for ks in kernels.values() for k in ks]
            raise _no_kernel(kernel, "any layer kind", names, label, op, ("kernels",))
        raise SpecError(
            f"kernel {kernel!r} is in the {' and '.join(kinds)} layers",
            file=label,
            key="layer",
            fix=f"give layer=, one of: {', '.join(kinds)}",
        )

    def _kernel_index(
        self, data: dict[str, Any], name: str, layer: str, op: str | None = None, *, label: str
    ) -> int:
        kernels = _kernel_list(data, layer, label)
        for i, k in enumerate(kernels):
            if k.get("name") == name:
                return i
        names = [k.get("name", "") for k in kernels]
        raise _no_kernel(name, f"the {layer} layers", names, label, op, ("kernels", layer))

    def _known_ops(self, layer: str) -> list[str]:
        """Every op name a kernel of `layer` may list (SnapStream's too while it is off)."""
        return _graphs(self.resolve(), probe=True).get(layer, [])

    def _names_in(self, kernel: dict[str, Any], layer: str) -> list[str]:
        """The op names a kernel's entries stand for (patterns expanded)."""
        known = self._known_ops(layer)
        names: list[str] = []
        for entry in kernel["ops"]:
            hits = [n for n in known if fnmatch.fnmatchcase(n, entry)]
            names += [n for n in hits or [entry] if n not in names]
        return names

    def _carry_override(self, src: dict[str, Any], op: str, layer: str) -> dict[str, Any]:
        """The per-op override that applied to `op` in `src`, keyed by `op`; one left matching
        none of `src`'s remaining ops is removed from it (the compiler refuses a stray one)."""
        overrides: dict[str, Any] = src.get("overrides", {})
        matching = [p for p in overrides if fnmatch.fnmatchcase(op, p)]
        if not matching:
            return {}
        carried = {op: _copy.deepcopy(overrides[matching[0]])}  # the first match applies
        remaining = self._names_in(src, layer)
        for p in matching:
            if not any(fnmatch.fnmatchcase(n, p) for n in remaining):
                del overrides[p]
        if not overrides:
            src.pop("overrides", None)
        return carried

    def _take_op(
        self, kernels: list[dict[str, Any]], layer: str, op: str, doing: str, label: str
    ) -> dict[str, Any]:
        """Remove `op` (an entry, or one op a pattern stands for) from its kernel among
        `kernels`; returns that kernel."""
        for k in kernels:
            if op in k["ops"]:
                k["ops"] = [e for e in k["ops"] if e != op]
                return k
        known = self._known_ops(layer)
        for k in kernels:
            for j, entry in enumerate(k["ops"]):
                stands_for = [n for n in known if fnmatch.fnmatchcase(n, entry)]
                if op in stands_for:
                    k["ops"][j : j + 1] = [n for n in stands_for if n != op]
                    return k
        listed = [e for k in kernels for e in k["ops"]]
        raise SpecError(
            f"no kernel of the {layer} layers runs op {op!r} ({doing})",
            file=label,
            key=dotted(("kernels", layer)),
            fix=did_you_mean(op, [*known, *listed])
            + "name an op the layer runs (Mapping.ops(layer) lists them)",
        )

    def _portable(self, target_dir: Path) -> dict[str, Any]:
        """The data with relative paths rewritten for a file in `target_dir`."""
        data = _copy.deepcopy(self._data)
        for key, find in ((("model",), _find_model), (("hardware",), _find_hardware)):
            text = data.get(key[0])
            if isinstance(text, str):
                data[key[0]] = _rebased(text, self._base, target_dir, find)
        speculative = data.get("speculative")
        if isinstance(speculative, dict) and isinstance(speculative.get("draft"), str):
            speculative["draft"] = _rebased(
                speculative["draft"], self._base, target_dir, _find_model
            )
        routing = (
            data.get("moe", {}).get("routing", {}) if isinstance(data.get("moe"), dict) else {}
        )
        if isinstance(routing, dict) and isinstance(routing.get("file"), str):
            routing["file"] = _rebased(routing["file"], self._base, target_dir, _find_relative)
        return data


# --- helpers ---------------------------------------------------------------------------------


def _graphs(rm: ResolvedMapping, *, probe: bool) -> dict[str, list[str]]:
    """Op names per layer kind in execution order; `probe` adds SnapStream's prefill ops while
    SnapStream is off (a mapping may list them, as the compiler allows)."""
    from rdusim.ir.model import build_model
    from rdusim.snapstream.config import SnapStreamConfig

    spec = rm.spec
    ss = snapstream_sizes(spec, rm.source.file)
    if ss is None and probe and spec.phase == "prefill":
        ss = SnapStreamConfig(1, 1, 1, 1, 1)
    graphs = build_model(rm.model, spec.phase, ss)
    return {kind: list(g.order()) for kind, g in graphs.layers.items()}


def _kernel_list(data: dict[str, Any], layer: str, label: str) -> list[dict[str, Any]]:
    """The plain kernel entries of one layer kind in `data` (the same list, for editing)."""
    kernels = data.get("kernels", "auto")
    if not isinstance(kernels, dict):
        raise SpecError(
            "this mapping's kernels are chosen by the auto-mapper (kernels: auto)",
            file=label,
            key="kernels",
            fix="give the kernels first, e.g. m.set(kernels={'moe': [{'name': ..., 'ops': "
            "[...]}]}), or load a mapping that lists them",
        )
    if layer not in kernels:
        raise SpecError(
            f"no {layer!r} layer kind under kernels",
            file=label,
            key="layer",
            fix=did_you_mean(layer, kernels) + f"use one of: {', '.join(kernels)}",
        )
    listed: list[dict[str, Any]] = kernels[layer]
    return listed


def _no_kernel(
    name: str, where: str, names: list[str], label: str, op: str | None, path: tuple[str, ...]
) -> SpecError:
    for_op = f" (for op {op!r})" if op is not None else ""
    return SpecError(
        f"no kernel named {name!r} in {where}{for_op}",
        file=label,
        key=dotted(path),
        fix=did_you_mean(name, names) + f"use one of: {', '.join(dict.fromkeys(names))}",
    )


def _drop_empty(kernels: list[dict[str, Any]]) -> None:
    kernels[:] = [k for k in kernels if k["ops"]]


def _checked(
    model: type[BaseModel], values: dict[str, Any], label: str, where: tuple[str, ...]
) -> dict[str, Any]:
    """`values` validated as `model` (errors keyed `where`), as plain data without unset
    fields."""
    return validate(model, values, file=label, prefix=where).model_dump(exclude_none=True)


def _set_field(data: dict[str, Any], key: str, value: Any, label: str) -> None:
    """Set one dotted field of plain mapping data: a mapping field, or a kernel's field as
    kernels.<layer kind>.<kernel name>.<field>, checked as `--set` checks it."""
    ov = Override(key, key.split("."), value, flag="")
    if ov.parts[0] == "kernels" and len(ov.parts) > 1:
        apply_kernel_overrides(data, [ov], label)
    elif key in settable_paths():
        set_path(data, ov.parts, value, key, label)
    else:
        raise SpecError(
            f"unknown mapping field {key!r}",
            file=label,
            key=key,
            fix=did_you_mean(key, settable_paths())
            + "use a field of the mapping, e.g. seq_len, batch, snapstream.enabled, or "
            "kernels.<layer kind>.<kernel name>.<field> (hardware.* and calibration.* are set "
            "per run: rdusim.run(m, set={...}); a mapping file names its hardware)",
        )


def _plain(value: Any) -> Any:
    """Plain data a mapping file can hold: specs as their set fields, enums as their values."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --- paths for to_yaml -------------------------------------------------------------------------


def _rebased(text: str, base: Path | None, target_dir: Path, find: Finder) -> str:
    """`text` as a file in `target_dir` must write it to name the file it names from `base`:
    unchanged when it still does, else a shipped name or an absolute path."""
    if Path(text).is_absolute():
        return text
    here = find(text, base)
    if here is None or find(text, target_dir) == here:
        return text
    shipped = {p.resolve(): name for name, p in shipped_models().items()}
    shipped |= {p.resolve(): name for name, p in shipped_presets().items()}
    name = shipped.get(here)
    if name is not None and find(name, target_dir) == here:
        return name
    return str(here)


def _find_model(text: str, base: Path | None) -> Path | None:
    try:
        return Path(resolve_model(text, base)).resolve()
    except SpecError:
        return None


def _find_hardware(text: str, base: Path | None) -> Path | None:
    preset = shipped_presets().get(text)
    if preset is not None:
        return preset.resolve()
    path = Path(text)
    found = next((c for c in (base / path if base else path, path) if c.is_file()), None)
    return found.resolve() if found else None


def _find_relative(text: str, base: Path | None) -> Path | None:
    path = (base or Path(".")) / text
    return path.resolve() if path.is_file() else None


def auto_mapping_text(auto: AutoMapping, target: Path) -> str:
    """A mapping file for `target` that reproduces the search's result when run, headed by a
    comment saying what was searched for and why each kernel boundary is where it is."""
    rm = auto.mapping
    m = Mapping.from_spec(rm.spec, file=rm.source.file)
    lines = [
        f"# Chosen by rdusim's auto-mapper for objective {auto.objective.value} at batch "
        f"{auto.batch}"
        + (", kernel looping" if auto.chosen.looped else "")
        + f" ({auto.candidates_built} candidate kernels, {auto.candidates_simulated} mappings "
        "simulated).",
    ]
    for kind, plan in auto.chosen.plans.items():
        lines.append(f"# {kind} layers: {plan.label}.")
        for b in auto.boundaries.get(kind, []):
            lines.append(f"#   {b.after} | {b.before}: {b.reason.value} ({b.detail})")
    return "\n".join(lines) + "\n" + m.yaml_text(target.resolve().parent)
