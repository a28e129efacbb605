"""Sweeps: grid expansion, validation before running, idempotence, resume, executors, sharding, paired timing."""

import json
import os
from pathlib import Path

import pytest
import yaml

from sjdbench.config import compose_run
from sjdbench.errors import UserError
from sjdbench.results.store import RunStore, read_jsonl
from sjdbench.run.executors import Cluster
from sjdbench.run.plan import build_plan, parse_words, run_status
from sjdbench.run.runner import execute
from sjdbench.run.sweep import execute_sweep

SMALL = ["model=debug", "model.options.grid_h=3", "model.options.grid_w=3", "warmup=0", "save_images=false"]


def words(tmp_path, *extra):
    """The sweep's words: the small defaults, each key once (a key given twice is refused)."""
    limit = [] if any(w.startswith("data.limit=") for w in extra) else ["data.limit=2"]
    return [*SMALL, f"results_dir={tmp_path}", *limit, *extra]


def test_grid_expansion_grammar():
    grid, fixed = parse_words(
        ["decoder=sjd,sjd_vp", "decoder.window=range(16,65,16)", "seed=choice(0,1)", "data=smoke"]
    )
    assert grid == {"decoder": ["sjd", "sjd_vp"], "decoder.window": ["16", "32", "48", "64"], "seed": ["0", "1"]}
    assert fixed == ["data=smoke"]
    grid, _ = parse_words(["decoder=glob(sjd*)"])
    assert grid["decoder"] == ["sjd", "sjd_adt", "sjd_pac", "sjd_pp", "sjd_pv", "sjd_vp"]


@pytest.mark.slow  # about 13 s: composes every preset
def test_presets_expand_and_user_words_win():
    grid, fixed = parse_words(["+sweep=window", "decoder.window=8"])
    assert grid == {"decoder": ["sjd", "sjd_vp"]} and "decoder.window=8" in fixed
    grid, fixed = parse_words(["+sweep=growth_steps"])
    assert grid == {"decoder.growth_steps": ["1", "2", "3", "4"]} and "decoder=sjd_vp" in fixed
    for preset in ("decoders", "window", "growth_steps", "fusion"):
        assert build_plan([f"+sweep={preset}", "model=debug"]).points


def test_product_plus_ar_baseline(tmp_path):
    plan = build_plan(words(tmp_path, "decoder=sjd,sjd_vp", "decoder.window=2,4"))
    assert len(plan.points) == 5
    baselines = [p for p in plan.points if p.baseline]
    assert len(baselines) == 1 and baselines[0].config.decoder.name == "ar"
    two_seeds = build_plan(words(tmp_path, "decoder=sjd", "seed=0,1"))
    assert sum(p.baseline for p in two_seeds.points) == 2  # one AR per seed


def test_invalid_point_rejected_before_anything_runs(tmp_path):
    with pytest.raises(UserError, match=r"invalid grid point.*decoder.window must be >= 1"):
        build_plan(words(tmp_path, "decoder=sjd", "decoder.window=0,4"))
    with pytest.raises(UserError, match="unknown sweep 'nope'"):
        build_plan(["+sweep=nope"])
    with pytest.raises(UserError, match="unknown decoder"):
        build_plan(words(tmp_path, "decoder=sjd,bogus"))
    assert not (tmp_path / "runs").exists()


def test_sweep_runs_then_second_invocation_runs_nothing(tmp_path):
    plan = build_plan(words(tmp_path, "decoder=sjd,sjd_vp", "decoder.window=2"))
    first = execute_sweep(plan).results
    assert sorted(r.status for r in first) == ["finished"] * 3
    doc = yaml.safe_load((plan.directory / "sweep.yaml").read_text())
    assert {r["run_id"] for r in doc["runs"]} == {p.run_id for p in plan.points}
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/samples.jsonl")}
    second = execute_sweep(build_plan(words(tmp_path, "decoder=sjd,sjd_vp", "decoder.window=2"))).results
    assert [r.status for r in second] == ["done"] * 3
    assert mtimes == {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/samples.jsonl")}


def test_interrupted_sweep_resumes_losing_and_repeating_nothing(tmp_path):
    plan = build_plan(words(tmp_path, "decoder=sjd,jacobi", "decoder.window=3"))
    # simulate a kill: the first run is half done, the others not started
    execute(plan.points[0].config, limit_new=1)
    assert run_status(plan.points[0]) == "partial"
    results = execute_sweep(plan).results
    assert all(r.status in ("finished",) for r in results)
    for point in plan.points:
        ids = [r["prompt_id"] for r in RunStore(tmp_path, point.run_id).rows()]
        assert ids == [0, 1]


@pytest.mark.parametrize("timing", ["single", "paired"])
def test_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch, timing):
    from sjdbench.run.runner import RunWriter

    plan = build_plan(words(tmp_path, "decoder=sjd,sjd_vp", "decoder.window=2"))
    real = RunWriter.decode

    def flaky(self, keys):
        if self.spec.config.decoder.name == "sjd_vp":
            raise RuntimeError("out of memory")
        return real(self, keys)

    monkeypatch.setattr(RunWriter, "decode", flaky)
    results = execute_sweep(plan, timing=timing).results
    statuses = {r.run_id: r.status for r in results}
    assert sorted(statuses.values()) == ["failed", "finished", "finished"]
    status_file = json.loads((plan.directory / "status.json").read_text())
    assert any("out of memory" in (v["error"] or "") for v in status_file.values())


