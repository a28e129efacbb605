"""Where a sweep's jobs run: in this process (`local`), as a submitit job array (Slurm, or submitit's
local and debug clusters), or as Ray tasks. A job is a list of grid points of one model (run.plan
groups them); every executor reports each point's outcome as a `PointResult`, and a failed job never
stops the others.

`Cluster` holds the policy of what each job gets (GPUs, CPUs, time limit, partition), so the command
line only passes on what it was told: on Slurm a job gets 1 GPU unless told otherwise, and its runs
resolve `device=auto` as the GPU node will; elsewhere a job gets a GPU when one of its runs uses
CUDA. A submitit executor is Slurm unless told otherwise, and refuses when no Slurm answers, never
silently falling back to this machine.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import subprocess
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from sjdbench.config.resolve import ResolvedRun, resolve_run
from sjdbench.config.schema import compose_run
from sjdbench.errors import UserError, check_at_least
from sjdbench.results.store import RunLocked
from sjdbench.run.plan import GridPoint
from sjdbench.run.reporting import Reporter
from sjdbench.run.runner import LoadedModel, RunOutcome, execute_runs

log = logging.getLogger(__name__)

EXECUTORS = ("local", "submitit", "ray")
SUBMITIT_CLUSTERS = ("slurm", "local", "debug")


@dataclass(frozen=True)
class Cluster:
    """Where a sweep's jobs run and what each job gets."""

    executor: str = "local"  # local | submitit | ray
    cluster: Optional[str] = None  # submitit: slurm (the default) | local | debug (both on this machine)
    partition: Optional[str] = None  # Slurm only
    gpus_per_task: Optional[int] = None  # None: 1 on Slurm; elsewhere 1 when a run uses CUDA, else 0
    cpus_per_task: int = 8  # Slurm
    timeout_min: int = 240  # per job (Slurm, submitit local)
    array_parallelism: int = 64  # Slurm array tasks at once

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise UserError(f"unknown executor '{self.executor}'; choose one of: {', '.join(EXECUTORS)}")
        if self.executor == "submitit" and (self.cluster or "slurm") not in SUBMITIT_CLUSTERS:
            raise UserError(f"unknown --cluster '{self.cluster}'; choose one of: {', '.join(SUBMITIT_CLUSTERS)}")
        counts = {
            "--gpus-per-task": (self.gpus_per_task, 0),
            "--cpus-per-task": (self.cpus_per_task, 1),
            "--timeout-min": (self.timeout_min, 1),
            "--array-parallelism": (self.array_parallelism, 1),
        }
        for option, (value, least) in counts.items():
            check_at_least(option, value, least)

    @property
    def on_slurm(self) -> bool:
        return self.executor == "submitit" and (self.cluster or "slurm") == "slurm"

    @property
    def remote_gpus(self) -> Optional[int]:
        """GPUs of each job when the jobs run on Slurm nodes, whose devices a plan resolves as there
        (run.plan.build_plan); None: the jobs run on this machine."""
        if not self.on_slurm:
            return None
        return 1 if self.gpus_per_task is None else self.gpus_per_task

    def gpus(self, points: list[GridPoint]) -> int:
        """GPUs per job: as given; else 1 on Slurm or when a run uses CUDA here, else 0."""
        if self.gpus_per_task is not None:
            return self.gpus_per_task
        cuda = any(p.run.device.startswith("cuda") for p in points)
        return 1 if self.on_slurm or cuda else 0


@dataclass
class PointResult:
    run_id: str
    status: str  # done (was already, or nothing was missing) | finished | partial | failed | skipped | merged
    error: Optional[str] = None
    seconds: float = 0.0


Tick = Callable[[PointResult], None]


# -- one job: runs of one model, in whatever process executes it ------------------------------------


def run_group(
    runs: list[ResolvedRun], timing: str, loaded: LoadedModel, reporter: Optional[Reporter] = None
) -> list[RunOutcome]:
    """Runs of one model: paired (interleaved prompt by prompt) or one after another. `loaded` keeps
    the model across groups (one in memory at a time); a failed run never stops the others."""
    if timing == "paired":
        if reporter is not None:
            reporter.begin(f"{runs[0].model.name} / paired: " + ", ".join(run.label for run in runs))
        return execute_runs(runs, None, reporter, timing_mode="paired", keep_going=True, loaded=loaded)
    outcomes = []
    for run in runs:
        try:
            if reporter is not None:
                reporter.begin(f"{run.model.name} / {run.label}")
            outcomes += execute_runs([run], None, reporter, timing_mode="single", loaded=loaded)
        except RunLocked as error:  # another process writes this run: skipped, the others go on
            if reporter is not None:
                reporter.note(f"skipped: {error}")
            outcomes.append(RunOutcome(run.run_id, str(run.store.dir), "skipped", {}, 0, str(error)))
        except Exception as error:  # noqa: BLE001 - record and go on with the sweep
            log.debug("run %s failed:\n%s", run.run_id, traceback.format_exc())
            outcomes.append(
                RunOutcome(run.run_id, str(run.store.dir), "failed", {}, 0, f"{type(error).__name__}: {error}")
            )
    return outcomes


