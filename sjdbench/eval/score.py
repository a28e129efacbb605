"""Scoring: a step over finished runs. decode -> store -> score.

For each (run, evaluator): measure one vector per stored sample (cached beside the run, so nothing
is measured twice), reduce them to the score, and compare with the runs that make the score
readable:

- the run's AR baseline (the run a decoder claims to match; sjdbench.results.pairing finds it, as
  for speedups): per-sample metrics give the paired per-prompt difference with a bootstrap 95 % CI;
  set metrics the difference of distances to the same reference, with a paired bootstrap CI;
- the AR run at seed + eval.floor_seed_offset (results.pairing.find_noise_floor): the noise floor,
  i.e. how far two AR runs that differ only in their seeds already are (same prompts, same N).

The score file is keyed by the hash of its full protocol and never recomputed once present; a
comparison whose AR run is not finished yet is listed under `pending` and filled in by a later
`sjdbench eval` from the cached vectors.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd

from sjdbench.errors import UserError
from sjdbench.eval.evaluators import COCO, TOY, check_evaluator, evaluator_class
from sjdbench.eval.evaluators.base import Evaluator, Refused, RunView, SampleMetric, SetMetric, open_run
from sjdbench.eval.evaluators.settings import EvalConfig
from sjdbench.eval.metrics.bootstrap import bootstrap_ci, prompt_groups
from sjdbench.results.files import samples_sha
from sjdbench.results.pairing import find_baseline, find_noise_floor, pair_key
from sjdbench.results.runs import runs_frame
from sjdbench.results.scorefile import SCHEMA, protocol_hash, read_score_file, score_path, write_score
from sjdbench.runkey import SampleFacts

log = logging.getLogger(__name__)


@dataclass
class ScoreOutcome:
    run_id: str
    evaluator: str
    status: str  # scored | present | updated | refused
    path: Optional[Path] = None
    doc: Optional[dict] = None
    message: str = ""


def evaluators_for(run: RunView, config: EvalConfig) -> list[str]:
    """eval.evaluators, or by run: the toy's offline evaluators for model=toy, FID/KID/CLIP for the
    COCO sets (they have reference images), CLIP-Score otherwise."""
    if config.evaluators:
        return list(config.evaluators)
    if run.config.model.name == "toy":
        return list(TOY)
    if run.config.data.name in ("coco2017", "coco2014_30k"):
        return list(COCO)
    return ["clip_score"]


def library_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from sjdbench.machine import git_commit

    out: dict[str, str | None] = {}
    for package in ("torch", "numpy", "scipy", "torchmetrics", "torch-fidelity", "open_clip_torch", "pillow"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    out["sjdbench_commit"] = git_commit()
    return out


# ---------------------------------------------------------------- per-sample vectors, cached by key


def _cache_file(run: RunView, evaluator: Evaluator) -> Path:
    digest = protocol_hash(evaluator.measure_protocol())
    return run.dir / "scores" / "cache" / f"{evaluator.cache_kind}-{digest}.npz"


def cached_vectors(evaluator: Evaluator, run: RunView, keys: np.ndarray) -> np.ndarray:
    """(len(keys), D) vectors of the run's samples with these (prompt_id, sample) keys, measuring
    only the samples not cached yet (the cache is rewritten atomically)."""
    from sjdbench.results.store import atomic_write_bytes

    path = _cache_file(run, evaluator)
    known: dict[tuple[int, int], np.ndarray] = {}
    if path.exists():
        try:
            with np.load(path) as stored:
                known = {tuple(k): v for k, v in zip(stored["keys"].tolist(), stored["vectors"])}
        except (OSError, ValueError, KeyError, EOFError) as error:  # a cache: damaged means measure again
            log.warning("%s is unreadable (%s); measured again", path, type(error).__name__)
            known = {}
    by_key = {s.key: s for s in run.samples}
    wanted = [tuple(k) for k in np.asarray(keys).tolist()]
    todo = [by_key[k] for k in dict.fromkeys(wanted) if k not in known]
    if todo:
        fresh = evaluator.measure(todo)
        for sample, vector in zip(todo, fresh):
            known[sample.key] = vector
        all_keys = sorted(known)
        buffer = io.BytesIO()
        np.savez(buffer, keys=np.asarray(all_keys, dtype=np.int64), vectors=np.stack([known[k] for k in all_keys]))
        atomic_write_bytes(path, buffer.getvalue())
    return np.stack([known[k] for k in wanted])


# ---------------------------------------------------------------- the AR runs a score is read against


_STORES: dict[Path, pd.DataFrame] = {}  # stores read during one score() call (runs do not change meanwhile)
_OPENED: dict[Path, RunView] = {}


def _store(root: Path) -> pd.DataFrame:
    root = Path(root)
    if root not in _STORES:
        _STORES[root] = runs_frame(root)
    return _STORES[root]


def _record(run: RunView) -> pd.Series | None:
    """The run as the store reads it (results.runs): its pairing key, facts and status."""
    store = _store(run.dir.parent.parent)
    rows = store[store["run_id"] == run.run_id] if not store.empty else store
    return None if rows.empty else rows.iloc[0]


def is_ar_run(run: RunView) -> bool:
    """The store's reading of the run (results.decoders.is_ar of its stored decoder spec)."""
    record = _record(run)
    return record is not None and bool(record["is_ar"])


