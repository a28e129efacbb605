"""A sweep's plan: the grid declared once (Hydra's override grammar), every point composed and checked
before anything runs, the AR baselines added, what is already done, and which runs go together in
one job. Nothing here decodes; `run.executors` runs the jobs and `run.sweep` drives a sweep.

    sjdbench sweep decoder=sjd,sjd_vp decoder.window=16,32,64 model=toy data=toy
    sjdbench sweep +sweep=window data.limit=8 --dry-run

Every grid point is composed and checked (everything `config.resolve.resolve_run` checks: prompts,
device, weights, sampling ranges, results folder); the AR baseline of every (model, data, seed,
sampling) in the grid is added automatically (needed for speedups). A sweep is keyed by its set of
run ids, so re-running the same command finds the same `sweep.yaml`, skips finished runs, and resumes
partial ones where they stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, cast

import yaml

from sjdbench.config.resolve import ResolvedRun, resolve_run
from sjdbench.config.schema import RunConfig, available_groups, compose_run, group_choices, normalize_overrides
from sjdbench.errors import UserError
from sjdbench.paths import conf_dir
from sjdbench.results.pairing import pair_key
from sjdbench.results.store import atomic_write_text
from sjdbench.run.runner import TIMING_MODES, model_key


@dataclass
class GridPoint:
    overrides: list[str]
    run: ResolvedRun  # the point's run, checked and resolved
    baseline: bool = False  # added automatically as the AR reference
    remote_gpus: Optional[int] = None  # runs as a Slurm job with that many GPUs (device resolved as there)

    @property
    def config(self) -> RunConfig:
        return self.run.config

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def label(self) -> str:
        """The grid point's overrides, as typed."""
        return " ".join(self.overrides) or "(defaults)"

    @property
    def decoder_label(self) -> str:
        """The decoder actually built, named by its preset and the knobs that differ from it."""
        return self.run.label


@dataclass
class SweepPlan:
    sweep_id: str
    points: list[GridPoint]  # never empty: an empty grid is refused
    grid: dict[str, list[str]]
    fixed: list[str]
    directory: Path  # <results>/sweeps/<sweep_id>: sweep.yaml, status.json, latency.json
    timing: Optional[str] = None  # sweep.timing= from the command words; None: the executor's default

    @property
    def root(self) -> Path:
        """The results store every run of the sweep goes to."""
        return self.points[0].run.root


def sweep_presets() -> list[str]:
    folder = conf_dir() / "sweep"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_preset(name: str) -> tuple[dict[str, list[str]], list[str]]:
    """A preset's grid (key -> values) and fixed overrides."""
    path = conf_dir() / "sweep" / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"unknown sweep '{name}'; choose one of: {', '.join(sweep_presets())}")
    preset = yaml.safe_load(path.read_text()) or {}
    grid = {}
    for key, values in (preset.get("grid") or {}).items():
        values = [str(v) for v in (values if isinstance(values, list) else [values])]
        if not values:
            raise UserError(f"sweep preset {name}: {key} lists no value; give it at least one in {path}")
        key = normalize_overrides([f"{key}={values[0]}"])[0].partition("=")[0]  # decoder.verifier -> decoder/verifier
        grid[key] = values
    fixed = [f"{k}={v}" for k, v in (preset.get("fixed") or {}).items()]
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

    Later words win over a preset's settings for the same key. An axis without a value
    (`seed=range(0,0)`) is refused: the grid would be empty and nothing would run.
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
        if not values:
            raise UserError(f"{word} gives no value, so the grid is empty and nothing would run; give it at least one")
        grid[key] = values
    if "results_dir" in {key.lstrip("+") for key in grid}:
        raise UserError(
            "results_dir cannot be a sweep axis: a sweep writes to one store; run one sweep per results_dir"
        )
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
            resolved = resolve_run(compose_run(overrides), remote_gpus)
        except UserError as error:
            errors.append(f"grid point [{' '.join(overrides)}]: {error}")
            return
        if remote_gpus is not None and resolved.config.device == "auto":  # the jobs are told the device
            overrides = [*overrides, f"device={resolved.device}"]
            config = dataclasses.replace(resolved.config, device=resolved.device)
            resolved = dataclasses.replace(resolved, config=config)
        if (resolved.run_id, resolved.config.data.shard) not in seen:
            seen.add((resolved.run_id, resolved.config.data.shard))
            points.append(GridPoint(overrides, resolved, baseline, remote_gpus))

    for combo in itertools.product(*(grid[k] for k in keys)):  # one empty combination without axes
        add([*fixed, *(f"{k}={v}" for k, v in zip(keys, combo))], baseline=False)
    if errors:
        shown = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
        raise UserError(f"{len(errors)} invalid grid point(s), nothing was run: {shown}")
    if add_baselines:
        for point in list(points):
            if not point.run.decoder.is_ar:
                add(_baseline_overrides(point.overrides), baseline=True)
        if errors:
            raise UserError(f"{len(errors)} invalid AR baseline(s), nothing was run: {'; '.join(errors[:3])}")
    sweep_id, directory = sweep_identity(points)
    return SweepPlan(sweep_id, points, grid, fixed, directory, settings.get("timing"))


