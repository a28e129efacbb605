"""Sweeps: a grid of runs declared once (Hydra's override grammar), validated up front, run by an
executor (local, submitit/Slurm, Ray), resumable at the run and prompt level.

    sjdbench sweep decoder=sjd,sjd_vp decoder.window=16,32,64 model=toy data=toy
    sjdbench sweep +sweep=window data.limit=8 --dry-run

Every grid point is composed and checked (everything `config.resolve.resolve_run` checks: prompts,
device, weights, sampling ranges, results folder) before anything runs; the AR baseline of every
(model, data, seed, sampling) in the grid is added automatically (needed for speedups). A sweep is
keyed by its set of run ids, so re-running the same command finds the same `sweep.yaml`, skips
finished runs, and resumes partial ones where they stopped.

Timing (`--timing` or `sweep.timing=`): `paired` (the local default) decodes the runs that share a
model and prompt selection (each decoder and its AR baseline) prompt by prompt, interleaved in one
process, like `make bench`, so their latency ratios come from the same machine state; `single`
runs one run after another (the default for submitit and Ray, whose jobs are separate runs). A
paired group is one job on every executor. `latency_comparisons` pairs rows by timing session and
says when a ratio is not paired; the speedups themselves are results.pairing's, over the store,
as `sjdbench report` prints them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import shutil
import subprocess
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, cast

import yaml

from sjdbench.config.resolve import ResolvedRun, resolve_run
from sjdbench.config.schema import RunConfig, available_groups, compose_run, group_choices, normalize_overrides
from sjdbench.errors import UserError
from sjdbench.machine import apply_threads
from sjdbench.paths import conf_dir
from sjdbench.results.pairing import pair_key
from sjdbench.results.root import results_root
from sjdbench.results.runs import speedups
from sjdbench.results.store import RunLocked, RunStore, atomic_write_json, atomic_write_text
from sjdbench.run.reporting import Reporter
from sjdbench.run.runner import TIMING_MODES, RunOutcome, execute_runs, load_adapter, write_summary

log = logging.getLogger(__name__)
EXECUTORS = ("local", "submitit", "ray")
SUBMITIT_CLUSTERS = ("slurm", "local", "debug")


@dataclass
class GridPoint:
    overrides: list[str]
    spec: ResolvedRun  # the point's run, checked and resolved
    baseline: bool = False  # added automatically as the AR reference
    remote_gpus: Optional[int] = None  # runs as a Slurm job with that many GPUs (device resolved as there)

    @property
    def config(self) -> RunConfig:
        return self.spec.config

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def label(self) -> str:
        """The grid point's overrides, as typed."""
        return " ".join(self.overrides) or "(defaults)"

    @property
    def decoder_label(self) -> str:
        """The decoder actually built, named by its preset and the knobs that differ from it."""
        return self.spec.label


@dataclass
class SweepPlan:
    sweep_id: str
    points: list[GridPoint]
    grid: dict[str, list[str]]
    fixed: list[str]
    directory: Path = field(default=Path("."))
    timing: Optional[str] = None  # sweep.timing= from the command words; None: the executor's default


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


def split_sweep_settings(words: list[str]) -> tuple[list[str], dict[str, str]]:
    """Words that configure the sweep itself (`sweep.timing=paired`) apart from the grid's words."""
    settings, rest = {}, []
    for word in words:
        key, eq, value = word.partition("=")
        if eq and key.startswith("sweep."):
            name = key[len("sweep.") :]
            if name != "timing":
                raise UserError(
                    f"unknown sweep setting {key}; the one setting is sweep.timing=<{'|'.join(TIMING_MODES)}>"
                )
            if value not in TIMING_MODES:
                raise UserError(f"unknown sweep.timing '{value}'; choose one of: {', '.join(TIMING_MODES)}")
            settings[name] = value
        else:
            rest.append(word)
    return rest, settings


