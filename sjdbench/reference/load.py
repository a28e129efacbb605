"""The shipped reference tables (the YAML files beside this module) and user files of the same
schema: find one by name or path, read it strictly, list them, and hand one over as a frame.

Torch-free and free of the config tree, so `sjdbench list reference` stays instant and any layer
above the results store can read a table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from sjdbench.errors import UserError
from sjdbench.reference.schema import (
    METRICS,
    NOT_STATED,
    SETTING_KEYS,
    Published,
    ReferenceTable,
    Settings,
    parse_table,
)

if TYPE_CHECKING:
    import pandas as pd

SHIPPED = Path(__file__).resolve().parent


def reference_names() -> list[str]:
    """The shipped tables, by name (the file stems)."""
    return sorted(p.stem for p in SHIPPED.glob("*.yaml"))


def reference_path(name: str) -> Path:
    """A shipped table's file, or `name` itself when it is the path of a YAML file; one line listing
    the valid names otherwise."""
    if name in reference_names():
        return SHIPPED / f"{name}.yaml"
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml"):
        if path.is_file():
            return path
        raise UserError(f"reference file {path} does not exist; give a shipped name ({', '.join(reference_names())})")
    raise UserError(
        f"unknown reference '{name}'; choose one of: {', '.join(reference_names())} (or the path of a reference "
        "YAML file; `sjdbench list reference` describes them)"
    )


def load_reference(name: str) -> ReferenceTable:
    """A reference table by name (`sjdbench list reference`) or path, checked against the schema."""
    path = reference_path(name)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"reference file {path} is not UTF-8 text") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or "not YAML"
        raise UserError(f"reference file {path} is not valid YAML{where}: {problem}") from None
    except OSError as error:
        raise UserError(f"reference file {path} cannot be read: {error.strerror or error}") from None
    return parse_table(doc, path)


def describe(table: ReferenceTable) -> str:
    """One line: name, what it holds, and where from."""
    rows = f"{len(table.rows)} row{'s' if len(table.rows) != 1 else ''}"
    return f"{table.name}: {table.summary} ({rows}; {table.source.url})"


def _setting(value: object) -> object:
    return None if value == NOT_STATED else value


def published_frame(table: ReferenceTable) -> pd.DataFrame:
    """One row per published row: what it is (method, preset, model, data, training_free, lossless),
    each figure (a number; a span as <metric>_min / <metric>_max), the stated settings (None where
    not stated; knobs as knob.<key>) and where it comes from."""
    import pandas as pd

    records = []
    for row in table.rows:
        record: dict[str, object] = {
            "reference": table.name,
            "method": row.method,
            "preset": row.preset,
            "model": row.model,
            "data": row.data,
            "training_free": row.training_free,
            "lossless": row.lossless,
        }
        for kind in METRICS:
            figure: Published | None = row.metrics.get(kind.key)
            record[kind.key] = figure.value if figure else None
            record[f"{kind.key}_min"] = figure.low if figure else None
            record[f"{kind.key}_max"] = figure.high if figure else None
        settings: Settings = row.settings
        for key in SETTING_KEYS:
            record[key] = _setting(getattr(settings, key))
        for knob, value in settings.knobs.items():
            record[f"knob.{knob}"] = _setting(value)
        source = table.source_of(row)
        record.update(
            source=source.text(),
            source_url=source.url,
            where=row.where,
            checked=row.checked,
            note=row.note or None,
        )
        records.append(record)
    return pd.DataFrame.from_records(records)
