"""Sweeps: a plan (run.plan: the grid, every point checked before anything runs, what is done) run by
an executor (run.executors: local, submitit/Slurm, Ray), resumable at the run and prompt level.

    plan = build_plan(["decoder=sjd,sjd_vp", "decoder.window=16,32"])
    outcome = execute_sweep(plan, Cluster("local"))

Timing (`--timing` or `sweep.timing=`): `paired` (the local default) decodes the runs that share a
model and prompt selection (each decoder and its AR baseline) prompt by prompt, interleaved in one
process, like `make bench`, so their latency ratios come from the same machine state; `single`
runs one run after another (the default for submitit and Ray, whose jobs are separate runs). A
paired group is one job on every executor. `latency_comparisons` says per decoder run when a ratio
is not paired; the speedups themselves are results.pairing's, over the store, as `sjdbench report`
prints them, computed once per sweep.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from sjdbench.config.resolve import resolve_run
from sjdbench.errors import UserError
from sjdbench.results.runs import speedups
from sjdbench.results.store import atomic_write_json
from sjdbench.run.executors import Cluster, PointResult, Tick, run_local, run_ray, run_submitit, submitit_executor
from sjdbench.run.plan import GridPoint, SweepPlan, make_jobs, points_to_run, write_plan
from sjdbench.run.reporting import Reporter
from sjdbench.run.runner import TIMING_MODES, write_summary


@dataclass
class SweepOutcome:
    """What a sweep did and what its runs show."""

    results: list[PointResult]  # each point once, plus one `merged` per sharded run whose shards are all done
    pairings: dict[str, dict[str, Any]] = field(default_factory=dict)  # run_id -> results.runs.speedups' row
    comparisons: dict[str, dict] = field(default_factory=dict)  # latency.json: `latency_comparisons`


def default_timing(executor: str) -> str:
    """Paired where runs share a process anyway (local); single on cluster executors."""
    return "paired" if executor == "local" else "single"


def execute_sweep(
    sweep: SweepPlan,
    cluster: Cluster | None = None,
    tick: Tick | None = None,
    timing: Optional[str] = None,
    reporter: Optional[Reporter] = None,
) -> SweepOutcome:
    """Run every point not already done; record outcomes in the sweep folder's status.json and the
    latency comparisons in latency.json. `reporter` hears the progress of local runs."""
    cluster = cluster or Cluster()
    timing = timing or sweep.timing or default_timing(cluster.executor)
    if timing not in TIMING_MODES:
        raise UserError(f"unknown timing '{timing}'; choose one of: {', '.join(TIMING_MODES)}")
    gpus = cluster.gpus(sweep.points)
    submitter = submitit_executor(sweep.directory, cluster, gpus) if cluster.executor == "submitit" else None
    write_plan(sweep, cluster.executor, timing)
    tick = tick or (lambda result: None)
    results: list[PointResult] = []
    todo = points_to_run(sweep, timing)
    for point in sweep.points:  # each point is counted once: done now, or when its job reports
        if point not in todo:
            result = PointResult(point.run_id, "done")
            results.append(result)
            tick(result)
    if todo:
        jobs = make_jobs(todo, timing, one_per_point=cluster.executor != "local")
        if cluster.executor == "local":
            results += run_local(jobs, tick, timing, reporter)
        elif cluster.executor == "submitit":
            results += run_submitit(jobs, tick, submitter, timing)
        else:
            results += run_ray(jobs, tick, gpus, timing)
    results += merge_shards(sweep, results)
    status = {r.run_id: {"status": r.status, "error": r.error, "seconds": round(r.seconds, 3)} for r in results}
    atomic_write_json(sweep.directory / "status.json", status)
    pairings = speedups(sweep.root, [p.run_id for p in sweep.points])
    comparisons = latency_comparisons(sweep, pairings)
    atomic_write_json(sweep.directory / "latency.json", comparisons)
    return SweepOutcome(results, pairings, comparisons)


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
        unsharded = resolve_run(whole, shards[0].remote_gpus)
        if unsharded.wanted_keys <= unsharded.store.done_keys():
            write_summary(unsharded, unsharded.store)
            merged.append(PointResult(run_id, "merged"))
    return merged


def latency_comparisons(sweep: SweepPlan, pairings: dict[str, dict[str, Any]]) -> dict[str, dict]:
    """Per decoder run of the sweep that has an AR baseline in the store: its speedup (results.pairing:
    geometric mean over prompts of paired AR/decoder latency ratios, bootstrap 95 % CI, N prompts),
    and how far to trust it: `paired` when every compared sample of the two runs was timed in the
    same session (interleaved), else the ratio mixes machine states (the CLI marks it); samples
    timed on a busy machine are counted. `pairings`: the sweep's runs' (results.runs.speedups)."""
    out = {}
    for point in sweep.points:
        pairing = pairings.get(point.run_id)
        if point.run.decoder.is_ar or pairing is None or pairing["speedup"] is None:
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