@pytest.mark.slow  # about 13 s: two submitit processes
def test_submitit_local_executor_runs_two_jobs(tmp_path):
    pytest.importorskip("submitit")
    plan = build_plan(words(tmp_path, "decoder=sjd", "decoder.window=2"))
    assert len(plan.points) == 2
    results = execute_sweep(plan, Cluster("submitit", "local", timeout_min=10)).results
    assert sorted(r.status for r in results) == ["finished", "finished"], [r.error for r in results]
    for point in plan.points:
        assert run_status(point) == "done" and RunStore(tmp_path, point.run_id).summary()["n_samples"] == 2


def test_sharded_run_merges_to_the_unsharded_rows(tmp_path):
    base = [*SMALL, "data.limit=5", "decoder=sjd", "decoder.window=3"]
    for i in range(2):
        execute(compose_run([*base, f"results_dir={tmp_path / 'sharded'}", f"data.shard={i}/2"]))
    merged = execute(compose_run([*base, f"results_dir={tmp_path / 'sharded'}"]))
    assert merged.new_samples == 0 and merged.status == "done" and merged.summary["n_samples"] == 5
    single = execute(compose_run([*base, f"results_dir={tmp_path / 'single'}"]))

    def strip(rows):
        return [{k: v for k, v in r.items() if k not in ("latency_s", "machine", "timing", "stream")} for r in rows]  # noqa: E731

    sharded_rows = RunStore(tmp_path / "sharded", merged.run_id).rows()
    single_rows = RunStore(tmp_path / "single", single.run_id).rows()
    assert merged.run_id == single.run_id
    assert strip(sharded_rows) == strip(single_rows)
    shard_files = sorted(p.name for p in Path(merged.run_dir).glob("samples*.jsonl"))
    assert shard_files == ["samples.0of2.jsonl", "samples.1of2.jsonl"]
    assert len(read_jsonl(Path(merged.run_dir) / "samples.0of2.jsonl")) == 3


def test_sweep_over_shards_runs_them_as_jobs_and_merges(tmp_path):
    plan = build_plan(
        words(tmp_path, "decoder=sjd", "decoder.window=3", "data.limit=4", "data.shard=0/2,1/2"), add_baselines=False
    )
    assert len(plan.points) == 2 and plan.points[0].run_id == plan.points[1].run_id
    results = execute_sweep(plan).results
    assert sorted(r.status for r in results) == ["finished", "finished", "merged"]
    summary = RunStore(tmp_path, plan.points[0].run_id).summary()
    assert summary["n_samples"] == 4 and not summary["complete"]  # 4 of smoke's 8 prompts
    again = execute_sweep(
        build_plan(
            words(tmp_path, "decoder=sjd", "decoder.window=3", "data.limit=4", "data.shard=0/2,1/2"),
            add_baselines=False,
        )
    ).results
    assert [r.status for r in again if r.status != "merged"] == ["done", "done"]


