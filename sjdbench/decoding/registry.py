"""The registry of decoder parts: from a config (a name plus knobs) to a typed, checked `ResolvedPart`,
and from a spec to a built part.

A part is one file holding its config dataclass (its knobs: name, type, default and range check,
written once) and the class built from it. It is registered by one YAML,
`conf/decoder/<kind>/<name>.yaml`, whose `_target_` names that class and whose keys are the knob
defaults users see (tests/test_config.py checks that they agree with the dataclass): the config group
is the registry (the convention models and evaluators share: sjdbench.plugins), and a new part needs
no edit anywhere else. Extra config directories (for parts of your own) come from `SJDBENCH_CONFIG_PATH`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sjdbench import plugins
from sjdbench.decoding.parts import KINDS, Part, PartConfig
from sjdbench.errors import UserError, type_error_text

__all__ = ["KINDS", "ResolvedPart", "default_part", "part_choices", "part_yaml", "resolve_part"]


def part_yaml(kind: str, name: str) -> Path | None:
    return plugins.yaml_path(f"decoder/{kind}", name)


def part_choices(kind: str) -> list[str]:
    return plugins.names(f"decoder/{kind}")


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