def parse_words(words: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Split command words into sweep axes (key -> values) and fixed overrides, presets expanded.

    Later words win over a preset's settings for the same key.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob, ValueType
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
        if isinstance(override.value(), list) and key.lstrip("+") in available_groups():
            several = word.partition("=")[2].strip("[]")
            raise UserError(
                f"{word}: a list picks one config group several times; to sweep over them write "
                f"{key.lstrip('+')}={several} (no brackets)"
            )
        if not override.is_sweep_override():
            grid.pop(key, None)
            fixed[key] = word.partition("=")[2]
            continue
        fixed.pop(key, None)
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            group = override.key_or_group
            values = cast(Glob, override.value()).filter(group_choices(group))  # a glob sweep's value is a Glob
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


def build_plan(words: list[str], add_baselines: bool = True, remote_gpus: Optional[int] = None) -> SweepPlan:
    """Expand the grid, compose and validate every point (nothing runs if any point is invalid).

    remote_gpus: the runs execute as Slurm jobs with that many GPUs each, so `device=auto` means
    what it will mean there; it is pinned in the job's overrides."""
    words, settings = split_sweep_settings(words)
    grid, fixed = parse_words(words)
    keys = list(grid)
    points: list[GridPoint] = []
    seen: set[tuple[str, str | None]] = set()  # (run_id, shard): shards of one run are separate jobs
    errors = []

    def add(overrides: list[str], baseline: bool) -> None:
        try:
            spec = resolve_run(compose_run(overrides), remote_gpus)
        except UserError as error:
            errors.append(f"grid point [{' '.join(overrides)}]: {error}")
            return
        if remote_gpus is not None and spec.config.device == "auto":  # the jobs are told the device
            overrides = [*overrides, f"device={spec.device}"]
            spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, device=spec.device))
        if (spec.run_id, spec.config.data.shard) not in seen:
            seen.add((spec.run_id, spec.config.data.shard))
            points.append(GridPoint(overrides, spec, baseline, remote_gpus))

    combos = list(itertools.product(*(grid[k] for k in keys))) if keys else [()]
    for combo in combos:
        add([*fixed, *(f"{k}={v}" for k, v in zip(keys, combo))], baseline=False)
    if errors:
        shown = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
        raise UserError(f"{len(errors)} invalid grid point(s), nothing was run: {shown}")
    if add_baselines:
        for point in list(points):
            if not point.spec.decoder.is_ar:
                add(_baseline_overrides(point.overrides), baseline=True)
        if errors:
            raise UserError(f"{len(errors)} invalid AR baseline(s), nothing was run: {'; '.join(errors[:3])}")
    sweep_id, directory = sweep_identity(points)
    return SweepPlan(sweep_id, points, grid, fixed, directory, settings.get("timing"))


def sweep_identity(points: list[GridPoint]) -> tuple[str, Path]:
    """(sweep id, folder): a sweep is keyed by its set of runs (and shards)."""
    keys = sorted(f"{p.run_id}:{p.config.data.shard or ''}" for p in points)
    sweep_id = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
    root = points[0].spec.root if points else results_root()
    return sweep_id, root / "sweeps" / sweep_id


def run_status(point: GridPoint) -> str:
    """done | partial | todo for the point's prompt selection, from the store alone (no model loaded)."""
    wanted = point.spec.wanted_keys
    store = RunStore(point.spec.root, point.run_id)
    have = len(store.done_keys() & wanted)
    if have == len(wanted) and not store.needs_metadata():  # damaged metadata: the run rewrites it
        return "done"
    return "partial" if have else "todo"


def write_plan(sweep: SweepPlan, executor: str, timing: str) -> None:
    doc = {
        "sweep_id": sweep.sweep_id,
        "executor": executor,
        "timing": timing,
        "grid": sweep.grid,
        "fixed": sweep.fixed,
        "runs": [{"run_id": p.run_id, "overrides": p.overrides, "baseline": p.baseline} for p in sweep.points],
    }
    atomic_write_text(sweep.directory / "sweep.yaml", yaml.safe_dump(doc, sort_keys=False))


def run_job(job: list[list[str]], timing: str) -> list[dict]:
    """Top-level and picklable: what a submitit/Ray worker executes for one job (runs of one model,
    paired or one after another)."""
    outcomes = run_group([resolve_run(compose_run(words)) for words in job], timing, {})
    return [{"run_id": o.run_id, "status": o.status, "error": o.error, "new_samples": o.new_samples} for o in outcomes]


def _model_key(spec: ResolvedRun) -> str:
    """Runs that can share one loaded model."""
    config = spec.config
    return yaml.safe_dump({"name": config.model.name, "options": dict(config.model.options), "device": spec.device})


def _job_key(spec: ResolvedRun) -> str:
    """Runs timed side by side in one paired job: those compared with each other (one pairing key,
    results.pairing), on one loaded model with one thread setting, and of one shard."""
    return yaml.safe_dump(
        {
            "pair": pair_key(spec.facts),
            "model": _model_key(spec),
            "threads": spec.config.threads,
            "shard": spec.config.data.shard,
        }
    )


