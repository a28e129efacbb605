"""Sweeps: a grid of runs declared once (Hydra's override grammar), validated up front, run by an
executor (local, submitit/Slurm, Ray), resumable at the run and prompt level.

    sjdbench sweep decoder=sjd,sjd_vp decoder.window=16,32,64 model=toy data=toy
    sjdbench sweep +sweep=window data.limit=8 --dry-run

Every grid point is composed and validated before anything runs; the AR baseline of every
(model, data, seed, sampling) in the grid is added automatically (needed for speedups). A sweep is
keyed by its set of run ids, so re-running the same command finds the same `sweep.yaml`, skips
finished runs, and resumes partial ones where they stopped.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import yaml

from sjdbench.config import RunConfig, compose_run, group_choices, normalize_overrides, results_root
from sjdbench.errors import UserError
from sjdbench.paths import conf_dir
from sjdbench.runner import RunOutcome, execute, plan
from sjdbench.store import RunStore, atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)
EXECUTORS = ("local", "submitit", "ray")


@dataclass
class GridPoint:
    overrides: list[str]
    config: RunConfig
    run_id: str
    baseline: bool = False  # added automatically as the AR reference

    @property
    def label(self) -> str:
        """The grid point's overrides, as typed."""
        return " ".join(self.overrides) or "(defaults)"

    @property
    def decoder_label(self) -> str:
        """The decoder actually built, named by its preset and the knobs that differ from it."""
        from sjdbench.identity import label

        return label(self.config)


@dataclass
class SweepPlan:
    sweep_id: str
    points: list[GridPoint]
    grid: dict[str, list[str]]
    fixed: list[str]
    directory: Path = field(default=Path("."))


def sweep_presets() -> list[str]:
    folder = conf_dir() / "sweep"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_preset(name: str) -> tuple[dict[str, list[str]], list[str]]:
    """A preset's grid (key -> values) and fixed overrides."""
    path = conf_dir() / "sweep" / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"unknown sweep '{name}'; choose one of: {', '.join(sweep_presets())}")
    spec = yaml.safe_load(path.read_text()) or {}
    grid = {}
    for key, values in (spec.get("grid") or {}).items():
        values = [str(v) for v in (values if isinstance(values, list) else [values])]
        key = normalize_overrides([f"{key}={values[0]}"])[0].partition("=")[0]  # decoder.verifier -> decoder/verifier
        grid[key] = values
    fixed = [f"{k}={v}" for k, v in (spec.get("fixed") or {}).items()]
    return grid, fixed


