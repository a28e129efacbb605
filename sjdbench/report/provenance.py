"""Where a table's numbers come from, and what makes them less comparable than they look.

Notes (per model x data set): models and weight fingerprints, prompt set and its hash, samples,
sampling, seeds, hardware, dtype, threads, torch, commit and sjdbench version, from the runs'
env.json. Warnings: a table that mixes hardware, commits or sampling; latencies taken on a busy
machine; AR baselines timed in another session than their decoder (or timed run by run); runs
without an AR baseline. Incomplete and legacy runs are listed, never used.
"""

from __future__ import annotations

import pandas as pd

from sjdbench.results.pairing import BOOTSTRAP_RESAMPLES
from sjdbench.results.store import USABLE


def _values(runs: pd.DataFrame, column: str) -> list[str]:
    if column not in runs:
        return []
    out = []
    for value in runs[column]:
        text = _text(value)
        if text not in out:
            out.append(text)
    return out


def _text(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "unknown"
    return str(value)


def _short_commit(value: str) -> str:
    return value[:10] if value != "unknown" else value


def hardware(run: pd.Series) -> str:
    """The machine a run was timed on, as far as env.json records it."""
    parts = [_text(run.get("env.device", run.get("device")))]
    for key in ("env.gpu", "env.gpu_name", "env.cpu_model", "env.platform"):
        if key in run and _text(run[key]) != "unknown":
            parts.append(_text(run[key]))
    if "env.cpu_count" in run and _text(run["env.cpu_count"]) != "unknown":
        parts.append(f"{_text(run['env.cpu_count'])} CPUs")
    return ", ".join(parts)


def notes(runs: pd.DataFrame) -> list[str]:
    """One line per fact, each listing every distinct value among the runs."""

    def joined(column: str, short=lambda s: s) -> str:
        return " / ".join(short(v) for v in _values(runs, column)) or "unknown"

    n_prompts = sorted({int(v) for v in runs["n_samples"].dropna()}) if "n_samples" in runs else []
    per_prompt = sorted({int(v) for v in runs["samples_per_prompt"].dropna()}) if "samples_per_prompt" in runs else [1]
    hw = list(dict.fromkeys(hardware(r) for _, r in runs.iterrows()))
    return [
        f"model: {joined('model')} (weights {joined('env.weights')}); data: {joined('data')} "
        f"(prompts sha {joined('env.prompts_sha')}), {'/'.join(map(str, n_prompts)) or '?'} samples per run "
        f"({'/'.join(map(str, per_prompt))} per prompt); seed {joined('seed')}",
        f"sampling: {joined('env.sampling')}",
        f"hardware: {' / '.join(hw)}; dtype {joined('env.dtype')}; torch {joined('env.torch')}, "
        f"torch threads {joined('env.torch_threads')}",
        f"code: sjdbench {joined('env.sjdbench')}, commit {joined('env.git_commit', _short_commit)}",
        "speedup: geometric mean over prompts of paired AR/decoder latency ratios, 95 % percentile-bootstrap CI "
        f"({BOOTSTRAP_RESAMPLES:,} resamples of prompts); step compression = AR tokens / NFE",
    ]


def mixing_warnings(runs: pd.DataFrame) -> list[str]:
    """A line per kind of mixing: these runs were not produced under the same conditions."""
    out = []
    commits = _values(runs, "env.git_commit")
    if len(commits) > 1:
        out.append(
            f"warning: this table mixes runs from {len(commits)} commits ({', '.join(map(_short_commit, commits))})"
        )
    hw = list(dict.fromkeys(hardware(r) for _, r in runs.iterrows()))
    if len(hw) > 1:
        out.append(f"warning: this table mixes hardware ({' | '.join(hw)}): latencies are not comparable across it")
    sampling = _values(runs, "env.sampling")
    if len(sampling) > 1:
        out.append(f"warning: this table mixes sampling settings ({' | '.join(sampling)})")
    threads = _values(runs, "env.torch_threads")
    if len(threads) > 1:
        out.append(f"warning: this table mixes torch thread counts ({', '.join(threads)})")
    if "n_rows" in runs and runs["n_rows"].nunique() > 1:
        counts = runs["n_rows"].astype(int)
        out.append(
            f"warning: this table mixes runs holding {counts.min()} to {counts.max()} samples (data.limit differs "
            "per run): speedups pair the samples both runs hold, per-run values do not"
        )
    return out


def timing_warnings(runs: pd.DataFrame, samples: pd.DataFrame, pairings: pd.DataFrame) -> list[str]:
    """Busy-machine latencies, AR baselines timed in another session, runs without a baseline."""
    out = []
    labels = dict(zip(runs["run_id"], runs["decoder"] + " W=" + runs["window"].astype(str)))
    if "seed" in runs and runs["seed"].nunique() > 1:  # runs that differ only in their seed: name it
        labels = {run_id: f"{text} seed={seed}" for (run_id, text), seed in zip(labels.items(), runs["seed"])}
    own = samples[samples["run_id"].isin(runs["run_id"])]
    if "machine.busy" in own:
        busy = own[own["machine.busy"].fillna(False).astype(bool)].groupby("run_id").size()
        for run_id, count in busy.items():
            total = int((own["run_id"] == run_id).sum())
            out.append(
                f"warning: {labels.get(run_id, run_id)}: {count} of {total} latencies were taken on a busy "
                "machine (load above the cores available); its speedup is unreliable"
            )
    warned = {run_id for run_id in labels if any(f"{labels[run_id]}:" in line for line in out)}
    for _, run in runs.iterrows():  # summaries that say so, for rows without machine state
        busy = run.get("busy_samples")
        if run["run_id"] in warned:
            continue
        if pd.notna(busy) and busy and busy > 0:
            out.append(
                f"warning: {labels[run['run_id']]}: its summary counts {int(busy)} latencies taken on a busy "
                "machine; its speedup is unreliable"
            )
        elif run.get("latency_trusted") is False:
            out.append(f"warning: {labels[run['run_id']]}: its summary marks its latencies as untrusted")
    sessions = (
        own.groupby("run_id")["timing.session"].agg(lambda s: set(s.dropna())) if "timing.session" in own else None
    )
    separately_timed = []
    for pairing in pairings.itertuples(index=False):
        if pairing.run_id not in labels or pairing.ar_run_id is None or pairing.ar_run_id == pairing.run_id:
            continue
        mine = sessions.get(pairing.run_id, set()) if sessions is not None else set()
        theirs = sessions.get(pairing.ar_run_id, set()) if sessions is not None else set()
        if mine and theirs and mine != theirs:
            out.append(
                f"warning: {labels[pairing.run_id]} and its AR baseline were timed in different sessions "
                f"({', '.join(sorted(map(str, mine)))} vs {', '.join(sorted(map(str, theirs)))}): "
                "the machine's state may differ between them"
            )
        elif not (mine and theirs):
            separately_timed.append(labels[pairing.run_id])
    if separately_timed:
        out.append(
            f"note: {len(separately_timed)} decoder run(s) record no timing session, so their AR baseline "
            "was timed in a separate run; load changes between runs move speedups (paired timing "
            "interleaves decoder and AR prompt by prompt)"
        )
    missing = [labels[p.run_id] for p in pairings.itertuples(index=False) if p.run_id in labels and p.ar_run_id is None]
    if missing:
        out.append(
            f"warning: no complete AR run pairs with {', '.join(missing)} (same model, weights, prompts, "
            "sampling, seed, device): no speedup; `sjdbench sweep` adds the AR baselines"
        )
    counts = runs.set_index("run_id")["n_samples"] if "n_samples" in runs else pd.Series(dtype=float)
    for pairing in pairings.itertuples(index=False):
        if pairing.run_id in labels and pairing.ar_run_id and pairing.ar_run_id != pairing.run_id:
            per_prompt = (
                runs.set_index("run_id").get("samples_per_prompt", pd.Series(dtype=float)).get(pairing.run_id, 1)
            )
            prompts = int(counts.get(pairing.run_id, 0) // max(int(per_prompt or 1), 1))
            if 0 < pairing.speedup_n < prompts:
                out.append(
                    f"note: {labels[pairing.run_id]}: its speedup pairs {pairing.speedup_n} of its {prompts} prompts "
                    "(the AR run holds fewer)"
                )
    return out


def unused_runs(all_runs: pd.DataFrame) -> list[str]:
    """Incomplete and legacy runs, one line each: listed so nothing is silently dropped or used."""
    out = []
    for _, run in all_runs[~all_runs["status"].isin(USABLE)].sort_values("run_id").iterrows():
        if run["status"] == "legacy":
            out.append(f"{run['run_id']}: written by an older sjdbench (not used; `sjdbench migrate` re-keys it)")
        else:
            wanted = run.get("selection_n") if pd.notna(run.get("selection_n")) else run.get("n_wanted")
            have = run.get("n_rows")
            known = pd.notna(wanted) and pd.notna(have)
            if known and have > wanted:  # rows written after the summary: more than its count, never "8 of 2"
                held = f"{int(have)} samples stored, more than the {int(wanted)} its summary.json was written for"
            else:
                held = f"{int(have)} of {int(wanted)} samples" if known else f"{int(have or 0)} samples"
            why = run.get("incomplete_why")
            why = f", {why}" if isinstance(why, str) else ""
            out.append(
                f"{run['run_id']} ({run.get('decoder')}): incomplete, {held}{why} "
                "(not used; re-run its command to finish it)"
            )
    return out