def test_summary_reports_every_row_present_after_a_smaller_limit(tmp_path):
    """A run of 4 prompts re-run with data.limit=2 is done for that selection, and its summary still
    covers all 4 rows present (of the set's 8), never only the last command's 2."""
    execute(compose_run([*SMALL, f"results_dir={tmp_path}", "data.limit=4", "decoder=sjd", "decoder.window=3"]))
    plan = build_plan(words(tmp_path, "decoder=sjd", "decoder.window=3"), add_baselines=False)  # data.limit=2
    results = execute_sweep(plan).results
    assert [r.status for r in results] == ["done"]  # nothing decoded
    summary = RunStore(tmp_path, plan.points[0].run_id).summary()
    assert (summary["n_samples"], summary["n_wanted"], summary["complete"]) == (4, 8, False)
    again = execute(compose_run([*SMALL, f"results_dir={tmp_path}", "data.limit=2", "decoder=sjd", "decoder.window=3"]))
    assert again.status == "done" and again.summary["n_samples"] == 4
    full = execute(compose_run([*SMALL, f"results_dir={tmp_path}", "decoder=sjd", "decoder.window=3"]))
    assert full.status == "finished" and full.new_samples == 4 and full.summary["complete"] is True


# -- executors that do what they say -----------------------------------------------------------------