def _why_not(root: Path, run_id: str | None) -> str:
    if run_id is None:
        return "the run's env.json records no prompt-set hash, so its AR run cannot be named"
    if not (root / "runs" / run_id / "config.yaml").exists():
        return f"run {run_id} does not exist"
    return f"run {run_id} is not finished; re-run its command to finish it"


def comparison_runs(run: RunView, seed_offset: int) -> tuple[tuple[str | None, str], tuple[str | None, str]]:
    """((AR baseline id, why not), (noise-floor AR id, why not)) of a run, as results.pairing finds
    them in the run's store: the id when that run is there and usable; otherwise the id it would
    have and why it cannot be used yet."""
    root = run.dir.parent.parent
    store, record = _store(root), _record(run)
    if record is None:
        return (None, f"run {run.run_id} is not in {root}"), (None, f"run {run.run_id} is not in {root}")
    baseline = find_baseline(record, store)
    ar = (baseline["run_id"], "") if baseline is not None else (None, _why_not(root, record["pair_key"]))
    floor_run = find_noise_floor(record, store, seed_offset)
    if floor_run is not None:
        floor = (floor_run["run_id"], "")
    else:
        facts = record.get("sample_facts")
        expected = pair_key(SampleFacts(**facts), seed_offset) if isinstance(facts, dict) else None
        floor = (None, _why_not(root, expected))
    return ar, floor


def _open_run_with_samples(root: Path, run_id: str) -> RunView:
    folder = root / "runs" / run_id
    if folder not in _OPENED:
        _OPENED[folder] = open_run(folder)
    return _OPENED[folder]


# ---------------------------------------------------------------- scoring one run with one evaluator


def _samples_sha(run: RunView) -> str:
    """The hash a score is keyed on and read back by (results.files.samples_sha: one definition)."""
    return samples_sha((s.prompt_id, s.sample, s.text) for s in run.samples)


def _protocol(evaluator: Evaluator, run: RunView, config: EvalConfig, reference_protocol: dict | None) -> dict:
    protocol = {
        "evaluator": evaluator.name,
        "metric": evaluator.metric,
        **evaluator.measure_protocol(),
        **evaluator.protocol_extras(),
        "n": len(run.samples),
        "n_prompts": len({s.prompt_id for s in run.samples}),
        "samples_per_prompt": run.config.samples_per_prompt,
        "data": run.config.data.name,
        "samples_sha256": _samples_sha(run),
        "statistics": {
            "ci": "95 % percentile bootstrap over prompts (paired for differences)",
            "bootstrap": _bootstrap_reps(evaluator, config),
            "seed": config.stat_seed,
            "noise_floor": f"AR at seed + {config.floor_seed_offset} against AR, same prompts and N",
        },
        "versions": library_versions(),
    }
    if reference_protocol is not None:
        protocol["reference"] = reference_protocol
    return protocol


def _bootstrap_reps(evaluator: Evaluator, config: EvalConfig) -> int:
    if evaluator.level == "sample":
        return config.bootstrap
    assert isinstance(evaluator, SetMetric)
    own = evaluator.bootstrap_reps()
    if own is not None:
        return own
    return config.toy.bootstrap if evaluator.name.startswith("toy_") else config.inception.bootstrap


def _breakdown(evaluator, run: RunView, vectors: np.ndarray) -> dict:
    """Per-category and per-challenge values when the prompts carry them (PartiPrompts)."""
    out = {}
    for field in ("category", "challenge"):
        labels = [s.meta.get(field) for s in run.samples]
        if all(label is not None for label in labels) and labels:
            table = {}
            for label in sorted({label for label in labels if label is not None}):  # all of them, as checked
                rows = np.asarray([i for i, x in enumerate(labels) if x == label])
                table[label] = {"value": evaluator.aggregate(vectors[rows]), "n": int(len(rows))}
            out[f"by_{field}"] = table
    return out


