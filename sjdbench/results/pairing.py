"""A run's AR baseline and its speedup over it: the one definition that `sjdbench run`, `sweep`,
`eval`, `report` and `sjdbench.load_runs` all print.

The pairing key of a run is the id of the AR run with the same `SampleFacts` (model, options and
weights fingerprint, prompt set and its hash, sampling, seed, samples per prompt, device type:
everything that determines AR's samples), i.e. the run `sjdbench run decoder=ar` with the same
settings gets and the baseline a sweep adds (config.identity.ar_run_id). It is computed the same
way for a planned run (from its ResolvedRun) and a stored one (from its files), so sweeps group, and
report and eval find, the same baseline.

- Baseline (`find_baseline`): a usable AR run with the run's key and, where both record it, the
  same resolved sampling. A greedy decoder takes the greedy AR run when the store has one (the same
  tokens), else the sampled one; a sampled decoder only the sampled one. An AR run is its own.
- Compiled or eager: a decoder whose forward was compiled (`model.compile=true`, env.json's
  `compiled`) is paired only with an AR run compiled the same way, and an eager one only with an
  eager AR, so a speedup never credits the decoder with (or charges it for) the compiler.
- Noise floor (`find_noise_floor`): the AR run with the key at seed + offset (the same prompts and
  N, only the seeds differ), against which quality differences are read.
- Speedup (`speedup`): per prompt, AR latency / decoder latency, each the mean over the prompt's
  (prompt, sample) pairs that both runs hold; the geometric mean of these ratios over prompts, with
  a 95 % percentile-bootstrap CI that resamples prompts (10,000 resamples, fixed seed), and N, the
  number of prompts paired, which is always shown with it. Runs decoded in batches have no
  per-sample latency: their speedup is the decoder's throughput (images per decoding second over
  its streams) over AR's at the same batch size (part of the key), with N the prompts both hold
  and no interval (one stream is one measurement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from sjdbench.results.store import USABLE
from sjdbench.runkey import SampleFacts, ar_run_id

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # fixed: the same store gives the same numbers


def pair_key(facts: SampleFacts | None, seed_offset: int = 0) -> str | None:
    """The pairing key: the id of the (sampled) AR run with these facts, at seed + seed_offset."""
    return None if facts is None else ar_run_id(facts, seed_offset)


# -- which AR run ------------------------------------------------------------------------------------


def _usable_ar(runs: pd.DataFrame, key: str | None) -> pd.DataFrame:
    if key is None or runs.empty:
        return runs.iloc[0:0]
    return runs[(runs["pair_key"] == key) & runs["is_ar"].fillna(False).astype(bool) & runs["status"].isin(USABLE)]


def _same_sampling(run: Mapping[str, Any], candidates: pd.DataFrame) -> pd.DataFrame:
    """Candidates whose resolved sampling (env.json) equals the run's, where both record it."""
    mine = run.get("env.sampling")
    if candidates.empty or not isinstance(mine, dict) or "env.sampling" not in candidates:
        return candidates
    same = candidates["env.sampling"].map(lambda s: not isinstance(s, dict) or s == mine).astype(bool)
    return candidates[same]


def _same_execution(run: Mapping[str, Any], candidates: pd.DataFrame) -> pd.DataFrame:
    """Candidates run as the run was, compiled or eager (env.json's `compiled`; a run that does not
    record it ran eager). The pairing key already differs (the model's `compile` option is one of its
    facts); this holds the rule for stores whose options were written by hand or by older versions."""
    if candidates.empty:
        return candidates
    mine = _compiled(run.get("env.compiled"))
    if "env.compiled" not in candidates:
        return candidates if not mine else candidates.iloc[0:0]
    return candidates[candidates["env.compiled"].map(_compiled) == mine]


def _compiled(value: Any) -> bool:
    return isinstance(value, bool) and value


