"""Reading the store's files without trusting them: every reader returns what it could read and, when
a file is damaged, one phrase saying how (empty, not UTF-8, not JSON, the wrong shape, a field of the
wrong type, a line that is no sample row), never an exception.

Why a module of its own: run, sweep, eval, report, migrate and the Python API all read the same
files, and a store can be damaged in ways no writer of ours produces (a disk error, a hand edit, a
copy cut short, a file written over). Each command decides what a damaged file means for it (`run`
rewrites what it derives, the readers refuse with one line); what counts as damaged is decided here,
once.

Sample files are JSON lines. A last line without its newline is a *torn tail*: a write killed half-way
(or one still in progress), never a finished sample, so it is skipped and not counted as damage. Any
other line that is not a sample row (not UTF-8, not JSON, not an object, no integer prompt_id, a
count of the wrong type) is damage, reported with its line number.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

# sample-row fields that must be numbers >= 0, or lists of numbers, when present (the runner always writes them)
NUMBER_FIELDS = ("nfe", "n_tokens", "iterations", "accepted", "verified", "latency_s")
STREAM_FIELDS = ("batch_size", "images", "decode_s")  # of a row's `stream`, numbers >= 0 when present
LIST_FIELDS = ("accept_len_hist", "slot_accepted", "slot_verified", "tokens")
# summary.json fields and the types they must have when present
SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "n_samples": (int,),
    "n_wanted": (int,),
    "selection_n": (int,),
    "schema": (int,),
    "window": (int,),
    "seed": (int,),
    "complete": (bool,),
    "finished": (bool,),
    "decoder": (str,),
    "model": (str,),
    "data": (str,),
    "decoder_spec": (dict, type(None)),
}
ENV_TYPES: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    "prompts_sha": (str, type(None)),
    "sampling": (dict, type(None)),
    "device": (str, type(None)),
    "decoder_spec": (dict, type(None)),
}


# a folder where a file of the store belongs: no command of ours deletes a folder it did not make
FOLDER_NOT_FILE = "is a folder, not a file (move it out of the way; the next run writes the file again)"


@dataclass
class Read:
    """A JSON or YAML file as read: `doc` when it is usable, `problem` (a phrase) when it is damaged;
    both None when the file does not exist."""

    doc: dict | None = None
    problem: str | None = None

    @property
    def missing(self) -> bool:
        return self.doc is None and self.problem is None


def _text(path: Path) -> tuple[str | None, str | None]:
    """(text, problem): the file as UTF-8 text, or why it cannot be read as such."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except IsADirectoryError:
        return None, FOLDER_NOT_FILE
    except OSError as error:
        return None, f"cannot be read ({error.strerror or error})"
    if not raw.strip():
        return None, "is empty"
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return None, f"is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}: random bytes?)"


def _typed(doc: dict, types: dict[str, tuple[type, ...]]) -> str | None:
    for key, allowed in types.items():
        if key not in doc:
            continue
        value = doc[key]
        ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        if not ok:
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            return f"has {key} = {json.dumps(value, default=str)[:40]}, not {names}"
    return None


def _json_damage(error: json.JSONDecodeError) -> str:
    return f"is not JSON (truncated or damaged: {error.msg} at line {error.lineno})"


