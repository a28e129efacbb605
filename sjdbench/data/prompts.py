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


MAX_PROMPT_CHARS = 10_000  # a longer "prompt" is a file of another kind (minified JSON, a binary read as text)


def _read_text(path: Path) -> str:
    """The file as UTF-8 text (a byte-order mark is dropped); one clear line when it is not."""
    if path.is_dir():
        raise UserError(f"prompt file {path} is a folder; pass data.path=<file.txt|.tsv|.csv>")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read prompt file {path}: {error.strerror}") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UserError(f"prompt file {path} is UTF-16 text; re-save it as UTF-8, e.g. iconv -f utf-16 -t utf-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise UserError(
            f"prompt file {path} is not UTF-8 text (byte 0x{raw[error.start]:02x} on line {line}); "
            "re-save it as UTF-8, e.g. iconv -f latin1 -t utf-8"
        ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise UserError(f"prompt file {path} holds a NUL byte on line {line}: it is not a text file of prompts")
    return text


def too_long(text: str) -> str | None:
    """Why a prompt is too long to be one (None: it is not): the one length limit of prompts, from a
    file or from the Python API."""
    if len(text) <= MAX_PROMPT_CHARS:
        return None
    return f"{len(text):,} characters (over {MAX_PROMPT_CHARS:,}, the most a prompt may have)"


def check_prompt(text: Any, where: str = "prompt") -> str:
    """A prompt given one by one (`sjdbench.decode`): text, not empty, not too long; returns it."""
    if not isinstance(text, str):
        raise UserError(f"{where} must be text (a str), got {type(text).__name__} {str(text)[:40]!r}")
    if not text.strip():
        raise UserError(f"{where} is empty; give the caption of the image to draw, e.g. 'a red circle'")
    long = too_long(text)
    if long:
        raise UserError(f"{where} has {long}; shorten it")
    return text


def _check_lengths(path: Path, texts: list[tuple[int, str]]) -> None:
    for number, text in texts:
        long = too_long(text)
        if long:
            raise UserError(
                f"{path} line {number} holds a prompt of {long}: is this a prompt file? (one prompt per line, or a "
                ".tsv/.csv with a prompt column)"
            )


def _table_rows(path: Path, text: str, column: str) -> list[tuple[int, str]]:
    """(line number, prompt) of a TSV or CSV file's column. No row may have more fields than the
    header (a tab or comma inside a prompt, or a shifted column) or lack the prompt's field (a cut
    line; trailing empty fields may be left out), no prompt may be empty, and no CSV quote may be
    left open (the reader would take the rest of the file as one field): a silently dropped,
    shifted or swallowed row would shift prompt ids. A quoted prompt may span lines."""
    suffix = path.suffix.lower()
    lines = io.StringIO(text, newline="")
    if suffix == ".tsv":
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
        kind, sep = "TSV", "tab-separated"
    else:
        reader = csv.reader(lines)
        kind, sep = "CSV", "comma-separated"
    try:
        header = [h.strip() for h in next(reader, [])]
        lowered = [h.lower() for h in header]
        if column.lower() not in lowered:
            raise UserError(f"{path} has no column '{column}'; columns are: {', '.join(header)} (set data.column)")
        if lowered.count(column.lower()) > 1:
            raise UserError(f"{path} has {lowered.count(column.lower())} columns named '{column}'; rename all but one")
        index = lowered.index(column.lower())
        out = []
        physical, last_line = text.splitlines(), reader.line_num
        for row in reader:
            number, first = reader.line_num, last_line + 1
            last_line = number
            if number > first and "".join(physical[first - 1 : number]).count('"') % 2:
                raise UserError(
                    f"{path} line {first} opens a quote that is never closed, so its prompt would swallow every "
                    "field and line after it; close the quote on that line"
                )
            if not any(cell.strip() for cell in row):
                continue  # a blank line
            if len(row) > len(header) or len(row) <= index:
                more = len(row) > len(header)
                why = (
                    "a separator inside a prompt, or a shifted row" if more else f"no {header[index]} field: a cut row"
                )
                raise UserError(
                    f"{path} line {number} has {len(row)} {sep} fields but the header has {len(header)} ({why}); "
                    f"fix that row{' (quote the prompt)' if kind == 'CSV' and more else ''}"
                )
            if not row[index].strip():
                raise UserError(f"{path} line {number} has an empty '{header[index]}'; fill it in or delete the row")
            out.append((number, row[index].strip()))
    except csv.Error as error:
        raise UserError(f"{path} is not valid {kind} (line {reader.line_num}: {error})") from None
    if not out:
        raise UserError(f"{path} has a header ({', '.join(header)}) but no prompt rows")
    return out


def read_prompt_file(path: Path, column: str = "prompt") -> list[str]:
    """Plain text: one prompt per line (blank lines skipped). TSV/CSV: the named column
    (case-insensitive), quoting off for TSV so Parti's literal quotes survive. UTF-8 only (with or
    without a byte-order mark; CRLF line ends are fine)."""
    if not path.exists():
        raise UserError(f"prompt file {path} does not exist; pass data.path=<existing file>")
    text = _read_text(path)
    if path.suffix.lower() in (".tsv", ".csv"):
        texts = _table_rows(path, text, column)
    else:
        texts = [(n, t.strip()) for n, t in enumerate(text.splitlines(), 1) if t.strip()]
    if not texts:
        raise UserError(f"{path} contains no prompts")
    _check_lengths(path, texts)
    return [t for _, t in texts]


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


DEFAULT_COLUMN = "prompt"  # data.column's default (DataConfig); matched case-insensitively


CAPTION_SETS = ("coco2017",)  # the sets whose prompts data.caption chooses among (several captions per image)


def check_unread_keys(data) -> None:
    """Keys of the data group that only some prompt sets read, given for a set that would ignore
    them: refused rather than doing nothing. `data.caption` chooses among COCO's captions of an
    image; `data.column` names a column of a .tsv/.csv file, and for a set read another way (one
    prompt per line, or a public set whose format is its own) another value would do nothing."""
    from sjdbench.data.sets import SETS

    if data.caption is not None and data.name not in CAPTION_SETS:
        raise UserError(
            f"data.caption={data.caption} does nothing: data={data.name} has one caption per prompt (data.caption "
            f"chooses among the captions of an image in {', '.join(CAPTION_SETS)}); leave it out"
        )
    if data.column.casefold() == DEFAULT_COLUMN:
        return
    if data.name in SETS:
        source = f"data={data.name} is read in its own format"
    else:
        path = resolve_path(data)
        if path.suffix.lower() in (".tsv", ".csv"):
            return
        source = f"data={data.name} reads {path.name}, one prompt per line"
    raise UserError(
        f"data.column={data.column} does nothing: {source}, without columns; leave data.column out "
        "(it names the prompt column of a .tsv/.csv file)"
    )


def load_prompt_set(data) -> PromptSet:
    """The selection (limit first, then shard), the whole set's hash and size."""
    from sjdbench.data.sets import load_prompt_set as load_named_set

    check_unread_keys(data)
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
