"""The schema of a reference table: one YAML file per published table, read strictly.

A reference table holds what one source (a paper, a README) printed: rows of method x model x data
set, with the numbers the source gives and the settings it states. What a source does not state is
"not stated" (a setting left out of a row means the same), never a guess: a benchmark that holds its
runs against published numbers must not mix in numbers nobody published. Figures a source gives in
words as a span ("2x to 3x", "up to 2.56x") are kept as spans, not turned into one number.

The dataclasses below are the schema. Every key of a file is a field; a key that is no field, a
required key left out and a value of the wrong type are each refused with one line naming the file
and the key's path (`rows[3].metrics.fid`), so a hand-edited file fails where it is wrong.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Tuple, Union, get_args, get_origin, get_type_hints

from sjdbench.errors import UserError

NOT_STATED = "not stated"

Value = Union[int, float, str]  # a setting: a number, or text ("not stated", "Alpha-VLLM/Lumina-mGPT-7B-768")

NAME = r"[a-z][a-z0-9_]*"  # sjdbench names: presets, models, data sets
KNOB = r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+"  # a decoder knob as a run stores it: topology.width


@dataclass(frozen=True)
class MetricKind:
    """A number a published table gives, and which way is better."""

    key: str
    header: str
    better: str  # "max" | "min"


METRICS = (
    MetricKind("step_compression", "step compression", "max"),
    MetricKind("latency_speedup", "latency speedup", "max"),
    MetricKind("nfe", "NFE", "min"),
    MetricKind("fid", "FID", "min"),
    MetricKind("clip", "CLIP-Score", "max"),
)
METRIC_KEYS = tuple(kind.key for kind in METRICS)


@dataclass(frozen=True)
class Published:
    """One published figure: a number as printed (`value`), or the span the source states in words
    (`low` to `high`; "up to 2.56x" has only `high`). In a file: a number, or {min: 2, max: 3}."""

    value: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None

    @property
    def is_span(self) -> bool:
        return self.value is None

    def text(self, digits: int = 2) -> str:
        """'2.05', '2.00–3.00', '≤ 2.56', '≥ 2.00'."""
        if self.value is not None:
            return f"{self.value:.{digits}f}"
        if self.low is not None and self.high is not None:
            return f"{self.low:.{digits}f}–{self.high:.{digits}f}"
        if self.high is not None:
            return f"≤ {self.high:.{digits}f}"
        return f"≥ {self.low:.{digits}f}"


@dataclass(frozen=True)
class Source:
    """Where a table's numbers were printed: a paper (its arXiv page) or a file of a repository (url
    of the repository, path inside it, and the commit that was read)."""

    title: str
    url: str
    path: Optional[str] = None
    commit: Optional[str] = None

    def text(self) -> str:
        """e.g. 'SJD-PAC README: https://github.com/KangJialiang/SJD-PAC, README.md at 4fbc099'."""
        where = self.url + (f", {self.path}" if self.path else "") + (f" at {self.commit[:7]}" if self.commit else "")
        return f"{self.title}: {where}"


@dataclass(frozen=True)
class Settings:
    """The settings a source states for a row; every one it does not state is "not stated".

    knobs: decoder settings by the key a run stores them under (`sjdbench report`'s spec.* columns
    without the prefix), e.g. {"topology.width": 4, "topology.depth": 3, "verifier.delta": 5}.
    """

    model_variant: Value = NOT_STATED  # e.g. Alpha-VLLM/Lumina-mGPT-7B-768 (shown, not compared)
    resolution: Value = NOT_STATED  # image side in pixels
    window: Value = NOT_STATED  # W (SJD-PAC: L, the slots verified per forward)
    top_k: Value = NOT_STATED
    cfg: Value = NOT_STATED  # classifier-free guidance scale
    temperature: Value = NOT_STATED
    data_size: Value = NOT_STATED  # prompts (images) the figures are over
    metric_protocol: Value = NOT_STATED  # how FID / CLIP-Score were computed (shown, not compared)
    gpu: Value = NOT_STATED
    knobs: Mapping[str, Value] = field(default_factory=dict, metadata={"keys": KNOB})


SETTING_KEYS = tuple(f.name for f in dataclasses.fields(Settings) if f.name != "knobs")


@dataclass(frozen=True)
class PublishedRow:
    """One row of a published table.

    preset: the sjdbench preset that runs this method (our runs of that preset are put beside the
    row), or null where sjdbench has none. model, data: the sjdbench model and data set names the row
    was measured on (lumina, emu3; coco2017, parti), null where the source names none or several.
    training_free, lossless: as the source says; null where it does not say. where: where in the
    source the figures stand. checked: whether the figures were checked against that place in the
    source when the row was written (false: quoted, but not yet read against the source's table).
    """

    method: str
    preset: Optional[str] = field(metadata={"pattern": NAME})
    model: Optional[str] = field(metadata={"pattern": NAME})
    data: Optional[str] = field(metadata={"pattern": NAME})
    training_free: Optional[bool]
    lossless: Optional[bool]
    metrics: Mapping[str, Published] = field(metadata={"keys": METRIC_KEYS, "nonempty": True})
    where: str
    checked: bool
    settings: Settings = field(default_factory=Settings)
    source: Optional[Source] = None  # None: the table's source
    note: str = ""

    def label(self) -> str:
        """e.g. 'SJD (lumina, coco2017)'; a dash where the source names no single model or data set."""
        return f"{self.method} ({self.model or '–'}, {self.data or '–'})"


@dataclass(frozen=True)
class ReferenceTable:
    """A published table: its rows, the source they were read from, and notes on how to read them.
    `name` is the file's stem and `path` the file (neither is a key in the file)."""

    FROM_FILE = ("name", "path")

    title: str
    summary: str  # one line for `sjdbench list reference`
    source: Source
    rows: Tuple[PublishedRow, ...] = field(metadata={"nonempty": True})
    notes: Tuple[str, ...] = ()
    name: str = ""
    path: Optional[Path] = None

    def source_of(self, row: PublishedRow) -> Source:
        return row.source or self.source


# -- reading a document against the dataclasses ----------------------------------------------------


class _Bad(Exception):
    """A problem at a key path; turned into one UserError line naming the file."""

    def __init__(self, at: str, problem: str) -> None:
        super().__init__(f"{at} {problem}")
        self.at, self.problem = at, problem


def parse_table(doc: Any, path: Path) -> ReferenceTable:
    """A reference table from a YAML document, checked against the schema; one UserError line
    naming the file and the key otherwise."""
    try:
        parsed = _build(ReferenceTable, doc, "")
    except _Bad as bad:
        at = f"key {bad.at}" if bad.at else "the file"
        raise UserError(f"reference file {path}: {at} {bad.problem}") from None
    return dataclasses.replace(parsed, name=path.stem, path=path)


def _build(cls: type, doc: Any, at: str) -> Any:
    if not isinstance(doc, dict):
        raise _Bad(at, f"must be a mapping (keys {', '.join(_keys(cls))}), not {_kind(doc)}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in getattr(cls, "FROM_FILE", ())}
    for key in doc:
        if key not in fields:
            raise _Bad(_join(at, str(key)), f"is not a key here; valid keys: {', '.join(fields)}")
    for name, spec in fields.items():
        required = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        if required and name not in doc:
            raise _Bad(_join(at, name), "is missing (write null where the source does not say)")
    values = {name: _value(doc[name], hints[name], _join(at, name), fields[name].metadata) for name in doc}
    return cls(**values)


def _value(value: Any, hint: Any, at: str, meta: Mapping[str, Any]) -> Any:
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        arms = get_args(hint)
        if value is None and type(None) in arms:
            return None
        for arm in arms:
            if arm is type(None):
                continue
            try:
                return _value(value, arm, at, meta)
            except _Bad:
                if _same_kind(value, arm):
                    raise  # a value of the arm's kind that breaks its rule: that problem, not the type's
        raise _Bad(at, f"must be {_describe(hint)}, not {_kind(value)}")
    if hint is Published:
        return _published(value, at)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, at)  # type: ignore[arg-type]
    if origin in (tuple, Tuple):
        if not isinstance(value, list):
            raise _Bad(at, f"must be a list, not {_kind(value)}")
        if meta.get("nonempty") and not value:
            raise _Bad(at, "is empty")
        inner = get_args(hint)[0]
        return tuple(_value(item, inner, f"{at}[{i}]", {}) for i, item in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise _Bad(at, f"must be a mapping, not {_kind(value)}")
        if meta.get("nonempty") and not value:
            raise _Bad(at, "is empty")
        allowed = meta.get("keys")
        inner = get_args(hint)[1]
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _key_ok(key, allowed):
                valid = f"one of {', '.join(allowed)}" if isinstance(allowed, tuple) else "e.g. topology.width"
                raise _Bad(_join(at, str(key)), f"is not a key here; valid keys: {valid}")
            out[key] = _value(item, inner, _join(at, key), {})
        return out
    return _scalar(value, hint, at, meta)


def _scalar(value: Any, hint: Any, at: str, meta: Mapping[str, Any]) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise _Bad(at, f"must be a finite number, not {value}")
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            pattern = meta.get("pattern")
            if pattern and not re.fullmatch(pattern, value):
                raise _Bad(at, f"must be an sjdbench name (lower case, digits, _), not {value!r}")
            return value
    else:  # a type the schema does not use: a mistake in the schema itself
        raise TypeError(f"reference schema: no reader for {hint!r}")
    raise _Bad(at, f"must be {_describe(hint)}, not {_kind(value)}")


def _published(value: Any, at: str) -> Published:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Published(value=_scalar(value, float, at, {}))
    if isinstance(value, dict) and value and set(value) <= {"min", "max"}:
        low = _scalar(value["min"], float, _join(at, "min"), {}) if "min" in value else None
        high = _scalar(value["max"], float, _join(at, "max"), {}) if "max" in value else None
        if low is not None and high is not None and low > high:
            raise _Bad(at, f"has min {low} above max {high}")
        return Published(low=low, high=high)
    raise _Bad(at, f"must be a number or a span {{min: ..., max: ...}} (either may be left out), not {_kind(value)}")


def _same_kind(value: Any, hint: Any) -> bool:
    if dataclasses.is_dataclass(hint) or hint is Published:
        return isinstance(value, dict)
    if hint is str:
        return isinstance(value, str)
    if hint is float:
        return isinstance(value, float)
    return False


def _key_ok(key: str, allowed: Any) -> bool:
    if allowed is None:
        return True
    if isinstance(allowed, tuple):
        return key in allowed
    return re.fullmatch(allowed, key) is not None


def _join(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in getattr(cls, "FROM_FILE", ())]


def _describe(hint: Any) -> str:
    if get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in get_args(hint))
    return {
        bool: "true or false",
        int: "a whole number",
        float: "a number",
        str: "text",
        type(None): "null",
        Published: "a number or a span {min, max}",
    }.get(hint, "a mapping" if dataclasses.is_dataclass(hint) else str(hint))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (true/false)"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