def run_job(job: list[list[str]], timing: str) -> list[dict]:
    """Top-level and picklable: what a submitit/Ray worker executes for one job (runs of one model,
    paired or one after another), from each run's overrides."""
    outcomes = run_group([resolve_run(compose_run(words)) for words in job], timing, LoadedModel())
    return [{"run_id": o.run_id, "status": o.status, "error": o.error, "new_samples": o.new_samples} for o in outcomes]


def job_words(job: list[GridPoint]) -> list[list[str]]:
    """The overrides a worker composes, with the results folder made absolute: a job on another
    machine or in another working directory writes to the same store."""
    return [[*p.overrides, f"results_dir={p.run.root.resolve()}"] for p in job]


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


def _collect(job: list[GridPoint], outcomes: Callable[[], list[dict]], tick: Tick, timed: bool) -> list[PointResult]:
    """A remote job's results, waiting for its `outcomes` (timed from here when `timed`); an executor
    that fails to hand them back fails the job's points. Each result is ticked as it comes."""
    start = time.perf_counter()
    try:
        done = _job_results(job, outcomes(), time.perf_counter() - start if timed else 0.0)
    except Exception as error:  # noqa: BLE001
        done = _failed(job, error)
    for result in done:
        tick(result)
    return done


# -- local -------------------------------------------------------------------------------------------


def run_local(
    jobs: list[list[GridPoint]], tick: Tick, timing: str, reporter: Optional[Reporter] = None
) -> list[PointResult]:
    """Jobs in this process, one model loaded at a time; a failure never stops the rest."""
    results: list[PointResult] = []
    loaded = LoadedModel()  # reused by the jobs of the same model
    for job in jobs:
        start = time.perf_counter()
        try:
            outcomes = run_group([p.run for p in job], timing, loaded, reporter)
            done = _job_results(job, [dataclasses.asdict(o) for o in outcomes], time.perf_counter() - start)
        except Exception as error:  # noqa: BLE001 - record and go on with the sweep
            log.debug("job failed:\n%s", traceback.format_exc())
            done = _failed(job, f"{type(error).__name__}: {error}", time.perf_counter() - start)
        for result in done:
            results.append(result)
            tick(result)
    return results


# -- submitit (Slurm) --------------------------------------------------------------------------------


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


def submitit_parameters(cluster: Cluster, gpus: int) -> dict:
    """What reaches each job: the time limit and GPUs per job everywhere (local jobs get
    CUDA_VISIBLE_DEVICES), plus partition, CPUs and array parallelism on Slurm."""
    params: dict[str, Any] = {"timeout_min": cluster.timeout_min, "gpus_per_node": gpus, "tasks_per_node": 1}
    if cluster.on_slurm:
        params.update(slurm_array_parallelism=cluster.array_parallelism, cpus_per_task=cluster.cpus_per_task)
        if cluster.partition:
            params["slurm_partition"] = cluster.partition
    return params


def submitit_executor(folder: Path, cluster: Cluster, gpus: int) -> Any:
    """A submitit executor that does what it says: Slurm unless told otherwise, never a silent
    fallback to this machine."""
    try:
        import submitit
    except ImportError:
        raise UserError("the submitit executor needs submitit: pip install 'sjdbench[slurm]'") from None
    name = cluster.cluster or "slurm"
    if cluster.on_slurm:
        check_slurm(cluster.partition)
    elif cluster.partition:
        raise UserError(
            f"--partition is a Slurm setting; with --cluster {name} the jobs run on this machine (drop --partition)"
        )
    executor = submitit.AutoExecutor(folder=str(folder / "submitit" / "%j"), cluster=name)
    executor.update_parameters(**submitit_parameters(cluster, gpus))
    return executor


def run_submitit(jobs: list[list[GridPoint]], tick: Tick, executor: Any, timing: str) -> list[PointResult]:
    """One job array: one task per job (GPUs per task on Slurm); cluster='local' runs on this machine."""
    submitted = executor.map_array(run_job, [job_words(job) for job in jobs], [timing] * len(jobs))
    results = []
    for job, handle in zip(jobs, submitted):
        results += _collect(job, handle.result, tick, timed=True)
    return results


# -- Ray ---------------------------------------------------------------------------------------------


def start_ray() -> Any:
    """Ray, started here when no cluster is connected yet, with its own INFO lines silenced (the
    sweep prints its progress; Ray's warnings and errors still show)."""
    try:
        import ray
    except ImportError:
        raise UserError("the ray executor needs ray: pip install 'sjdbench[ray]'") from None
    if not ray.is_initialized():
        ray.init(log_to_driver=False, logging_level=logging.WARNING, include_dashboard=False)
    return ray


def run_ray(jobs: list[list[GridPoint]], tick: Tick, gpus_per_task: float, timing: str) -> list[PointResult]:
    ray = start_ray()
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
        results += _collect(pending.pop(ready[0]), functools.partial(ray.get, ready[0]), tick, timed=False)
    return results
