"""PartiPrompts (P2): 1,632 prompts with a Category (12) and a Challenge (11) each.

Read with quoting off and kept verbatim. Why: default CSV quoting turns `"G I G G L E" painted ...`
into `G I G G L E painted ...`, and ten prompts carry leading or trailing spaces; both change what
the model is asked. Category and Challenge ride along as prompt metadata for per-category tables.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

from sjdbench.data.fetch import RemoteFile, resolve
from sjdbench.errors import UserError

log = logging.getLogger(__name__)
_warned: set[str] = set()  # one warning per file and process (sweeps load the set once per grid point)

COMMIT = (
    "5a657978134374ce28973948331b319adef164bd"  # google-research/parti; the file is unchanged since its first release
)
PARTI = RemoteFile(
    data_name="parti",
    url=f"https://raw.githubusercontent.com/google-research/parti/{COMMIT}/PartiPrompts.tsv",
    sha256="fab29e41bb512a169b56acab4cf2a41dcb675e285df2efcde6640c7dd3c440eb",
    source="google-research/parti (Apache-2.0)",
)
COLUMNS = ("Prompt", "Category", "Challenge", "Note")


def parse(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(prompt, {category, challenge, note}) per row, prompts exactly as in the file."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    except UnicodeDecodeError as error:
        raise UserError(f"{path} is not UTF-8 text (at byte {error.start}); re-save it as UTF-8") from None
    except (OSError, csv.Error) as error:
        raise UserError(f"cannot read {path} as PartiPrompts.tsv: {error}") from None
    if not rows or [h.strip() for h in rows[0]][: len(COLUMNS)] != list(COLUMNS):
        found = ", ".join(rows[0]) if rows else "nothing"
        raise UserError(f"{path} is not PartiPrompts.tsv: expected the columns {', '.join(COLUMNS)}, found {found}")
    entries = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if not 3 <= len(row) <= len(COLUMNS):
            raise UserError(
                f"{path}:{number} has {len(row)} tab-separated fields, expected {len(COLUMNS)} "
                "(Prompt, Category, Challenge, Note); fix that row"
            )
        note = row[3] if len(row) > 3 else ""
        entries.append((row[0], {"category": row[1], "challenge": row[2], "note": note}))
    return entries


def load(data) -> list[tuple[str, dict[str, Any]]]:
    path, pinned = resolve(PARTI, data.path)
    entries = parse(path)
    if not pinned and str(path) not in _warned:
        _warned.add(str(path))
        log.warning(
            "%s differs from the pinned PartiPrompts.tsv (%d prompts); results are not comparable "
            "with runs on the published file",
            path,
            len(entries),
        )
    return entries