def parse_words(words: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Split command words into sweep axes (key -> values) and fixed overrides, presets expanded.

    Later words win over a preset's settings for the same key.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    grid: dict[str, list[str]] = {}
    fixed: dict[str, str] = {}
    user_words = []
    for word in normalize_overrides(words):
        key, _, value = word.partition("=")
        if key.lstrip("+") == "sweep":
            preset_grid, preset_fixed = load_preset(value)
            grid.update(preset_grid)
            for item in normalize_overrides(preset_fixed):
                k, _, v = item.partition("=")
                fixed[k] = v
        else:
            user_words.append(word)
    try:
        parsed = OverridesParser.create().parse_overrides(user_words)
    except HydraException as error:
        raise UserError(f"cannot parse sweep overrides: {str(error).splitlines()[0]}") from None
    for override, word in zip(parsed, user_words):
        key = word.partition("=")[0]
        if not override.is_sweep_override():
            grid.pop(key, None)
            fixed[key] = word.partition("=")[2]
            continue
        fixed.pop(key, None)
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            group = override.key_or_group
            values = override.value().filter(group_choices(group))
            if not values:
                raise UserError(f"{word} matches no {group}; choices: {', '.join(group_choices(group))}")
        elif override.value_type == ValueType.INTERVAL_SWEEP:
            raise UserError(f"{word}: interval() is continuous; use a list, range() or choice()")
        else:
            values = list(override.sweep_string_iterator())
        grid[key] = values
    return grid, [f"{k}={v}" for k, v in fixed.items()]


def _baseline_overrides(point: list[str]) -> list[str]:
    """The same point with the decoder replaced by AR (decoder parameters dropped)."""
    kept = [w for w in point if not w.lstrip("+~").startswith("decoder")]
    return [*kept, "decoder=ar"]


def build_plan(words: list[str], add_baselines: bool = True) -> SweepPlan:
    """Expand the grid, compose and validate every point (nothing runs if any point is invalid)."""
    grid, fixed = parse_words(words)
    keys = list(grid)
    points: list[GridPoint] = []
    seen: set[tuple[str, str | None]] = set()  # (run_id, shard): shards of one run are separate jobs
    errors = []

    def add(overrides: list[str], baseline: bool) -> None:
        try:
            config = compose_run(overrides)
            run_id = plan(config)[0]
        except UserError as error:
            errors.append(f"grid point [{' '.join(overrides)}]: {error}")
            return
        if (run_id, config.data.shard) not in seen:
            seen.add((run_id, config.data.shard))
            points.append(GridPoint(overrides, config, run_id, baseline))

    combos = list(itertools.product(*(grid[k] for k in keys))) if keys else [()]
    for combo in combos:
        add([*fixed, *(f"{k}={v}" for k, v in zip(keys, combo))], baseline=False)
    if errors:
        shown = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
        raise UserError(f"{len(errors)} invalid grid point(s), nothing was run: {shown}")
    if add_baselines:
        for point in list(points):
            if point.config.decoder.window != 1:
                add(_baseline_overrides(point.overrides), baseline=True)
    sweep_id, directory = sweep_identity(points)
    return SweepPlan(sweep_id, points, grid, fixed, directory)


def sweep_identity(points: list[GridPoint]) -> tuple[str, Path]:
    """(sweep id, folder): a sweep is keyed by its set of runs (and shards)."""
    keys = sorted(f"{p.run_id}:{p.config.data.shard or ''}" for p in points)
    sweep_id = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
    root = results_root(points[0].config) if points else Path("results")
    return sweep_id, root / "sweeps" / sweep_id


def run_status(point: GridPoint) -> str:
    """done | partial | todo, from the store alone (no model loaded)."""
    _, prompts, _, _ = plan(point.config)
    store = RunStore(results_root(point.config), point.run_id)
    summary = store.summary()
    wanted = len(prompts) * point.config.samples_per_prompt
    have = len(store.done_keys() & {(p.prompt_id, s) for p in prompts for s in range(point.config.samples_per_prompt)})
    sharded = point.config.data.shard is not None  # a shard writes no summary; its rows are its status
    # a summary written for another prompt selection (data.limit) is rewritten, not reported
    summarised = bool(summary and summary.get("complete") and summary.get("n_wanted") == wanted)
    if have == wanted and (sharded or summarised):
        return "done"
    return "partial" if have else "todo"


def write_plan(sweep: SweepPlan, executor: str) -> None:
    doc = {
        "sweep_id": sweep.sweep_id,
        "executor": executor,
        "grid": sweep.grid,
        "fixed": sweep.fixed,
        "runs": [{"run_id": p.run_id, "overrides": p.overrides, "baseline": p.baseline} for p in sweep.points],
    }
    atomic_write_text(sweep.directory / "sweep.yaml", yaml.safe_dump(doc, sort_keys=False))


def run_point(overrides: list[str]) -> dict:
    """Top-level and picklable: what a submitit/Ray worker executes for one grid point."""
    outcome = execute(compose_run(overrides))
    return {"run_id": outcome.run_id, "status": outcome.status, "new_samples": outcome.new_samples}


@dataclass
class PointResult:
    run_id: str
    status: str  # done (was already) | finished | partial | failed
    error: Optional[str] = None
    seconds: float = 0.0


Tick = Callable[[PointResult], None]


def _model_key(config: RunConfig) -> str:
    return yaml.safe_dump({"name": config.model.name, "options": dict(config.model.options), "device": config.device})


def run_local(points: list[GridPoint], tick: Tick) -> list[PointResult]:
    """Sequential, grouped by model so each model's weights load once; a failure never stops the rest."""
    from sjdbench.models.registry import build_adapter, resolve_device

    results = []
    groups: dict[str, list[GridPoint]] = {}
    for point in points:
        groups.setdefault(_model_key(point.config), []).append(point)
    for group in groups.values():
        adapter = None
        for point in group:
            start = time.perf_counter()
            try:
                if adapter is None:
                    cfg = point.config
                    adapter = build_adapter(cfg.model.name, dict(cfg.model.options), resolve_device(cfg.device))
                outcome: RunOutcome = execute(point.config, adapter=adapter)
                result = PointResult(point.run_id, outcome.status, seconds=time.perf_counter() - start)
            except Exception as error:  # noqa: BLE001 - record and go on with the sweep
                log.debug("run %s failed:\n%s", point.run_id, traceback.format_exc())
                result = PointResult(point.run_id, "failed", f"{type(error).__name__}: {error}", time.perf_counter() - start)
            results.append(result)
            tick(result)
    return results


def run_submitit(points: list[GridPoint], tick: Tick, folder: Path, cluster: Optional[str], slurm: dict) -> list[PointResult]:
    """One job array: one task per run (GPU per task on Slurm); cluster='local' runs on this machine."""
    try:
        import submitit
    except ImportError:
        raise UserError("the submitit executor needs submitit: pip install 'sjdbench[slurm]'") from None
    executor = submitit.AutoExecutor(folder=str(folder / "submitit" / "%j"), cluster=cluster)
    params = {"timeout_min": slurm.get("timeout_min", 240)}
    if executor.cluster == "slurm":
        params.update(
            slurm_array_parallelism=slurm.get("array_parallelism", 64),
            gpus_per_node=slurm.get("gpus_per_task", 1),
            tasks_per_node=1,
            cpus_per_task=slurm.get("cpus_per_task", 8),
        )
        if slurm.get("partition"):
            params["slurm_partition"] = slurm["partition"]
    executor.update_parameters(**params)
    jobs = executor.map_array(run_point, [p.overrides for p in points])
    results = []
    for point, job in zip(points, jobs):
        start = time.perf_counter()
        try:
            info = job.result()
            result = PointResult(point.run_id, info["status"], seconds=time.perf_counter() - start)
        except Exception as error:  # noqa: BLE001
            last = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            result = PointResult(point.run_id, "failed", last)
        results.append(result)
        tick(result)
    return results


def run_ray(points: list[GridPoint], tick: Tick, gpus_per_task: float) -> list[PointResult]:
    try:
        import ray
    except ImportError:
        raise UserError("the ray executor needs ray: pip install 'sjdbench[ray]'") from None
    if not ray.is_initialized():
        ray.init()
    remote = ray.remote(num_gpus=gpus_per_task)(run_point)
    pending = {remote.remote(p.overrides): p for p in points}
    results = []
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        point = pending.pop(ready[0])
        try:
            result = PointResult(point.run_id, ray.get(ready[0])["status"])
        except Exception as error:  # noqa: BLE001
            result = PointResult(point.run_id, "failed", f"{type(error).__name__}: {error}")
        results.append(result)
        tick(result)
    return results


def merge_shards(sweep: SweepPlan, results: list[PointResult]) -> list[PointResult]:
    """Once every shard of a run has finished, write the run's summary over all its prompts.

    The unsharded run reads every shard's rows (merged by prompt id), so nothing is decoded again.
    """
    merged = []
    failed = {r.run_id for r in results if r.status == "failed"}
    by_run: dict[str, list[GridPoint]] = {}
    for point in sweep.points:
        if point.config.data.shard is not None:
            by_run.setdefault(point.run_id, []).append(point)
    for run_id, shards in by_run.items():
        if run_id in failed:
            continue
        whole = dataclasses.replace(shards[0].config, data=dataclasses.replace(shards[0].config.data, shard=None))
        _, prompts, _, _ = plan(whole)
        store = RunStore(results_root(whole), run_id)
        wanted = {(p.prompt_id, s) for p in prompts for s in range(whole.samples_per_prompt)}
        if wanted <= store.done_keys():
            outcome = execute(whole)
            merged.append(PointResult(run_id, "merged" if outcome.new_samples == 0 else outcome.status))
    return merged


def execute_sweep(sweep: SweepPlan, executor: str = "local", tick: Tick | None = None, cluster: Optional[str] = None,
                  slurm: dict | None = None) -> list[PointResult]:
    """Run every point not already done; record outcomes in the sweep folder's status.json."""
    if executor not in EXECUTORS:
        raise UserError(f"unknown executor '{executor}'; choose one of: {', '.join(EXECUTORS)}")
    write_plan(sweep, executor)
    tick = tick or (lambda result: None)
    results: list[PointResult] = []
    todo = []
    for point in sweep.points:
        if run_status(point) == "done":
            result = PointResult(point.run_id, "done")
            results.append(result)
            tick(result)
        else:
            todo.append(point)
    if todo:
        if executor == "local":
            results += run_local(todo, tick)
        elif executor == "submitit":
            results += run_submitit(todo, tick, sweep.directory, cluster, slurm or {})
        else:
            results += run_ray(todo, tick, (slurm or {}).get("gpus_per_task", 1))
    results += merge_shards(sweep, results)
    status = {r.run_id: {"status": r.status, "error": r.error, "seconds": round(r.seconds, 3)} for r in results}
    atomic_write_json(sweep.directory / "status.json", status)
    return results