def _paired(
    statistic: Callable[[np.ndarray], float], prompt_ids: np.ndarray, reps: int, seed: int
) -> tuple[float, list | None]:
    rows = np.arange(len(prompt_ids))
    return float(statistic(rows)), bootstrap_ci(statistic, prompt_groups(prompt_ids), reps, seed)


def _comparisons(
    evaluator: Evaluator, run: RunView, config: EvalConfig, vectors: np.ndarray, reference: np.ndarray | None
) -> tuple[dict | None, dict | None, dict, list[str]]:
    """(paired_vs_ar, noise_floor, extra, pending) from the AR runs' cached vectors."""
    root = run.dir.parent.parent
    reps, seed = _bootstrap_reps(evaluator, config), config.stat_seed
    keys, prompt_ids = run.keys, run.keys[:, 0]
    pending: list[str] = []
    extra: dict = {}

    def vectors_of(found: tuple[str | None, str], what: str) -> np.ndarray | None:
        other_id, why = found
        if other_id == run.run_id:
            return vectors
        if other_id is None:
            pending.append(f"{what}: {why}")
            return None
        try:
            other = _open_run_with_samples(root, other_id)
        except UserError as error:
            pending.append(f"{what}: {error}")
            return None
        missing = {tuple(k) for k in keys.tolist()} - {s.key for s in other.samples}
        if missing:
            pending.append(f"{what}: run {other_id} lacks {len(missing)} of this run's samples (another data.limit?)")
            return None
        twin = type(evaluator)(evaluator.settings, other)
        if twin.measure_protocol() != evaluator.measure_protocol():
            pending.append(f"{what}: run {other_id} is measured differently (another weights dir?)")
            return None
        return cached_vectors(twin, other, keys)

    found_ar, found_floor = comparison_runs(run, config.floor_seed_offset)
    ar_id, floor_id = found_ar[0], found_floor[0]
    ar = vectors_of(found_ar, "paired_vs_ar") if not is_ar_run(run) else vectors
    floor = vectors_of(found_floor, "noise_floor")
    floor_how = (
        f"AR at seed {run.config.seed + config.floor_seed_offset} against AR at seed {run.config.seed}: "
        "same model, prompts, sampling and N; only the seeds differ"
    )

    if evaluator.level == "sample":
        assert isinstance(evaluator, SampleMetric)
        aggregate = evaluator.aggregate
        paired = None
        if ar is not None and not is_ar_run(run):
            delta, ci = _paired(lambda r: aggregate(vectors[r]) - aggregate(ar[r]), prompt_ids, reps, seed)
            paired = {"ar_run_id": ar_id, "delta": delta, "ci95": ci, "n_pairs": int(len(keys))}
        noise = None
        if ar is not None and floor is not None:
            delta, ci = _paired(lambda r: aggregate(floor[r]) - aggregate(ar[r]), prompt_ids, reps, seed)
            noise = {"value": delta, "ci95": ci, "how": f"paired difference {floor_how}", "runs": [ar_id, floor_id]}
        return paired, noise, extra, pending

    assert isinstance(evaluator, SetMetric) and reference is not None
    to_reference = evaluator.reference_distance(reference)  # fast form for the bootstrap resamples

    def headline(v: np.ndarray) -> float:  # the same computation as the score's own value
        return evaluator.distance(v, reference)[0]

    paired = None
    if ar is not None and not is_ar_run(run):
        ar_value = headline(ar)
        groups = prompt_groups(prompt_ids)
        run_part = evaluator.resampled(vectors, reference, to_reference)
        ar_part = evaluator.resampled(ar, reference, to_reference)
        ci = bootstrap_ci(lambda r: run_part(r) - ar_part(r), groups, reps, seed)
        paired = {
            "ar_run_id": ar_id,
            "delta": headline(vectors) - ar_value,
            "ci95": ci,
            "n_pairs": int(len(keys)),
            "ar_value": ar_value,
        }
    noise = None
    if floor is not None:
        extra["vs_ar_other_seed"] = evaluator.distance(vectors, floor)[0]
        if ar is not None:
            noise = {
                "value": evaluator.distance(ar, floor)[0],
                "how": f"{evaluator.name} between the two AR runs, {floor_how}",
                "runs": [ar_id, floor_id],
                "delta_vs_reference": headline(floor) - headline(ar),
                "read": "compare extra.vs_ar_other_seed (this run against the second AR run) with value, and "
                "paired_vs_ar.delta with delta_vs_reference",
            }
    return paired, noise, extra, pending


