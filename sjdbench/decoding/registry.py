"""The registry of decoder parts: from a config (a name plus knobs) to a typed, checked `ResolvedPart`,
and from a resolved part to a built part.

A part is one file holding its config dataclass (its knobs: name, type, default, a comment saying
what it does, and its range check, written once) and the class built from it. It is registered by
one YAML, `conf/decoder/<kind>/<name>.yaml`, whose `_target_` names that class (and whose comment
shows how to run it): the config group is the registry (the convention models and evaluators
share: sjdbench.plugins), and a new part needs no edit anywhere else.
Extra config directories (for parts of your own) come from `SJDBENCH_CONFIG_PATH`.

Hydra composes the YAML, so the knobs a command line may set (`decoder.verifier.delta=0.2`) must be
keys of the composed tree. `register_knob_defaults` stores each part's name and knob defaults, read
from its dataclass, in Hydra's ConfigStore (group `decoder_knobs/<kind>`); the root config's
defaults list merges the chosen part's entry under `decoder.<kind>` before the part's YAML and the
preset, so a preset's own settings and the command line's overrides win, and a knob the chosen part
does not have is still refused by name.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sjdbench import plugins
from sjdbench.decoder_identity import PART_KINDS
from sjdbench.decoding.parts import Part, PartConfig
from sjdbench.errors import UserError, type_error_text

__all__ = [
    "ResolvedPart",
    "default_part",
    "part_choices",
    "part_knobs",
    "part_yaml",
    "register_knob_defaults",
    "resolve_part",
]

KNOB_GROUP = "decoder_knobs"  # the ConfigStore group of the parts' knob defaults (conf/config.yaml reads it)


def part_yaml(kind: str, name: str) -> Path | None:
    return plugins.yaml_path(f"decoder/{kind}", name)


def part_choices(kind: str) -> list[str]:
    return plugins.names(f"decoder/{kind}")


def _target(path: Path) -> str | None:
    """The `_target_` a part's YAML names."""
    target = plugins.read_yaml(path).get("_target_")
    return target if isinstance(target, str) else None


def _config_class(kind: str, name: str) -> type[PartConfig] | None:
    """The config dataclass of a registered part; None when its class cannot be imported (resolving
    it says why, in one line)."""
    path = part_yaml(kind, name)
    target = _target(path) if path is not None else None
    if not target:
        return None
    try:
        config_cls = getattr(plugins.locate(target, f"decoder.{kind}"), "Config", None)
    except UserError:
        return None
    return config_cls if isinstance(config_cls, type) and issubclass(config_cls, PartConfig) else None


def part_knobs(kind: str, name: str) -> tuple[str, ...]:
    """The knobs of a registered part: its config dataclass's fields."""
    config_cls = _config_class(kind, name)
    return tuple(f.name for f in dataclasses.fields(config_cls)) if config_cls is not None else ()


def knob_defaults(kind: str, name: str) -> dict[str, Any]:
    """A part's name and the defaults of its knobs, as plain values (what the composed tree holds)."""
    path = part_yaml(kind, name)
    return dict(_knob_defaults(kind, name, str(path), path.stat().st_mtime_ns if path is not None else 0))


@functools.cache
def _knob_defaults(kind: str, name: str, path: str, mtime: int) -> tuple[tuple[str, Any], ...]:
    """knob_defaults, read once per version of the part's YAML (every compose asks)."""
    config_cls = _config_class(kind, name)
    if config_cls is None:
        return (("name", name),)
    defaults = config_cls()  # every knob has a default (a part is built from its config's defaults)
    return (("name", name), *((f.name, getattr(defaults, f.name)) for f in dataclasses.fields(defaults)))


