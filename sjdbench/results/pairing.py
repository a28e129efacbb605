"""Speedup over AR from paired samples.

A decoder run is paired with the AR run that decoded the same prompts with the same model, weights,
sampling, seed, samples per prompt and device (`load.pair_key`); sample (prompt, s) of both used the
same random seed. Per prompt, the ratio AR latency / decoder latency (each the mean over the
prompt's paired samples) cancels the prompt's own cost; the speedup is the geometric mean of these
ratios over prompts, with a percentile-bootstrap 95 % CI that resamples prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sjdbench.results.runs import USABLE

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # fixed: the same store gives the same report


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


@dataclass
class Pairing:
    run_id: str
    ar_run_id: str | None
    speedup: float | None
    speedup_lo: float | None
    speedup_hi: float | None
    n_pairs: int  # prompts with at least one paired sample


def find_baseline(run: pd.Series, runs: pd.DataFrame) -> pd.Series | None:
    """The complete AR run sharing the run's pair key; a greedy decoder prefers a greedy AR run
    when the store has one (same sampling settings, argmax at every step)."""
    candidates = runs[(runs["pair_key"] == run["pair_key"]) & runs["is_ar"].astype(bool) & runs["status"].isin(USABLE)]
    if candidates.empty:
        return None
    same_greedy = candidates[candidates["greedy"].astype(bool) == bool(run["greedy"])]
    pool = same_greedy if not same_greedy.empty else candidates[~candidates["greedy"].astype(bool)]
    if pool.empty:
        return None
    return pool.sort_values(["n_samples", "run_id"], ascending=[False, True]).iloc[0]


def pair_all(runs: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """One Pairing per run (AR runs pair with themselves: speedup 1)."""
    by_run = {run_id: frame for run_id, frame in samples.groupby("run_id")} if not samples.empty else {}  # noqa: C416
    out = []
    for _, run in runs.iterrows():
        baseline = find_baseline(run, runs)
        if baseline is None or run["run_id"] not in by_run or baseline["run_id"] not in by_run:
            out.append(Pairing(run["run_id"], None, None, None, None, 0))
            continue
        if baseline["run_id"] == run["run_id"]:  # the AR run itself: 1 by definition, no interval
            out.append(
                Pairing(
                    run["run_id"], run["run_id"], 1.0, None, None, int(by_run[run["run_id"]]["prompt_id"].nunique())
                )
            )
            continue
        ratios = per_prompt_ratios(by_run[baseline["run_id"]], by_run[run["run_id"]])
        ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
        if ratios.empty:
            out.append(Pairing(run["run_id"], baseline["run_id"], None, None, None, 0))
            continue
        value, lo, hi = geometric_mean_ci(ratios.to_numpy())
        out.append(Pairing(run["run_id"], baseline["run_id"], value, lo, hi, int(ratios.size)))
    return pd.DataFrame([p.__dict__ for p in out], columns=list(Pairing.__dataclass_fields__))
