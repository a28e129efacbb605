"""Which runs a command works on: one grammar for `sjdbench eval`, `sjdbench report` and the Python
API's `sjdbench.load_runs`, in the override style of the other commands:

    sjdbench report model=toy data=toy decoder=sjd,sjd_vp decoder.window=16,32
    sjdbench report 9cd9ee6291f1                 # the runs of one sweep (or sweep=<id>)
    sjdbench eval results/runs/toy-sjd-d007ce88f04b results_dir=results
    sjdbench eval 'toy-sjd-*' decoder/topology=tree decoder.verifier.delta=0.2 decoder_lossless=true

Words:
- `key=value`: values are comma-separated alternatives and may use shell-style globs
  (decoder='sjd*'); numbers match numerically, true/false and null as written. Keys: model, data,
  seed, device, decoder (a preset, family or full label), window, growth_steps, run_id, sweep,
  decoder/<part> or decoder.<part> (proposal, verifier, init, topology: the part's name),
  decoder.<part>.<knob>, decoder.growth_reading, results_dir (the store), and every other field of
  summary.json (decoder_family=sjd, decoder_lossless=false, n_samples=8, ...). Other keys are refused
  with the list of valid ones.
- a run folder, a sweep folder or a results folder; a sweep id; a run id or a pattern of one.

Filters on the decoder (decoder, window, growth_steps, the parts and their knobs, run ids) choose
decoder runs; every other filter applies to AR runs too. Commands that need baselines (report, the
Python API) add the AR baseline of each chosen run (results.pairing.find_baseline).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sjdbench.decoder_identity import PART_KINDS
from sjdbench.errors import UserError
from sjdbench.results.files import read_yaml
from sjdbench.results.root import WORD, results_root, split_results_dir
from sjdbench.results.runs import DAMAGED, NEWER, with_baselines
from sjdbench.results.store import USABLE, check_readable
from sjdbench.results.summary import SUMMARY_FIELDS

SWEEP_ID = re.compile(r"[0-9a-f]{12}")
ALIASES = {  # filter key -> runs column
    "run": "run_id",
    "window": "spec.window",
    "decoder.window": "spec.window",
    "growth_steps": "spec.growth.steps",
    "decoder.growth_steps": "spec.growth.steps",
    "decoder.growth_reading": "spec.growth.reading",
    # the parts' claim: summary.json's decoder_lossless, derived from the stored parts for older runs
    "decoder_lossless": "lossless",
    "lossless": "lossless",
}
DECODER_SIDE = {"decoder", "run_id", "decoder_preset", "decoder_family", "decoder_spec"}
NAMED_KEYS = (
    "model",
    "data",
    "seed",
    "device",
    "decoder",
    "window",
    "growth_steps",
    "run_id",
    "sweep",
    "decoder/<part>",
    "decoder.<part>[.<knob>]",
    "decoder.growth_reading",
    WORD,
)


@dataclass
class Selection:
    """Parsed words: the store, filters on every run and on decoder runs, sweeps, and run ids named
    exactly (a run folder or a full id, which must be usable where a command needs them to be)."""

    root: Path
    run: dict[str, list[str]] = field(default_factory=dict)  # runs column -> patterns (AR runs included)
    decoder: dict[str, list[str]] = field(default_factory=dict)  # decoder-side columns (AR runs exempt)
    sweeps: list[str] = field(default_factory=list)
    named: list[str] = field(default_factory=list)  # run ids named exactly (folders, full ids)
    words: list[str] = field(default_factory=list)  # as typed, for messages

    def describe(self) -> str:
        return " ".join(self.words) or "(all runs)"


def _column(key: str) -> tuple[str, bool] | None:
    """(runs column, decoder side) of a filter key; None for an unknown key."""
    if key in ALIASES:
        return ALIASES[key], True
    match = re.fullmatch(r"decoder[./](\w+)", key)
    if match and match.group(1) in PART_KINDS:
        return f"spec.{match.group(1)}.name", True
    match = re.fullmatch(r"decoder\.(\w+)((?:\.\w+)+)", key)
    if match and match.group(1) in PART_KINDS:
        return f"spec.{match.group(1)}{match.group(2)}", True
    if key in SUMMARY_FIELDS:
        return key, key in DECODER_SIDE or key in ("window", "growth_steps")
    return None


def _unknown(key: str, command: str | None) -> UserError:
    others = ", ".join(f for f in SUMMARY_FIELDS if f not in NAMED_KEYS)
    what = f"{command} filter" if command else "filter"
    return UserError(f"unknown {what} '{key}'; use {', '.join(NAMED_KEYS)}, or a summary.json field: {others}")


def parse_selection(words: list[str], results_dir: str | None = None, command: str | None = None) -> Selection:
    """Words -> Selection (the store: results_dir=, --results-dir, the folders named, else the
    default root); UserError names the word and what would be valid (command: named in messages)."""
    words, named_root = split_results_dir(list(words), results_dir)
    roots: list[Path] = [Path(named_root)] if named_root else []
    selection = Selection(Path("."), words=list(words))
    bare: list[str] = []
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            path = Path(word).expanduser()
            if (path / "config.yaml").exists() or (path / "summary.json").exists():
                roots.append(path.parent.parent)
                selection.named.append(path.name)
                selection.decoder.setdefault("run_id", []).append(path.name)
            elif (path / "sweep.yaml").exists():
                roots.append(path.parent.parent)
                selection.sweeps.append(path.name)
            elif (path / "runs").is_dir():
                roots.append(path)
            elif SWEEP_ID.fullmatch(word):
                selection.sweeps.append(word)
            else:
                bare.append(word)
            continue
        key = key.lstrip("+")
        values = [v for v in value.split(",") if v != ""]
        if not values:
            raise UserError(f"{key}= needs a value, e.g. {key}=<value>")
        if key == "sweep":
            selection.sweeps.extend(values)
            continue
        found = _column(key)
        if found is None:
            raise _unknown(key, command)
        column, decoder_side = found
        (selection.decoder if decoder_side else selection.run)[column] = values
    distinct = list(dict.fromkeys(r.resolve() for r in roots))
    if len(distinct) > 1:
        raise UserError(
            f"the runs named are in {len(distinct)} stores ({', '.join(map(str, distinct))}); "
            f"select from one store at a time ({WORD}=DIR)"
        )
    selection.root = roots[0] if roots else results_root()
    check_readable(selection.root)  # a file, a device or a store this user may not read: named before any work
    for word in bare:  # run ids and patterns of them, under the store's runs/
        if not _looks_like_run(selection.root, word):
            raise UserError(
                f"'{word}' is neither a filter nor a sweep id, and is neither a run id in {selection.root / 'runs'} "
                "nor a run, sweep or results folder; write key=value (e.g. model=toy decoder=sjd,sjd_vp), a run id "
                "or pattern (e.g. 'toy-sjd-*'), or a 12-character sweep id"
            )
        if not any(ch in word for ch in "*?["):
            selection.named.append(word)
        selection.decoder.setdefault("run_id", []).append(word)
    return selection


def _looks_like_run(root: Path, word: str) -> bool:
    runs = root / "runs"
    if (runs / word).is_dir():
        return True
    return runs.is_dir() and any(fnmatch.fnmatchcase(p.name, word) for p in runs.iterdir() if p.is_dir())


def _matches(value, patterns: list[str]) -> bool:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return any(p in ("null", "none", "None") for p in patterns)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    for pattern in patterns:
        if fnmatch.fnmatchcase(text, pattern):
            return True
        try:
            if float(pattern) == float(value):
                return True
        except (TypeError, ValueError):
            pass
    return False


def _column_mask(runs: pd.DataFrame, column: str, patterns: list[str]) -> pd.Series:
    if column == "decoder":  # a preset name, a family or a full label all select
        names = [c for c in ("decoder", "decoder_preset", "decoder_family") if c in runs]
        return runs[names].apply(lambda row: any(_matches(row[c], patterns) for c in names), axis=1)
    if column not in runs:
        values = pd.Series(None, index=runs.index, dtype=object)
    else:
        values = runs[column]
    if column == "spec.topology.name":  # a chain decoder's spec leaves its topology out (its id predates parts)
        windowed = ~runs["is_ar"].fillna(False).astype(bool)
        values = values.where(values.notna() | ~windowed, "chain")
    return values.apply(lambda v: _matches(v, patterns))


def sweep_run_ids(root: Path, sweep_id: str) -> set[str]:
    path = root / "sweeps" / sweep_id / "sweep.yaml"
    if not path.exists():
        known = sorted(p.name for p in (root / "sweeps").glob("*") if (p / "sweep.yaml").exists())
        raise UserError(f"no sweep '{sweep_id}' in {root}; sweeps there: {', '.join(known) or 'none'}")
    read = read_yaml(path)
    runs = (read.doc or {}).get("runs")
    ids = [r.get("run_id") for r in runs] if isinstance(runs, list) and all(isinstance(r, dict) for r in runs) else None
    if read.problem or ids is None or not all(isinstance(i, str) for i in ids):
        problem = read.problem or "holds no list of runs with their run_id"
        raise UserError(
            f"sweep {sweep_id}: {path} {problem}; re-run the sweep's command (it writes sweep.yaml again), or select "
            "its runs by filters (model=, decoder=, ...)"
        )
    return set(ids)


def refuse_unreadable(chosen: pd.DataFrame) -> None:
    """A damaged run, or one written by a newer sjdbench, is never read around: one line naming each
    (and the fix: `problem`, results.runs) ends the command."""
    if "problem" not in chosen:
        return
    bad = chosen[chosen["status"].isin([DAMAGED, NEWER]) & chosen["problem"].notna()]
    if bad.empty:
        return
    problems = list(bad.sort_values("run_id")["problem"])
    if len(problems) == 1:
        raise UserError(problems[0])
    names = ", ".join(sorted(bad["run_id"]))
    raise UserError(
        f"{len(problems)} selected runs cannot be read ({names}): {problems[0]}; and {len(problems) - 1} more"
    )


def select_runs(runs: pd.DataFrame, selection: Selection, baselines: bool = True) -> pd.DataFrame:
    """The runs the selection picks (every status) from a frame of `results.runs.runs_frame`, plus,
    with `baselines`, the AR baseline of each chosen decoder run. UserError when nothing matches,
    naming what the store holds."""
    if runs.empty:
        if not selection.root.exists():
            raise UserError(f"{WORD} {selection.root} does not exist; name the store that holds runs/ ({WORD}=DIR)")
        raise UserError(f"no runs in {selection.root / 'runs'}; run `sjdbench sweep ...` first or pass {WORD}=<dir>")
    keep = pd.Series(True, index=runs.index)
    if selection.sweeps:
        wanted = set().union(*(sweep_run_ids(selection.root, s) for s in selection.sweeps))
        keep &= runs["run_id"].isin(wanted)
    for column, patterns in selection.run.items():
        keep &= _column_mask(runs, column, patterns)
    for column, patterns in selection.decoder.items():
        keep &= _column_mask(runs, column, patterns)
    if not keep.any():
        held = {c: sorted({str(v) for v in runs[c].dropna()}) for c in ("model", "data", "decoder") if c in runs}
        inventory = "; ".join(f"{c}: {', '.join(v[:12])}{' ...' if len(v) > 12 else ''}" for c, v in held.items())
        raise UserError(f"no runs match {selection.describe()} in {selection.root}; the store has {inventory}")
    chosen = runs[keep]
    refuse_unreadable(chosen)
    if baselines:
        usable = runs[runs["status"].isin(USABLE)]
        chosen = runs[runs["run_id"].isin(set(chosen["run_id"]) | set(with_baselines(chosen, usable)["run_id"]))]
    return chosen.reset_index(drop=True)
