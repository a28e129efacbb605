"""The parts a decoder is built from, their typed interfaces, and the registry that finds them.

A decoder = proposal x verifier x init x topology inside one loop (loop.py):
- `Proposal`: after verification, turns the distributions at the not-yet-committed slots into next
  iteration's drafts and their references q (resample, coupled, vp, reuse).
- `Verifier`: says which drafts pass and what the first rejected slot emits (exact, greedy,
  lantern, gsd).
- `Init`: drafts for slots that were never predicted (random, left, above, argmax_left).
- `Topology`: the shape of the window: which drafts one forward holds, at which positions, who sees
  whom, and which roots emit a token (chain, tree, rows).

A part is one file holding its config dataclass (its knobs, defaults and range checks) and the
class built from it. It is registered by one YAML, `conf/decoder/<kind>/<name>.yaml`, whose
`_target_` names that class and whose keys are the knob defaults users see: the config group is the
registry, and a new part needs no edit anywhere else. Extra config directories (for parts of your
own) come from `SJDBENCH_CONFIG_PATH`.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch
import yaml

from sjdbench.errors import UserError

if TYPE_CHECKING:
    from sjdbench.decoding.inits.neighbours import InitContext
    from sjdbench.decoding.window import DecodeState, Window

KINDS = ("proposal", "verifier", "init", "topology")


@dataclass
class PartConfig:
    """Base of every part's knobs; subclasses add typed fields with defaults."""

    symbols: ClassVar[dict[str, str]] = {}  # short knob names for run labels, e.g. {"delta": "δ"}
    subparts: ClassVar[dict[str, str]] = {}  # knobs that name another part: knob -> kind (VP's inner)

    def check(self) -> None:
        """Raise UserError (message without the key prefix) for values out of range."""

    def unused(self) -> set[str]:
        """Knobs the current settings make irrelevant: they neither enter the run id nor the label."""
        return set()


@dataclass
class NoKnobs(PartConfig):
    """The config of a part without knobs."""


class KnoblessPart:
    """Base for parts without knobs: built from nothing."""

    Config = NoKnobs

    @classmethod
    def build(cls, config: NoKnobs, adapter: Any = None) -> KnoblessPart:
        return cls()


# -- the interfaces the loop depends on -----------------------------------------------------------


@dataclass
class Carried:
    """The drafts the previous iteration left at the slots being re-proposed (S slots)."""

    drafts: torch.Tensor  # (S,) long; meaningless where has_old is False
    refs: torch.Tensor  # (S, V) their references q
    has_old: torch.Tensor  # (S,) bool: the slot had a draft (the last slot of a window never has)


@dataclass
class ProposalContext:
    positions: torch.Tensor  # (S,) segment positions of the slots
    history: Any  # ProbabilityHistory or None (kept when the loop tracks growth or a part reads it)
    growth: torch.Tensor | None  # (S, V) consecutive-growth mask M at these positions, or None
    generator: torch.Generator


@runtime_checkable
class Proposal(Protocol):
    history_depth: int  # iterations of per-position probability history it reads (0: none; VP: H + 1)

    def propose(self, p: torch.Tensor, carried: Carried, ctx: ProposalContext) -> tuple[torch.Tensor, torch.Tensor]:
        """From target distributions p (S, V) at the re-proposed slots: next drafts (S,) and their
        references q (S, V), the distributions they are verified against next iteration."""
        ...