def _yaml_damage(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    return f"is not YAML (truncated or damaged{where})"


# how each format parses, what its parser raises on damage and how that reads, what its mapping is called
_FORMATS: dict[str, tuple[Callable[[str], Any], type[Exception], Callable[[Any], str], str]] = {
    "JSON": (json.loads, json.JSONDecodeError, _json_damage, "an object"),
    "YAML": (yaml.safe_load, yaml.YAMLError, _yaml_damage, "a mapping"),
}


def _read_mapping(path: Path, form: str) -> Read:
    """A file of one of `_FORMATS` that must hold a mapping: the mapping, or the phrase for its damage."""
    parse, damaged, damage, mapping = _FORMATS[form]
    text, problem = _text(Path(path))
    if text is None:
        return Read(None, problem)
    try:
        doc = parse(text)
    except damaged as error:
        return Read(None, damage(error))
    if not isinstance(doc, dict):
        return Read(None, f"holds a {form} {type(doc).__name__}, not {mapping}")
    return Read(doc)


def read_json(path: Path, types: dict[str, tuple[type, ...]] | None = None) -> Read:
    """A JSON object file (summary.json, env.json, store.json, a score file)."""
    read = _read_mapping(path, "JSON")
    problem = None if read.doc is None else _typed(read.doc, types or {})
    return Read(None, problem) if problem else read


def read_yaml(path: Path) -> Read:
    """A YAML mapping file (config.yaml, sweep.yaml)."""
    return _read_mapping(path, "YAML")


def config_problem(doc: dict) -> str | None:
    """What a run's config.yaml must hold for its run to be read: the model and the data set by name."""
    for key in ("model", "data"):
        section = doc.get(key)
        if not isinstance(section, dict) or not isinstance(section.get("name"), str):
            return f"has no {key}.name"
    spp = doc.get("samples_per_prompt", 1)
    if not isinstance(spp, int) or isinstance(spp, bool) or spp < 1:
        return f"has samples_per_prompt = {spp!r}, not a count >= 1"
    return None


def summary_disagreement(summary: dict, env: dict, config: dict) -> str | None:
    """Where summary.json contradicts the files the run was made from (its decoder as env.json
    records it, its model, data, preset and seed as config.yaml records them), as a phrase. Readers
    name and label a run from its summary: one that says another decoder, window or model is damage
    (re-running the run's command rebuilds it), never a label to show. Runs of an older sjdbench
    (no schema in env.json) are not compared."""
    if not summary or "schema" not in env:
        return None
    checks: list[tuple[str, Any, Any, str]] = []
    spec = env.get("decoder_spec")
    if isinstance(spec, dict):
        checks.append(("decoder_spec", summary.get("decoder_spec"), spec, "env.json's decoder_spec"))
        checks.append(("window", summary.get("window"), spec.get("window"), "its decoder (env.json)"))
        growth = spec.get("growth")
        if isinstance(growth, dict):
            checks.append(("growth_steps", summary.get("growth_steps"), growth.get("steps"), "its decoder (env.json)"))
    for key, section in (("model", "model"), ("data", "data"), ("decoder_preset", "decoder")):
        named = config.get(section)
        checks.append((key, summary.get(key), named.get("name") if isinstance(named, dict) else None, "config.yaml"))
    checks.append(("seed", summary.get("seed"), config.get("seed"), "config.yaml"))
    for key, stored, truth, source in checks:
        if stored is not None and truth is not None and stored != truth:
            return (
                f"summary.json says {key} = {json.dumps(stored, default=str)[:40]} but {source} says "
                + json.dumps(truth, default=str)[:40]
            )
    decoder_label = summary.get("decoder")
    preset = (config.get("decoder") or {}).get("name") if isinstance(config.get("decoder"), dict) else None
    bases = {summary.get("decoder_family"), preset, "ar"} - {None, "custom"}
    if isinstance(decoder_label, str) and preset and re.split(r"[(+]", decoder_label)[0] not in bases:
        return f"summary.json labels the run {decoder_label!r}, which is not its decoder ({preset}, per config.yaml)"
    return None


def row_problem(row: Any) -> str | None:
    """Why a parsed JSON line is not a sample row (None: it is one)."""
    if not isinstance(row, dict):
        return f"is a JSON {type(row).__name__}, not a sample row"
    prompt_id = row.get("prompt_id")
    if not isinstance(prompt_id, int) or isinstance(prompt_id, bool) or prompt_id < 0:
        return "has no prompt_id (an integer >= 0)"
    sample = row.get("sample", 0)
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
        return f"has sample = {sample!r}, not an integer >= 0"
    for key in ("prompt", "image"):
        if row.get(key) is not None and not isinstance(row[key], str):
            return f"has {key} = {json.dumps(row[key], default=str)[:40]}, not text"
    for key in NUMBER_FIELDS:
        value = row.get(key)
        if value is not None and not _number(value):
            return f"has {key} = {json.dumps(value, default=str)[:40]}, not a number"
        if value is not None and value < 0:  # counts and seconds: a negative one was never measured
            return f"has {key} = {value}, below 0"
    stream = row.get("stream")
    if stream is not None and not isinstance(stream, dict):
        return "has a stream that is not an object"
    for key in STREAM_FIELDS:
        value = (stream or {}).get(key)
        if value is not None and not (_number(value) and value >= 0):
            return f"has stream.{key} = {json.dumps(value, default=str)[:40]}, not a number >= 0"
    for key in LIST_FIELDS:
        value = row.get(key)
        if value is not None and not (isinstance(value, list) and all(_number(v) for v in value)):
            return f"has {key} that is not a list of numbers"
    trajectories = row.get("trajectories")
    if trajectories is not None and not (
        isinstance(trajectories, list) and all(isinstance(t, dict) and _numbers(t.get("probs")) for t in trajectories)
    ):
        return "has trajectories that are not a list of objects with probs"
    return None


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(_number(v) for v in value)


def trace_problem(row: dict) -> str | None:
    """Why a draft_traces.jsonl row is not one (None: it is)."""
    drafts = row.get("drafts")
    if not isinstance(drafts, list) or not all(
        isinstance(d, dict) and _numbers(d.get("probs")) and isinstance(d.get("accepted"), bool) for d in drafts
    ):
        return "has no list of drafts, each with its probs and whether it was accepted"
    return None


@dataclass
class Rows:
    """The sample rows of one file, the lines that are not sample rows (line number, why), and
    whether its last line is torn (no newline: an interrupted or ongoing write, skipped)."""

    rows: list[dict] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)
    torn_tail: bool = False


def parse_lines(data: bytes) -> Rows:
    """Sample rows of JSON-lines bytes (see the module docstring for what counts as what)."""
    out = Rows()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file ends with a newline: no torn tail
    elif lines:
        out.torn_tail = True
        lines.pop()
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            out.bad.append((number, "is not UTF-8 text"))
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            out.bad.append((number, "is not JSON"))
            continue
        problem = row_problem(row)
        if problem:
            out.bad.append((number, problem))
        else:
            out.rows.append(row)
    return out


def read_rows(path: Path) -> Rows:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return Rows()
    except IsADirectoryError:
        return Rows(bad=[(0, FOLDER_NOT_FILE)])
    except OSError as error:
        return Rows(bad=[(0, f"cannot be read ({error.strerror or error})")])
    return parse_lines(data)


def describe_bad_lines(name: str, bad: list[tuple[int, str]]) -> str:
    """e.g. 'samples.jsonl line 5 is not JSON (and 2 more lines)'."""
    number, why = bad[0]
    where = f"{name} line {number}" if number else name
    more = f" (and {len(bad) - 1} more line{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
    return f"{where} {why}{more}"


def samples_sha(keyed_texts: Iterable[tuple[int, int, str]]) -> str:
    """The hash of a run's samples as scored, (prompt_id, sample, prompt) in prompt-set order: a
    score file records it, so a score is current exactly when its run still holds those samples."""
    text = "".join(f"{p}:{s}:{t}\n" for p, s, t in keyed_texts)
    return hashlib.sha256(text.encode()).hexdigest()