def fake_slurm(folder: Path, partitions: str = "gpu*\\ncpu", sinfo_code: int = 0) -> str:
    """A PATH with stand-ins for srun, sbatch and sinfo (sinfo prints `partitions`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("srun", "sbatch"):
        (folder / tool).write_text("#!/bin/sh\nexit 0\n")
    (folder / "sinfo").write_text(
        f"#!/bin/sh\nprintf '{partitions}\\n'\n"
        if sinfo_code == 0
        else f"#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit {sinfo_code}\n"
    )
    for tool in ("srun", "sbatch", "sinfo"):
        (folder / tool).chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_submitit_without_slurm_refuses_in_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sjdbench.cli import app

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sbatch, no srun
    result = CliRunner().invoke(
        app, ["sweep", *words(tmp_path, "decoder=sjd"), "--executor", "submitit", "--partition", "gpu"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "error: no Slurm reachable from this machine (sbatch and srun not found); run here with --executor "
        "local, or test the job array with --executor submitit --cluster local"
    ]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "sweeps").exists()  # nothing ran, nothing written


def test_slurm_that_does_not_answer_or_lacks_the_partition_is_refused(tmp_path, monkeypatch):
    from sjdbench.run.executors import check_slurm

    monkeypatch.setenv("PATH", fake_slurm(tmp_path / "down", sinfo_code=1))
    with pytest.raises(UserError, match=r"Slurm does not answer \(sinfo: slurm_load_partitions: Unable to contact"):
        check_slurm("gpu")
    monkeypatch.setenv("PATH", fake_slurm(tmp_path / "up"))
    check_slurm("gpu")
    with pytest.raises(UserError, match="unknown Slurm partition 'gpus'; choose one of: gpu, cpu"):
        check_slurm("gpus")


def test_partition_and_gpu_count_reach_the_slurm_job(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    from sjdbench.run.executors import submitit_executor

    monkeypatch.setenv("PATH", fake_slurm(tmp_path / "bin"))
    cluster = Cluster(
        "submitit", partition="gpu", gpus_per_task=2, timeout_min=30, cpus_per_task=6, array_parallelism=4
    )
    executor = submitit_executor(tmp_path, cluster, cluster.gpus([]))
    assert executor.cluster == "slurm"
    script = executor._executor._make_submission_file_text(
        "python -m job", "uid"
    )  # the sbatch file submitit would submit
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --gpus-per-node=2",
        "#SBATCH --cpus-per-task=6",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=30",
    ):
        assert line in script, line


def test_submitit_local_jobs_get_the_gpu_count_and_refuse_a_partition(tmp_path):
    pytest.importorskip("submitit")
    from sjdbench.run.executors import submitit_executor

    local = submitit_executor(tmp_path, Cluster("submitit", "local", gpus_per_task=2, timeout_min=5), 2)
    assert local.cluster == "local" and local._executor.parameters["gpus_per_node"] == 2  # -> CUDA_VISIBLE_DEVICES=0,1
    with pytest.raises(
        UserError, match="--partition is a Slurm setting; with --cluster local the jobs run on this machine"
    ):
        submitit_executor(tmp_path, Cluster("submitit", "local", partition="gpu"), 0)
    with pytest.raises(UserError, match="unknown --cluster 'pbs'; choose one of: slurm, local, debug"):
        Cluster("submitit", "pbs")


def test_submitit_debug_executor_runs_a_paired_job(tmp_path):
    pytest.importorskip("submitit")
    plan = build_plan(words(tmp_path, "decoder=sjd", "decoder.window=2"))
    results = execute_sweep(plan, Cluster("submitit", "debug", gpus_per_task=0), timing="paired").results
    assert sorted(r.status for r in results) == ["finished", "finished"], [r.error for r in results]
    sessions = {RunStore(tmp_path, p.run_id).rows()[0]["timing"]["session"] for p in plan.points}
    assert len(sessions) == 1  # AR and SJD were timed side by side in one job


@pytest.mark.slow
def test_ray_executor_runs_the_sweep(tmp_path):
    ray = pytest.importorskip("ray")
    plan = build_plan(words(tmp_path, "decoder=sjd", "decoder.window=2"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(UserError, match="--gpus-per-task 1 but the Ray cluster has 0 GPU"):
            execute_sweep(plan, Cluster("ray", gpus_per_task=1))
        results = execute_sweep(plan, Cluster("ray", gpus_per_task=0)).results
    finally:
        ray.shutdown()
    assert sorted(r.status for r in results) == ["finished", "finished"], [r.error for r in results]
    assert all(run_status(p) == "done" for p in plan.points)
    assert {RunStore(tmp_path, p.run_id).rows()[0]["timing"]["mode"] for p in plan.points} == {"single"}


# -- paired timing -----------------------------------------------------------------------------------


def test_paired_timing_interleaves_ar_and_each_decoder_prompt_by_prompt(tmp_path, monkeypatch):
    from sjdbench.run.runner import RunWriter

    order = []
    real = RunWriter.decode

    def recording(self, keys):
        order.extend((prompt.prompt_id, self.spec.config.decoder.name) for prompt, _ in keys)
        return real(self, keys)

    monkeypatch.setattr(RunWriter, "decode", recording)
    plan = build_plan(words(tmp_path, "decoder=sjd,lantern", "decoder.window=3", "sweep.timing=paired"))
    assert plan.timing == "paired"
    outcome = execute_sweep(plan, Cluster("local"))
    assert sorted(r.status for r in outcome.results) == ["finished"] * 3
    assert order == [(0, "ar"), (0, "sjd"), (0, "lantern"), (1, "ar"), (1, "sjd"), (1, "lantern")]
    rows = {p.config.decoder.name: RunStore(tmp_path, p.run_id).rows() for p in plan.points}
    assert {r["timing"]["mode"] for rs in rows.values() for r in rs} == {"paired"}
    assert len({r["timing"]["session"] for rs in rows.values() for r in rs}) == 1
    comparisons = outcome.comparisons
    assert sorted(c["decoder"] for c in comparisons.values()) == ["lantern", "sjd"]
    for entry in comparisons.values():
        assert entry["paired"] and entry["paired_samples"] == entry["samples"] == 2 and entry["speedup"] > 0
    saved = json.loads((plan.directory / "latency.json").read_text())
    assert saved == json.loads(json.dumps(comparisons))


def test_unpaired_latencies_are_flagged(tmp_path):
    plan = build_plan(words(tmp_path, "decoder=sjd", "decoder.window=3"))
    comparisons = execute_sweep(plan, timing="single").comparisons
    (entry,) = comparisons.values()
    assert entry["paired"] is False and entry["paired_samples"] == 0 and entry["samples"] == 2


def test_bad_timing_words_are_refused():
    with pytest.raises(UserError, match="unknown sweep.timing 'both'; choose one of: single, paired"):
        build_plan(["model=debug", "sweep.timing=both"])
    with pytest.raises(UserError, match="unknown sweep setting sweep.executor"):
        build_plan(["model=debug", "sweep.executor=ray"])


def test_slurm_jobs_resolve_the_device_as_their_gpu_nodes_will(tmp_path):
    """Planned on a login node without GPUs, `device=auto` means cuda for jobs that get a GPU: the
    planned run ids are those the jobs will write, and the jobs are told the device explicitly."""
    import torch

    from sjdbench.config.identity import run_id_for

    plan = build_plan(words(tmp_path, "decoder=sjd"), remote_gpus=1)
    for point in plan.points:
        assert "device=cuda" in point.overrides and point.config.device == "cuda"
        assert point.run_id == run_id_for(point.config, plan_sha(point), "cuda")
    cpu_jobs = build_plan(words(tmp_path, "decoder=sjd"), remote_gpus=0)
    assert all("device=cpu" in p.overrides for p in cpu_jobs.points)
    with pytest.raises(UserError, match="device=cuda but the jobs get no GPU"):
        build_plan(words(tmp_path, "decoder=sjd", "device=cuda"), remote_gpus=0)
    if not torch.cuda.is_available():  # here, locally, cuda is refused; for the jobs it is fine
        with pytest.raises(UserError, match="no CUDA device is visible"):
            build_plan(words(tmp_path, "decoder=sjd", "device=cuda"))
        assert build_plan(words(tmp_path, "decoder=sjd", "device=cuda"), remote_gpus=1).points


def plan_sha(point) -> str:
    from sjdbench.data.prompts import load_prompt_set

    return load_prompt_set(point.config.data).sha


# -- the command line: read once, refuse an empty grid, quiet executors --------------------------------


def test_a_sweep_computes_its_speedups_once(tmp_path, monkeypatch):
    """latency.json, the printed table and its marks all come from one pairing of the store's runs."""
    from typer.testing import CliRunner

    import sjdbench.results.runs as runs_module
    from sjdbench.cli import app

    calls = []
    real = runs_module.pair_all

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runs_module, "pair_all", counting)
    result = CliRunner().invoke(app, ["sweep", *words(tmp_path, "decoder=sjd,lantern", "decoder.window=3")])
    assert result.exit_code == 0, result.output
    assert "vs AR" in result.stdout and len(calls) == 1