def score_run(run: RunView, name: str, config: EvalConfig) -> ScoreOutcome:
    """Score one run with one evaluator (resumable: a present, complete score file is returned as is)."""
    evaluator = evaluator_class(name)(config, run)
    try:
        evaluator.check(len(run.samples))
        reference = evaluator.reference() if isinstance(evaluator, SetMetric) else None
        protocol = _protocol(evaluator, run, config, reference.protocol if reference else None)
    except Refused as refusal:
        return ScoreOutcome(run.run_id, name, "refused", message=str(refusal))
    digest = protocol_hash(protocol)
    path = score_path(run.dir, name, digest)
    existing = read_score_file(path)
    schema = existing.get("schema") if existing else None
    if isinstance(schema, int) and schema > SCHEMA:
        message = f"{path} was written by a newer sjdbench (score schema {schema}); upgrade sjdbench, it is left alone"
        return ScoreOutcome(run.run_id, name, "refused", message=message)
    if existing is not None and (schema != SCHEMA or "value" not in existing):
        existing = None  # not a score file this sjdbench wrote: scored again, rewritten
    rewritten = f"{path.name} was unreadable; scored again and rewritten" if path.exists() and not existing else ""
    if existing is not None and not existing.get("pending"):
        return ScoreOutcome(run.run_id, name, "present", path, existing)
    try:
        vectors = cached_vectors(evaluator, run, run.keys)
        paired, noise, compare_extra, pending = _comparisons(
            evaluator, run, config, vectors, reference.vectors if reference else None
        )
    except Refused as refusal:
        return ScoreOutcome(run.run_id, name, "refused", message=str(refusal))
    if existing is not None:  # only the comparisons were missing: the score itself stands
        if existing.get("pending") == pending:
            return ScoreOutcome(run.run_id, name, "present", path, existing)
        doc = {
            **existing,
            "paired_vs_ar": paired,
            "noise_floor": noise,
            "pending": pending,
            "extra": {**existing.get("extra", {}), **compare_extra},
        }
        write_score(path, doc)
        return ScoreOutcome(run.run_id, name, "updated", path, doc)

    doc = {
        "schema": SCHEMA,
        "run_id": run.run_id,
        "evaluator": name,
        "metric": evaluator.metric,
        "lower_is_better": evaluator.lower_is_better,
        "n": len(run.samples),
        "protocol": protocol,
        "protocol_hash": digest,
    }
    if isinstance(evaluator, SetMetric):
        assert reference is not None  # a set metric's reference was read above
        value, extra = evaluator.distance(vectors, reference.vectors)
        doc.update(
            value=float(value),
            ci95=None,
            extra={**extra, "n_reference": int(len(reference.vectors)), "feature_dim": int(vectors.shape[1])},
        )
    else:
        groups = prompt_groups(run.keys[:, 0])
        doc.update(
            value=evaluator.aggregate(vectors),
            ci95=bootstrap_ci(
                lambda rows: evaluator.aggregate(vectors[rows]), groups, config.bootstrap, config.stat_seed
            ),
            per_sample=[
                {"prompt_id": int(p), "sample": int(s), "value": float(v)}
                for (p, s), v in zip(run.keys.tolist(), evaluator.sample_values(vectors))
            ],
            extra={**evaluator.extra(vectors), **_breakdown(evaluator, run, vectors)},
        )
    doc["extra"].update(compare_extra)
    doc.update(
        paired_vs_ar=paired,
        noise_floor=noise,
        pending=pending,
        decoder=run.summary.get("decoder"),
        model=run.config.model.name,
        seed=run.config.seed,
    )
    write_score(path, doc)
    return ScoreOutcome(run.run_id, name, "scored", path, doc, rewritten)


def score(
    run_dirs: list[Path], config: EvalConfig, on_outcome: Callable[[ScoreOutcome], None] | None = None
) -> list[ScoreOutcome]:
    """Score every run with its evaluators; AR runs first, so decoder runs find their comparisons."""
    from sjdbench.eval.evaluators.hashing import env_flag_offline

    env_flag_offline()
    _OPENED.clear()
    _STORES.clear()
    runs = [open_run(d) for d in run_dirs]
    _OPENED.update({run.dir: run for run in runs})  # a run scored here and compared with is read once
    runs.sort(key=lambda r: (not is_ar_run(r), r.run_id))
    outcomes = []
    for run in runs:
        for name in evaluators_for(run, config):
            check_evaluator(name)
            outcome = score_run(run, name, config)
            outcomes.append(outcome)
            if on_outcome:
                on_outcome(outcome)
    return outcomes