def find_baseline(run: Mapping[str, Any], runs: pd.DataFrame) -> pd.Series | None:
    """The AR run a run's speedup (and quality difference) is measured against, among `runs` (a
    frame of `results.runs.runs_frame`); None when the store holds none."""
    if bool(run.get("is_ar")):
        return run if isinstance(run, pd.Series) else pd.Series(dict(run))
    candidates = _same_execution(run, _same_sampling(run, _usable_ar(runs, run.get("pair_key"))))
    if candidates.empty:
        return None
    greedy = candidates["greedy"].fillna(False).astype(bool)
    pool = candidates[greedy] if bool(run.get("greedy")) and greedy.any() else candidates[~greedy]
    if pool.empty:
        return None
    return pool.sort_values(["n_samples", "run_id"], ascending=[False, True]).iloc[0]


def find_noise_floor(run: Mapping[str, Any], runs: pd.DataFrame, seed_offset: int) -> pd.Series | None:
    """The sampled AR run at the run's seed + seed_offset with everything else the same."""
    facts = run.get("sample_facts")
    key = pair_key(SampleFacts(**facts), seed_offset) if isinstance(facts, dict) else None
    candidates = _same_execution(run, _same_sampling(run, _usable_ar(runs, key)))
    candidates = candidates[~candidates["greedy"].fillna(False).astype(bool)]
    if candidates.empty:
        return None
    return candidates.sort_values(["n_samples", "run_id"], ascending=[False, True]).iloc[0]


# -- the speedup statistic ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Speedup:
    """AR latency / decoder latency: geometric mean over the N paired prompts, 95 % bootstrap CI."""

    value: float | None
    lo: float | None
    hi: float | None
    n: int  # prompts paired (each with at least one (prompt, sample) both runs hold)

    def text(self, digits: int = 2) -> str:
        """e.g. '1.52 [1.28, 1.79] (N = 5)'; '-' without a baseline."""
        if self.value is None:
            return "-"
        ci = f" [{self.lo:.{digits}f}, {self.hi:.{digits}f}]" if self.lo is not None and self.hi is not None else ""
        return f"{self.value:.{digits}f}{ci} (N = {self.n})"


NO_SPEEDUP = Speedup(None, None, None, 0)


def geometric_mean_ci(
    ratios: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, level: float = 0.95
) -> tuple[float, float | None, float | None]:
    """(geometric mean, CI low, CI high) of positive ratios (n,); the CI is None for fewer than 2."""
    logs = np.log(np.asarray(ratios, dtype=np.float64))
    mean = float(np.exp(logs.mean()))
    if logs.size < 2:
        return mean, None, None
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 4_000_000 // logs.size)  # bounded memory for large prompt sets
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        index = rng.integers(0, logs.size, size=(stop - start, logs.size))  # (B, n)
        means[start:stop] = logs[index].mean(axis=1)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return mean, float(np.exp(lo)), float(np.exp(hi))


def per_prompt_ratios(ar: pd.DataFrame, decoder: pd.DataFrame) -> pd.Series:
    """AR / decoder latency per prompt over the (prompt_id, sample) pairs both runs hold."""
    keys = ["prompt_id", "sample"]
    paired = ar[keys + ["latency_s"]].merge(decoder[keys + ["latency_s"]], on=keys, suffixes=("_ar", "_dec"))
    per_prompt = paired.groupby("prompt_id")[["latency_s_ar", "latency_s_dec"]].mean()
    return per_prompt["latency_s_ar"] / per_prompt["latency_s_dec"]


def images_per_s(rows: pd.DataFrame) -> float | None:
    """Throughput of flat sample rows (stream.* columns): images over decoding seconds, per stream the
    state recorded with its last image, summed over streams."""
    if "stream.id" not in rows or rows["stream.id"].isna().all():
        return None
    last = rows.sort_values("stream.images").groupby("stream.id").tail(1)
    seconds = float(last["stream.decode_s"].sum())
    return float(last["stream.images"].sum()) / seconds if seconds > 0 else None