def register_knob_defaults() -> None:
    """Store every registered part's name and knob defaults in Hydra's ConfigStore, as
    `decoder_knobs/<kind>/<name>`: the root config merges the chosen part's under `decoder.<kind>`."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for kind in PART_KINDS:
        for name in part_choices(kind):
            node = knob_defaults(kind, name)
            if _STORED.get((kind, name)) == node:  # every compose asks: store what changed only
                continue
            known = OmegaConf.create(node)
            if _config_class(kind, name) is None:  # a part that cannot be imported: any knob composes, and
                OmegaConf.set_struct(known, False)  # resolving the part then says why it cannot load
            store.store(group=f"{KNOB_GROUP}/{kind}", name=name, node=known)
            _STORED[(kind, name)] = node


_STORED: dict[tuple[str, str], dict[str, Any]] = {}  # what register_knob_defaults stored, by part


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, float):
        text = f"{value:g}"
        return text[1:] if text.startswith("0.") else ("-" + text[2:] if text.startswith("-0.") else text)
    return str(value)


@dataclass(frozen=True)
class ResolvedPart:
    """A resolved part: its kind, registered name, class and typed knobs (children: nested parts)."""

    kind: str
    name: str
    target: str
    config: PartConfig
    children: dict[str, ResolvedPart] = field(default_factory=dict)

    @property
    def cls(self) -> type[Part]:
        """The class `_target_` names (resolve_part checked that it has a `Config`; it builds the part)."""
        return cast(type[Part], plugins.locate(self.target, f"decoder.{self.kind}"))

    def knobs(self) -> dict[str, Any]:
        """Knobs the part reads under its current settings (unused ones and subparts left out)."""
        skip = self.config.unused() | set(self.config.subparts)
        return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config) if f.name not in skip}

    def identity(self) -> dict[str, Any]:
        """What run ids hash: the part's name, the knobs it reads, and its nested parts."""
        return {"name": self.name, **self.knobs(), **{k: c.identity() for k, c in self.children.items()}}

    def label_knobs(self, reference: ResolvedPart | None = None) -> list[str]:
        """'knob=value' for every knob that differs from `reference` (the same part in the preset),
        or from this part's own defaults when there is no such reference."""
        if reference is None or reference.name != self.name:
            reference = default_part(self.kind, self.name)
        theirs = reference.knobs()
        out = [f"{self.config.symbols.get(k, k)}={_fmt(v)}" for k, v in self.knobs().items() if theirs.get(k) != v]
        for key, child in self.children.items():
            ref_child = reference.children.get(key)
            if ref_child is None or ref_child.name != child.name:
                inner = child.label_knobs()
                out.append(f"{key}={child.name}" + (f"({','.join(inner)})" if inner else ""))
            else:
                out.extend(child.label_knobs(ref_child))
        return out

    def lossless(self) -> bool:
        """Whether this part, with these knobs (and nested parts), keeps AR's distribution: the part's
        own claim (`Part.lossless`, lossy unless a part states otherwise: losslessness is a claim
        that needs a proof, tests/test_exactness.py)."""
        claim = getattr(self.cls, "lossless", None)  # a class of someone's own, not derived from Part
        return bool(claim(self.config, **{k: c.lossless() for k, c in self.children.items()})) if claim else False

    def build(self, model: Any) -> Any:
        """The part object, built from its config; nested parts are built first and passed by knob name."""
        children = {k: c.build(model) for k, c in self.children.items()}
        return self.cls.build(self.config, model, **children)


def default_part(kind: str, name: str) -> ResolvedPart:
    return resolve_part(kind, {"name": name}, f"decoder.{kind}")


def resolve_part(kind: str, raw: Any, where: str) -> ResolvedPart:
    """A part from its config: a name, or a dict with `name` (and optionally `_target_`) plus knobs.

    The part's YAML supplies `_target_` and default knobs; the given keys win. Unknown knobs and bad
    types fail here, with one line naming the key; value ranges are checked with every other key's
    (sjdbench.config.schema.check_decoder), before any model loads.
    """
    if isinstance(raw, str):
        raw = {"name": raw}
    raw = dict(raw or {})
    name = raw.get("name")
    choices = part_choices(kind)
    if not name:
        raise UserError(f"{where}: no {kind} chosen; choose one of: {', '.join(choices)}")
    path = part_yaml(kind, str(name))
    if path is None and "_target_" not in raw:
        raise UserError(f"unknown {where} '{name}'; choose one of: {', '.join(choices)}")
    defaults = plugins.read_yaml(path) if path is not None else {}
    merged = {**defaults, **raw}
    target = merged.pop("_target_", None)
    merged.pop("name", None)
    if not target:
        raise UserError(f"{where} '{name}': its YAML ({path}) has no _target_ naming the part's class")
    cls = plugins.locate(target, f"{where} '{name}'")
    config_cls = getattr(cls, "Config", None)
    if not isinstance(config_cls, type) or not issubclass(config_cls, PartConfig):
        raise UserError(f"{where} '{name}': {target} has no Config (a PartConfig dataclass)")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(merged) - set(fields))
    if unknown:
        valid = ", ".join(fields) or "none"
        raise UserError(f"{where}.{unknown[0]}: {kind} '{name}' has no knob '{unknown[0]}' (its knobs: {valid})")
    children = {}
    for knob, child_kind in config_cls.subparts.items():
        if knob in merged:
            children[knob] = resolve_part(child_kind, merged[knob], f"{where}.{knob}")
            merged[knob] = children[knob].name
        else:
            default = fields[knob].default
            children[knob] = resolve_part(child_kind, default, f"{where}.{knob}")
    config = _typed(config_cls, merged, where)  # its ranges: config.schema.check_decoder walks every part's `check`
    return ResolvedPart(kind, str(name), target, config, children)


def _typed(config_cls: type, values: dict, where: str) -> PartConfig:
    """Coerce values to the dataclass's types through OmegaConf (so "32" for an int fails clearly)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(config_cls), values)
        return cast(PartConfig, OmegaConf.to_object(merged))  # a structured dataclass converts to one
    except UserError as error:  # a config that folds an old spelling of a knob as it is made
        raise UserError(f"{where}.{error}") from None
    except OmegaConfBaseException as error:
        key = getattr(error, "key", None)
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        typed = type_error_text(f"{where}.{key}", first) if key else None
        raise UserError(typed or f"{where}{f'.{key}' if key else ''}: {first}") from None