def run_group(
    specs: list[ResolvedRun], timing: str, adapters: dict, reporter: Optional[Reporter] = None
) -> list[RunOutcome]:
    """Runs of one model: paired (interleaved prompt by prompt) or one after another. `adapters`
    caches loaded models by model key across groups; a failed run never stops the others."""
    key = _model_key(specs[0])
    needed = any(spec.wanted_keys - spec.store().done_keys() or spec.store().needs_metadata() for spec in specs)
    if key not in adapters and needed:
        adapters.clear()  # one model in memory at a time
        apply_threads(specs[0].config.threads, specs[0].device)
        adapters[key] = load_adapter(specs[0], reporter or Reporter())
    adapter = adapters.get(key)
    if timing == "paired":
        if reporter is not None:
            reporter.begin(f"{specs[0].config.model.name} / paired: " + ", ".join(spec.label for spec in specs))
        return execute_runs(specs, adapter, reporter, timing_mode="paired", keep_going=True)
    outcomes = []
    for spec in specs:
        try:
            if reporter is not None:
                reporter.begin(f"{spec.config.model.name} / {spec.label}")
            outcomes += execute_runs([spec], adapter, reporter, timing_mode="single")
        except RunLocked as error:  # another process writes this run: skipped, the others go on
            if reporter is not None:
                reporter.note(f"skipped: {error}")
            outcomes.append(RunOutcome(spec.run_id, str(spec.store().dir), "skipped", {}, 0, str(error)))
        except Exception as error:  # noqa: BLE001 - record and go on with the sweep
            log.debug("run %s failed:\n%s", spec.run_id, traceback.format_exc())
            outcomes.append(
                RunOutcome(spec.run_id, str(spec.store().dir), "failed", {}, 0, f"{type(error).__name__}: {error}")
            )
    return outcomes


@dataclass
class PointResult:
    run_id: str
    status: str  # done (was already, or nothing was missing) | finished | partial | failed | skipped | merged
    error: Optional[str] = None
    seconds: float = 0.0


Tick = Callable[[PointResult], None]


def make_jobs(points: list[GridPoint], timing: str, one_per_point: bool) -> list[list[GridPoint]]:
    """paired: one job per compared group (AR baseline first); single: one job per model (local,
    so weights load once) or per point (cluster executors, for parallelism)."""
    if timing == "single" and one_per_point:
        return [[point] for point in points]
    key = _job_key if timing == "paired" else _model_key
    jobs: dict[str, list[GridPoint]] = {}
    for point in points:
        jobs.setdefault(key(point.spec), []).append(point)
    ordered = [sorted(job, key=lambda p: not p.spec.decoder.is_ar) for job in jobs.values()]
    return sorted(ordered, key=lambda job: _model_key(job[0].spec))  # jobs of one model in a row


def _job_results(job: list[GridPoint], outcomes: list[dict], seconds: float) -> list[PointResult]:
    results = []
    for point, outcome in zip(job, outcomes):
        error = outcome.get("error")
        if outcome.get("run_id") and outcome["run_id"] != point.run_id:  # the worker resolved something else
            error = (
                f"ran as {outcome['run_id']}, not the planned {point.run_id} "
                "(the worker resolved the device or weights differently)"
            )
            results.append(PointResult(point.run_id, "failed", error, seconds))
        else:
            results.append(PointResult(point.run_id, outcome["status"], error, seconds))
    return results


def _failed(job: list[GridPoint], error: BaseException | str, seconds: float = 0.0) -> list[PointResult]:
    if isinstance(error, BaseException):
        text = str(error).strip()
        error = text.splitlines()[-1] if text else type(error).__name__
    return [PointResult(point.run_id, "failed", error, seconds) for point in job]


def run_local(
    jobs: list[list[GridPoint]], tick: Tick, timing: str, reporter: Optional[Reporter] = None
) -> list[PointResult]:
    """Jobs in this process, one model loaded at a time; a failure never stops the rest."""
    adapters: dict  # loaded adapters, reused by the jobs of the same model (run_group)
    results, adapters = [], {}
    for job in jobs:
        start = time.perf_counter()
        try:
            outcomes = run_group([p.spec for p in job], timing, adapters, reporter)
            done = _job_results(job, [dataclasses.asdict(o) for o in outcomes], time.perf_counter() - start)
        except Exception as error:  # noqa: BLE001 - record and go on with the sweep
            log.debug("job failed:\n%s", traceback.format_exc())
            done = _failed(job, f"{type(error).__name__}: {error}", time.perf_counter() - start)
        for result in done:
            results.append(result)
            tick(result)
    return results


