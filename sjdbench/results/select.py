"""Which runs a report covers, from words in the override style the other commands use:

    sjdbench report model=toy data=toy decoder=sjd,sjd_vp decoder.window=16,32
    sjdbench report 9cd9ee6291f1                 # the runs of one sweep (or sweep=<id>)
    sjdbench report decoder.proposal.lam=0.25 decoder/verifier=lantern results_dir=/data/results

Values are comma-separated alternatives and may use shell-style globs (decoder='sjd*'). Decoder
filters pick decoder runs; the AR baselines those runs pair with are always kept, since every
speedup needs one.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from sjdbench.errors import UserError

RUN_KEYS = {"model": "model", "data": "data", "seed": "seed", "device": "device"}  # key -> runs column
DECODER_ALIASES = {
    "window": "spec.window",
    "decoder.window": "spec.window",
    "growth_steps": "spec.growth.steps",
    "decoder.growth_steps": "spec.growth.steps",
    "decoder.growth_reading": "spec.growth.reading",
}
SWEEP_ID = re.compile(r"[0-9a-f]{12}")


@dataclass
class Filters:
    root: Path
    run: dict[str, list[str]] = field(default_factory=dict)  # runs column -> allowed values (AR included)
    decoder: dict[str, list[str]] = field(default_factory=dict)  # decoder-side columns (AR runs exempt)
    sweeps: list[str] = field(default_factory=list)

    def describe(self) -> str:
        words = [f"{k}={','.join(v)}" for k, v in {**self.run, **self.decoder}.items()]
        words += [f"sweep={s}" for s in self.sweeps]
        return " ".join(words) or "(all runs)"


def default_root() -> Path:
    return Path(os.environ.get("SJDBENCH_RESULTS") or "results")


def parse_filters(words: list[str], root: Path | None = None) -> Filters:
    """Words -> Filters; UserError names the word and the keys that exist."""
    filters = Filters(root or default_root())
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            if SWEEP_ID.fullmatch(word):
                filters.sweeps.append(word)
                continue
            raise UserError(
                f"'{word}' is neither a filter nor a sweep id; write key=value (e.g. model=toy "
                "decoder=sjd,sjd_vp) or a 12-character sweep id"
            )
        values = [v for v in value.split(",") if v != ""]
        if not values:
            raise UserError(f"{key}= needs a value, e.g. {key}=<value>")
        key = key.lstrip("+")
        if key == "results_dir":
            filters.root = Path(value)
        elif key == "sweep":
            filters.sweeps.extend(values)
        elif key in RUN_KEYS:
            filters.run[RUN_KEYS[key]] = values
        elif key in ("decoder", "run_id", "run"):
            filters.decoder["decoder" if key == "decoder" else "run_id"] = values
        elif key in DECODER_ALIASES:
            filters.decoder[DECODER_ALIASES[key]] = values
        elif re.fullmatch(r"decoder[./](proposal|verifier|init)", key):
            filters.decoder[f"spec.{key[8:]}.name"] = values
        elif re.fullmatch(r"decoder\.(proposal|verifier|init)(\.\w+)+", key):
            filters.decoder[f"spec.{key[8:]}"] = values
        else:
            raise UserError(
                f"unknown report filter '{key}'; use model, data, decoder, seed, device, window, "
                "growth_steps, decoder.<proposal|verifier|init>[.<knob>], run_id, sweep or results_dir"
            )
    return filters


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
        return pd.Series(False, index=runs.index)
    return runs[column].apply(lambda v: _matches(v, patterns))


def sweep_run_ids(root: Path, sweep_id: str) -> set[str]:
    path = root / "sweeps" / sweep_id / "sweep.yaml"
    if not path.exists():
        known = sorted(p.name for p in (root / "sweeps").glob("*") if (p / "sweep.yaml").exists())
        raise UserError(f"no sweep '{sweep_id}' in {root}; sweeps there: {', '.join(known) or 'none'}")
    doc = yaml.safe_load(path.read_text()) or {}
    return {run["run_id"] for run in doc.get("runs", [])}


def select_runs(runs: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """The runs the filters pick (every status), plus the AR runs the chosen decoders pair with.
    UserError when nothing matches, naming what the store holds."""
    if runs.empty:
        raise UserError(f"no runs in {filters.root / 'runs'}; run `sjdbench sweep ...` first or pass results_dir=<dir>")
    keep = pd.Series(True, index=runs.index)
    if filters.sweeps:
        wanted = set().union(*(sweep_run_ids(filters.root, s) for s in filters.sweeps))
        keep &= runs["run_id"].isin(wanted)
    for column, patterns in filters.run.items():
        keep &= _column_mask(runs, column, patterns)
    decoder_keep = pd.Series(True, index=runs.index)
    for column, patterns in filters.decoder.items():
        decoder_keep &= _column_mask(runs, column, patterns)
    is_ar = runs["is_ar"].fillna(False).astype(bool)
    if filters.decoder:  # AR runs only as the baselines of the chosen decoders (or when asked for)
        partners = set(runs.loc[keep & decoder_keep & ~is_ar, "pair_key"])
        chosen = keep & (decoder_keep | (is_ar & runs["pair_key"].isin(partners)))
    else:
        chosen = keep
    if not (keep & decoder_keep).any():
        held = {c: sorted({str(v) for v in runs[c].dropna()}) for c in ("model", "data", "decoder") if c in runs}
        inventory = "; ".join(f"{c}: {', '.join(v[:12])}{' ...' if len(v) > 12 else ''}" for c, v in held.items())
        raise UserError(f"no runs match {filters.describe()} in {filters.root}; the store has {inventory}")
    return runs[chosen].reset_index(drop=True)