@runtime_checkable
class Verifier(Protocol):
    greedy: bool  # the loop processes distributions at temperature 0 (Jacobi)

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """p, q: (L, V); drafts, u: (L,) -> (L,) bool: which drafts pass (the loop takes the prefix)."""
        ...

    def replacement(self, p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        """(V,) distribution of the token emitted at the first rejected slot."""
        ...


@runtime_checkable
class Init(Protocol):
    """An init may also define `references(drafts, positions, ctx, vocab_size) -> (F, V)`: the
    distributions its drafts were drawn from, used as their reference q (default: one-hot)."""

    def fill(self, positions: list[int], ctx: InitContext, generator: torch.Generator) -> torch.Tensor:
        """Drafts (F,) for never-predicted positions (ascending); their reference q is one-hot unless
        the init states `references`."""
        ...


@runtime_checkable
class Topology(Protocol):
    select: str  # how the accepted path is chosen: "first" (recursive rejection sampling) | "longest"

    def plan(self, state: DecodeState, window: int, init: Init, ctx: InitContext, generator: torch.Generator) -> Window:
        """The slots of the next forward (at most `window`), drafting never-predicted positions with
        the init; the forward's slot i predicts position positions[i] + 1."""
        ...

    def history_rows(self, window: int) -> int:
        """Rows the probability history needs: the most positions one iteration observes."""
        ...

    def siblings(self) -> int:
        """The most children a draft slot can have (1 for chains and rows)."""
        ...


# -- the registry ---------------------------------------------------------------------------------


def config_dirs() -> list[Path]:
    """The built-in config tree, then the directories in SJDBENCH_CONFIG_PATH (os.pathsep-separated)."""
    from sjdbench.paths import config_dirs as dirs

    return dirs()


def part_yaml(kind: str, name: str) -> Path | None:
    for root in reversed(config_dirs()):  # user directories win
        path = root / "decoder" / kind / f"{name}.yaml"
        if path.exists():
            return path
    return None


def part_choices(kind: str) -> list[str]:
    names = set()
    for root in config_dirs():
        names |= {p.stem for p in (root / "decoder" / kind).glob("*.yaml")}
    return sorted(names)


def _locate(target: str, where: str) -> type:
    module_name, _, attr = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as error:
        raise UserError(f"{where}: cannot import _target_ '{target}' ({error})") from None


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, float):
        text = f"{value:g}"
        return text[1:] if text.startswith("0.") else ("-" + text[2:] if text.startswith("-0.") else text)
    return str(value)


@dataclass(frozen=True)
class PartSpec:
    """A resolved part: its kind, registered name, class and typed knobs (children: nested parts)."""

    kind: str
    name: str
    target: str
    config: PartConfig
    children: dict[str, PartSpec] = field(default_factory=dict)

    @property
    def cls(self) -> type:
        return _locate(self.target, f"decoder.{self.kind}")

    def knobs(self) -> dict[str, Any]:
        """Knobs the part reads under its current settings (unused ones and subparts left out)."""
        skip = self.config.unused() | set(self.config.subparts)
        return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config) if f.name not in skip}

    def identity(self) -> dict[str, Any]:
        """What run ids hash: the part's name, the knobs it reads, and its nested parts."""
        return {"name": self.name, **self.knobs(), **{k: c.identity() for k, c in self.children.items()}}

    def label_knobs(self, reference: PartSpec | None = None) -> list[str]:
        """'knob=value' for every knob that differs from `reference` (the same part in the preset),
        or from this part's own defaults when there is no such reference."""
        if reference is None or reference.name != self.name:
            reference = default_spec(self.kind, self.name)
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
        """Whether this part, with these knobs (and nested parts), keeps AR's distribution. A part
        states it with a `lossless(config, **nested) -> bool` classmethod; one that does not counts
        as lossy: losslessness is a claim that needs a proof (tests/test_exactness.py)."""
        claim = getattr(self.cls, "lossless", None)
        if claim is None:
            return False
        return bool(claim(self.config, **{k: c.lossless() for k, c in self.children.items()}))

    def build(self, adapter: Any) -> Any:
        """The part object; nested parts are built first and passed by knob name."""
        children = {k: c.build(adapter) for k, c in self.children.items()}
        return self.cls.build(self.config, adapter, **children)


def default_spec(kind: str, name: str) -> PartSpec:
    return resolve_part(kind, {"name": name}, f"decoder.{kind}")


def resolve_part(kind: str, raw: Any, where: str) -> PartSpec:
    """A part from its config: a name, or a dict with `name` (and optionally `_target_`) plus knobs.

    The part's YAML supplies `_target_` and default knobs; the given keys win. Unknown knobs, bad
    types and out-of-range values fail here, with one line naming the key, before any model loads.
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
    defaults = yaml.safe_load(path.read_text()) if path is not None else {}
    merged = {**(defaults or {}), **raw}
    target = merged.pop("_target_", None)
    merged.pop("name", None)
    if not target:
        raise UserError(f"{where} '{name}': its YAML ({path}) has no _target_ naming the part's class")
    cls = _locate(target, f"{where} '{name}'")
    config_cls = getattr(cls, "Config", None)
    if config_cls is None or not issubclass(config_cls, PartConfig):
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
    config = _typed(config_cls, merged, where)
    try:
        config.check()
    except UserError as error:  # checks name the knob ("delta must be >= 0"); add where it lives
        raise UserError(f"{where}.{error}") from None
    return PartSpec(kind, str(name), target, config, children)


def _typed(config_cls: type, values: dict, where: str) -> PartConfig:
    """Coerce values to the dataclass's types through OmegaConf (so "32" for an int fails clearly)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(config_cls), values)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        key = getattr(error, "key", None)
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{where}{f'.{key}' if key else ''}: {first}") from None