def check_slurm(partition: Optional[str]) -> None:
    """Refuse (one line) when no Slurm answers here, or the partition does not exist."""
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if missing:
        raise UserError(
            f"no Slurm reachable from this machine ({' and '.join(missing)} not found); run here with "
            "--executor local, or test the job array with --executor submitit --cluster local"
        )
    if shutil.which("sinfo") is None:
        return
    try:
        answer = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        raise UserError(f"Slurm does not answer (sinfo: {error}); use --executor local") from None
    if answer.returncode != 0:
        reason = (answer.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise UserError(f"Slurm does not answer (sinfo: {reason}); use --executor local")
    partitions = [p.strip().rstrip("*") for p in answer.stdout.split() if p.strip()]
    if partition and partitions and partition not in partitions:
        raise UserError(f"unknown Slurm partition '{partition}'; choose one of: {', '.join(partitions)}")


def submitit_parameters(cluster: str, slurm: dict) -> dict:
    """What reaches each job: the time limit and GPUs per job everywhere (local jobs get
    CUDA_VISIBLE_DEVICES), plus partition, CPUs and array parallelism on Slurm."""
    params = {
        "timeout_min": slurm.get("timeout_min", 240),
        "gpus_per_node": slurm.get("gpus_per_task", 1),
        "tasks_per_node": 1,
    }
    if cluster == "slurm":
        params.update(
            slurm_array_parallelism=slurm.get("array_parallelism", 64), cpus_per_task=slurm.get("cpus_per_task", 8)
        )
        if slurm.get("partition"):
            params["slurm_partition"] = slurm["partition"]
    return params


def submitit_executor(folder: Path, cluster: Optional[str], slurm: dict):
    """A submitit executor that does what it says: Slurm unless told otherwise, never a silent
    fallback to this machine."""
    try:
        import submitit
    except ImportError:
        raise UserError("the submitit executor needs submitit: pip install 'sjdbench[slurm]'") from None
    cluster = cluster or "slurm"
    if cluster not in SUBMITIT_CLUSTERS:
        raise UserError(f"unknown --cluster '{cluster}'; choose one of: {', '.join(SUBMITIT_CLUSTERS)}")
    if cluster == "slurm":
        check_slurm(slurm.get("partition"))
    elif slurm.get("partition"):
        raise UserError(
            f"--partition is a Slurm setting; with --cluster {cluster} the jobs run on this machine (drop --partition)"
        )
    executor = submitit.AutoExecutor(folder=str(folder / "submitit" / "%j"), cluster=cluster)
    executor.update_parameters(**submitit_parameters(cluster, slurm))
    return executor


def job_words(job: list[GridPoint]) -> list[list[str]]:
    """The overrides a worker composes, with the results folder made absolute: a job on another
    machine or in another working directory writes to the same store."""
    return [[*p.overrides, f"results_dir={p.spec.root.resolve()}"] for p in job]


def run_submitit(jobs: list[list[GridPoint]], tick: Tick, executor, timing: str) -> list[PointResult]:
    """One job array: one task per job (GPUs per task on Slurm); cluster='local' runs on this machine."""
    submitted = executor.map_array(run_job, [job_words(job) for job in jobs], [timing] * len(jobs))
    results = []
    for job, handle in zip(jobs, submitted):
        start = time.perf_counter()
        try:
            done = _job_results(job, handle.result(), time.perf_counter() - start)
        except Exception as error:  # noqa: BLE001
            done = _failed(job, error)
        for result in done:
            results.append(result)
            tick(result)
    return results


def run_ray(jobs: list[list[GridPoint]], tick: Tick, gpus_per_task: float, timing: str) -> list[PointResult]:
    try:
        import ray
    except ImportError:
        raise UserError("the ray executor needs ray: pip install 'sjdbench[ray]'") from None
    if not ray.is_initialized():
        ray.init(log_to_driver=False)
    available = ray.cluster_resources().get("GPU", 0)
    if gpus_per_task > available:
        raise UserError(
            f"--gpus-per-task {gpus_per_task:g} but the Ray cluster has {available:g} GPU(s); "
            "pass --gpus-per-task 0 for CPU runs"
        )
    remote = ray.remote(num_gpus=gpus_per_task)(run_job)
    pending = {remote.remote(job_words(job), timing): job for job in jobs}
    results = []
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        job = pending.pop(ready[0])
        try:
            done = _job_results(job, ray.get(ready[0]), 0.0)
        except Exception as error:  # noqa: BLE001
            done = _failed(job, error)
        for result in done:
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
        checked = resolve_run(whole, shards[0].remote_gpus)
        store = RunStore(checked.root, run_id)
        if checked.wanted_keys <= store.done_keys():
            write_summary(checked, store)
            merged.append(PointResult(run_id, "merged"))
    return merged


def default_timing(executor: str) -> str:
    """Paired where runs share a process anyway (local); single on cluster executors."""
    return "paired" if executor == "local" else "single"


def execute_sweep(
    sweep: SweepPlan,
    executor: str = "local",
    tick: Tick | None = None,
    cluster: Optional[str] = None,
    slurm: dict | None = None,
    timing: Optional[str] = None,
    reporter: Optional[Reporter] = None,
) -> list[PointResult]:
    """Run every point not already done; record outcomes in the sweep folder's status.json and the
    latency comparisons in latency.json. `reporter` hears the progress of local runs."""
    if executor not in EXECUTORS:
        raise UserError(f"unknown executor '{executor}'; choose one of: {', '.join(EXECUTORS)}")
    timing = timing or sweep.timing or default_timing(executor)
    if timing not in TIMING_MODES:
        raise UserError(f"unknown timing '{timing}'; choose one of: {', '.join(TIMING_MODES)}")
    slurm = slurm or {}
    submitter = submitit_executor(sweep.directory, cluster, slurm) if executor == "submitit" else None
    write_plan(sweep, executor, timing)
    tick = tick or (lambda result: None)
    results: list[PointResult] = []
    todo = [point for point in sweep.points if run_status(point) != "done"]
    if todo and timing == "paired":  # a paired group also times the runs of the group that are done
        todo_keys = {_job_key(p.spec) for p in todo}
        todo = [p for p in sweep.points if _job_key(p.spec) in todo_keys]
    for point in sweep.points:  # each point is counted once: done now, or when its job reports
        if point not in todo:
            result = PointResult(point.run_id, "done")
            results.append(result)
            tick(result)
    if todo:
        jobs = make_jobs(todo, timing, one_per_point=executor != "local")
        if executor == "local":
            results += run_local(jobs, tick, timing, reporter)
        elif executor == "submitit":
            results += run_submitit(jobs, tick, submitter, timing)
        else:
            results += run_ray(jobs, tick, slurm.get("gpus_per_task", 1), timing)
    results += merge_shards(sweep, results)
    status = {r.run_id: {"status": r.status, "error": r.error, "seconds": round(r.seconds, 3)} for r in results}
    atomic_write_json(sweep.directory / "status.json", status)
    atomic_write_json(sweep.directory / "latency.json", latency_comparisons(sweep))
    return results


def latency_comparisons(sweep: SweepPlan) -> dict[str, dict]:
    """Per decoder run of the sweep that has an AR baseline in the store: its speedup (results.pairing:
    geometric mean over prompts of paired AR/decoder latency ratios, bootstrap 95 % CI, N prompts),
    and how far to trust it: `paired` when every compared sample of the two runs was timed in the
    same session (interleaved), else the ratio mixes machine states (the CLI marks it); samples
    timed on a busy machine are counted."""
    decoders = [p for p in sweep.points if not p.spec.decoder.is_ar]
    if not decoders:
        return {}
    pairings = speedups(sweep.points[0].spec.root, [p.run_id for p in decoders])
    out = {}
    for point in decoders:
        pairing = pairings.get(point.run_id)
        if pairing is None or pairing["speedup"] is None:
            continue
        lo, hi = pairing["speedup_lo"], pairing["speedup_hi"]
        out[point.run_id] = {
            "baseline": pairing["ar_run_id"],
            "decoder": point.decoder_label,
            "speedup": float(pairing["speedup"]),
            "ci95": [float(lo), float(hi)] if lo is not None and hi is not None else None,
            "n_prompts": int(pairing["speedup_n"]),
            "paired": bool(pairing["paired"]),
            **{key: int(pairing[key]) for key in ("paired_samples", "samples", "busy_samples")},
        }
    return out


def with_noise_floor_runs(sweep: SweepPlan, seed_offset: int) -> SweepPlan:
    """The sweep plus, for each AR run in it, the AR run at seed + seed_offset (same everything
    else): the second AR run a quality score's noise floor is read against (results.pairing)."""
    points = list(sweep.points)
    seen = {(p.run_id, p.config.data.shard) for p in points}
    for point in sweep.points:
        if not point.spec.decoder.is_ar:
            continue
        overrides = [w for w in point.overrides if w.partition("=")[0].lstrip("+") != "seed"]
        overrides.append(f"seed={point.config.seed + seed_offset}")
        spec = resolve_run(compose_run(overrides), point.remote_gpus)
        if (spec.run_id, spec.config.data.shard) not in seen:
            seen.add((spec.run_id, spec.config.data.shard))
            points.append(GridPoint(overrides, spec, baseline=True, remote_gpus=point.remote_gpus))
    sweep_id, directory = sweep_identity(points)
    return dataclasses.replace(sweep, sweep_id=sweep_id, points=points, directory=directory)