def sweep_identity(points: list[GridPoint]) -> tuple[str, Path]:
    """(sweep id, folder in the runs' store): a sweep is keyed by its set of runs (and shards)."""
    if not points:
        raise UserError("the grid is empty: nothing would run; give every swept key at least one value")
    keys = sorted(f"{p.run_id}:{p.config.data.shard or ''}" for p in points)
    sweep_id = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
    return sweep_id, points[0].run.root / "sweeps" / sweep_id


def with_noise_floor_runs(sweep: SweepPlan, seed_offset: int) -> SweepPlan:
    """The sweep plus, for each AR run in it, the AR run at seed + seed_offset (same everything
    else): the second AR run a quality score's noise floor is read against (results.pairing)."""
    points = list(sweep.points)
    seen = {(p.run_id, p.config.data.shard) for p in points}
    for point in sweep.points:
        if not point.run.decoder.is_ar:
            continue
        overrides = [w for w in point.overrides if w.partition("=")[0].lstrip("+") != "seed"]
        overrides.append(f"seed={point.config.seed + seed_offset}")
        resolved = resolve_run(compose_run(overrides), point.remote_gpus)
        if (resolved.run_id, resolved.config.data.shard) not in seen:
            seen.add((resolved.run_id, resolved.config.data.shard))
            points.append(GridPoint(overrides, resolved, baseline=True, remote_gpus=point.remote_gpus))
    sweep_id, directory = sweep_identity(points)
    return dataclasses.replace(sweep, sweep_id=sweep_id, points=points, directory=directory)


def run_status(point: GridPoint) -> str:
    """done | partial | todo for the point's prompt selection, from the store alone (no model loaded)."""
    wanted = point.run.wanted_keys
    store = point.run.store
    have = len(store.done_keys() & wanted)
    if have == len(wanted) and not store.needs_metadata():  # damaged metadata: the run rewrites it
        return "done"
    return "partial" if have else "todo"


def write_plan(sweep: SweepPlan, executor: str, timing: str) -> None:
    """sweep.yaml in the sweep's folder of its store: the grid and its runs."""
    doc = {
        "sweep_id": sweep.sweep_id,
        "executor": executor,
        "timing": timing,
        "grid": sweep.grid,
        "fixed": sweep.fixed,
        "runs": [{"run_id": p.run_id, "overrides": p.overrides, "baseline": p.baseline} for p in sweep.points],
    }
    atomic_write_text(sweep.directory / "sweep.yaml", yaml.safe_dump(doc, sort_keys=False))


# -- jobs: which runs go together ---------------------------------------------------------------------


def job_key(run: ResolvedRun) -> str:
    """Runs timed side by side in one paired job: those compared with each other (one pairing key,
    results.pairing), on one loaded model with one thread setting, and of one shard."""
    return yaml.safe_dump(
        {
            "pair": pair_key(run.facts),
            "model": model_key(run),
            "threads": run.config.threads,
            "shard": run.config.data.shard,
        }
    )


def make_jobs(points: list[GridPoint], timing: str, one_per_point: bool) -> list[list[GridPoint]]:
    """paired: one job per compared group (AR baseline first); single: one job per model (local,
    so weights load once) or per point (cluster executors, for parallelism)."""
    if timing == "single" and one_per_point:
        return [[point] for point in points]
    key = job_key if timing == "paired" else model_key
    jobs: dict[str, list[GridPoint]] = {}
    for point in points:
        jobs.setdefault(key(point.run), []).append(point)
    ordered = [sorted(job, key=lambda p: not p.run.decoder.is_ar) for job in jobs.values()]
    return sorted(ordered, key=lambda job: model_key(job[0].run))  # jobs of one model in a row


def points_to_run(sweep: SweepPlan, timing: str) -> list[GridPoint]:
    """The points not done yet; paired, the whole group of such a point, as one job (its runs that are
    done decode nothing and report as done)."""
    todo = [point for point in sweep.points if run_status(point) != "done"]
    if todo and timing == "paired":
        todo_keys = {job_key(p.run) for p in todo}
        todo = [p for p in sweep.points if job_key(p.run) in todo_keys]
    return todo
