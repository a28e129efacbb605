"""Prompt sets: our own shipped sets (`prompts/<name>.txt`) and user files (txt, tsv, csv).

A prompt's id is its index in the full set, so ids stay stable under `data.limit` and `data.shard`,
and a run can be resumed or merged by prompt id.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from sjdbench.errors import UserError
from sjdbench.paths import prompts_dir


@dataclass(frozen=True)
class Prompt:
    prompt_id: int
    text: str
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)  # e.g. Parti's category


def shipped_sets() -> list[str]:
    return sorted(p.stem for p in prompts_dir().glob("*.txt"))


def _read_text(path: Path) -> str:
    """The file as UTF-8 text (a byte-order mark is dropped); one clear line when it is not."""
    if path.is_dir():
        raise UserError(f"prompt file {path} is a folder; pass data.path=<file.txt|.tsv|.csv>")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read prompt file {path}: {error.strerror}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise UserError(
            f"prompt file {path} is not UTF-8 text (byte 0x{raw[error.start]:02x} on line {line}); "
            "re-save it as UTF-8, e.g. iconv -f latin1 -t utf-8"
        ) from None


def read_prompt_file(path: Path, column: str = "prompt") -> list[str]:
    """Plain text: one prompt per line. TSV/CSV: the named column (case-insensitive), quoting off for
    TSV so Parti's literal quotes survive. UTF-8 only (with or without a byte-order mark)."""
    if not path.exists():
        raise UserError(f"prompt file {path} does not exist; pass data.path=<existing file>")
    text = _read_text(path)
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".csv"):
        lines = io.StringIO(text, newline="")
        if suffix == ".tsv":
            reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            reader = csv.reader(lines)
        try:
            header = [h.strip() for h in next(reader, [])]
            lowered = [h.lower() for h in header]
            if column.lower() not in lowered:
                raise UserError(f"{path} has no column '{column}'; columns are: {', '.join(header)} (set data.column)")
            index = lowered.index(column.lower())
            texts = [row[index] for row in reader if len(row) > index]
        except csv.Error as error:
            raise UserError(f"{path} is not valid {suffix[1:].upper()} (line {reader.line_num}: {error})") from None
    else:
        texts = text.splitlines()
    texts = [t.strip() for t in texts if t.strip()]
    if not texts:
        raise UserError(f"{path} contains no prompts")
    return texts


def resolve_path(data) -> Path:
    if data.path and data.path != "???":
        return Path(data.path).expanduser()
    if data.name == "file":
        raise UserError("data=file needs a prompt file: add data.path=<file.txt|.tsv|.csv>")
    path = prompts_dir() / f"{data.name}.txt"
    if not path.exists():
        raise UserError(
            f"no shipped prompt set '{data.name}'; choose one of: {', '.join(shipped_sets())} "
            "or data=file data.path=..."
        )
    return path


@dataclass(frozen=True)
class PromptSet:
    selected: list[Prompt]  # after data.limit and data.shard
    sha: str  # sha256 (16 hex) of the whole set: part of the run id
    size: int  # prompts in the whole set: a run is complete when all of them are done


def load_prompt_set(data) -> PromptSet:
    """The selection (limit first, then shard), the whole set's hash and size."""
    from sjdbench.data.sets import load_prompt_set as load_named_set

    entries = load_named_set(data)  # parti, coco2017, coco2014_30k: verbatim, with metadata
    if entries is None:
        entries = [(t, {}) for t in read_prompt_file(resolve_path(data), data.column)]
    sha = hashlib.sha256("\n".join(t for t, _ in entries).encode()).hexdigest()[:16]
    prompts = [Prompt(i, t, meta) for i, (t, meta) in enumerate(entries)]
    if data.limit is not None:
        prompts = prompts[: data.limit]
    if data.shard:
        i, n = map(int, data.shard.split("/"))
        prompts = prompts[i::n]
    return PromptSet(prompts, sha, len(entries))


def load_prompts(data) -> tuple[list[Prompt], str]:
    """(selected prompts, sha256 of the whole set). Selection: limit first, then shard."""
    prompt_set = load_prompt_set(data)
    return prompt_set.selected, prompt_set.sha