def test_an_empty_grid_is_refused_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sjdbench.cli import app

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)  # where ./results would be
    store = tmp_path / "store"
    for grid in (["seed=range(0,0)"], ["decoder=sjd", "decoder.window=range(4,2)"]):
        result = CliRunner().invoke(app, ["sweep", *SMALL, f"results_dir={store}", *grid])
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert result.stderr.strip().splitlines() == [
            f"error: {grid[-1]} gives no value, so the grid is empty and nothing would run; give it at least one"
        ]
    assert not (here / "results").exists() and not store.exists()
    with pytest.raises(UserError, match="results_dir cannot be a sweep axis"):
        parse_words([f"results_dir={tmp_path / 'a'},{tmp_path / 'b'}"])


def test_ray_is_started_without_its_info_lines(monkeypatch):
    """Ray's own INFO lines ("Started a local Ray instance") would interleave with the sweep's."""
    import logging
    import sys
    import types

    from sjdbench.run.executors import start_ray

    started = {}
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=lambda **kwargs: started.update(kwargs))
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert start_ray() is fake
    assert started["logging_level"] == logging.WARNING and started["log_to_driver"] is False


@pytest.mark.slow
def test_a_ray_sweep_prints_no_ray_info_lines(tmp_path):
    pytest.importorskip("ray")
    import subprocess
    import sys

    command = [sys.executable, "-m", "sjdbench", "sweep", *words(tmp_path, "decoder=sjd", "decoder.window=2")]
    result = subprocess.run(
        [*command, "--executor", "ray", "--gpus-per-task", "0"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert not [line for line in result.stderr.splitlines() if " INFO " in line], result.stderr


def test_what_a_job_gets_is_checked_before_anything_is_planned(tmp_path):
    from typer.testing import CliRunner

    from sjdbench.cli import app

    cases = [
        (["--executor", "slurm"], "unknown executor 'slurm'; choose one of: local, submitit, ray"),
        (["--executor", "ray", "--gpus-per-task", "-1"], "--gpus-per-task must be >= 0, got -1"),
        (["--executor", "submitit", "--cluster", "pbs"], "unknown --cluster 'pbs'; choose one of: slurm, local, debug"),
        (["--timeout-min", "0"], "--timeout-min must be >= 1, got 0"),
    ]
    for options, message in cases:
        result = CliRunner().invoke(app, ["sweep", *words(tmp_path, "decoder=sjd"), *options])
        assert result.exit_code == 2 and result.stderr.strip().splitlines() == [f"error: {message}"], result.output
    assert not (tmp_path / "sweeps").exists()
    on_slurm, here = Cluster("submitit"), Cluster("submitit", "local")
    assert (on_slurm.remote_gpus, here.remote_gpus, Cluster("submitit", gpus_per_task=0).remote_gpus) == (1, None, 0)
    plan = build_plan(words(tmp_path, "decoder=sjd"))  # device=auto: cpu on this machine
    assert (on_slurm.gpus(plan.points), here.gpus(plan.points), Cluster("ray", gpus_per_task=2).gpus([])) == (
        1,
        0 if plan.points[0].run.device == "cpu" else 1,
        2,
    )