def speedup(ar: pd.DataFrame, decoder: pd.DataFrame) -> Speedup:
    """The speedup of `decoder` over `ar`, from their sample rows (prompt_id, sample, latency_s; or
    the stream columns of batched runs)."""
    if _batched(ar) or _batched(decoder):
        mine, theirs = images_per_s(decoder), images_per_s(ar)
        common = ar[["prompt_id", "sample"]].merge(decoder[["prompt_id", "sample"]], on=["prompt_id", "sample"])
        if not mine or not theirs or common.empty:
            return NO_SPEEDUP
        return Speedup(mine / theirs, None, None, int(common["prompt_id"].nunique()))
    ratios = per_prompt_ratios(ar, decoder)
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if ratios.empty:
        return NO_SPEEDUP
    value, lo, hi = geometric_mean_ci(ratios.to_numpy())
    return Speedup(value, lo, hi, int(ratios.size))


def _batched(rows: pd.DataFrame) -> bool:
    return "stream.batch_size" in rows and bool((rows["stream.batch_size"].fillna(1) > 1).any())


def timing_of(ar: pd.DataFrame, decoder: pd.DataFrame) -> dict[str, Any]:
    """How far the pairs behind a speedup can be trusted: pairs timed in one session (interleaved,
    the same machine state), all pairs, and samples of either run timed on a busy machine."""
    keys = ["prompt_id", "sample"]
    columns = [c for c in ("timing.session", "machine.busy") if c in ar and c in decoder]
    both = ar[keys + columns].merge(decoder[keys + columns], on=keys, suffixes=("_ar", "_dec"))
    if "timing.session" in columns:
        mine, theirs = both["timing.session_dec"], both["timing.session_ar"]
        same = int((mine.notna() & (mine == theirs)).sum())
    else:
        same = 0
    busy = 0
    if "machine.busy" in columns:
        busy = int(both["machine.busy_ar"].fillna(False).astype(bool).sum())
        busy += int(both["machine.busy_dec"].fillna(False).astype(bool).sum())
    return {
        "paired": same == len(both) and len(both) > 0,
        "paired_samples": same,
        "samples": len(both),
        "busy_samples": busy,
    }


PAIRING_COLUMNS = ["run_id", "ar_run_id", "speedup", "speedup_lo", "speedup_hi", "speedup_n"]


def pair_all(runs: pd.DataFrame, samples: pd.DataFrame, store: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per run of `runs`: its AR baseline among `store` (the store's runs; default `runs`),
    speedup, CI and N. `samples` holds the sample rows of the runs and of their baselines."""
    store = runs if store is None else store
    by_run = {run_id: frame for run_id, frame in samples.groupby("run_id")} if not samples.empty else {}  # noqa: C416
    rows = []
    for _, run in runs.iterrows():
        baseline = find_baseline(run, store) if run.get("status") in USABLE else None
        own = by_run.get(run["run_id"])
        if baseline is None or own is None:
            rows.append([run["run_id"], None, None, None, None, 0])
            continue
        if baseline["run_id"] == run["run_id"]:  # an AR run is its own baseline: 1 by definition, no interval
            rows.append([run["run_id"], run["run_id"], 1.0, None, None, int(own["prompt_id"].nunique())])
            continue
        theirs = by_run.get(baseline["run_id"])
        result = speedup(theirs, own) if theirs is not None else NO_SPEEDUP
        rows.append([run["run_id"], baseline["run_id"], result.value, result.lo, result.hi, result.n])
    return pd.DataFrame(rows, columns=PAIRING_COLUMNS)


def as_speedup(row: Mapping[str, Any]) -> Speedup:
    """A pairing row (of `pair_all`) as a Speedup."""

    def number(key: str) -> float | None:
        value = row.get(key)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)

    n = row.get("speedup_n")
    return Speedup(number("speedup"), number("speedup_lo"), number("speedup_hi"), int(n) if n == n and n else 0)
