"""The store never lies and never loses: torn lines are cut before the next append, one writer per run,
newer stores are refused, write failures are one line with the rows so far intact."""

import errno
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.config import compose_run
from sjdbench.config.resolve import resolve_run
from sjdbench.results.store import append_jsonl, read_jsonl, truncate_torn_tail
from sjdbench.run.runner import execute

runner = CliRunner()
SMALL = ["model=debug", "model.options.grid_h=3", "model.options.grid_w=3", "warmup=0", "save_images=false"]


def config(tmp_path, *extra):
    return compose_run([*SMALL, f"results_dir={tmp_path}", *extra])


def cli_error_line(result) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and result.stderr.strip().splitlines()[-1] == lines[0], result.stderr
    return lines[0]


def test_a_torn_last_line_is_cut_not_glued(tmp_path):
    path = tmp_path / "samples.jsonl"
    append_jsonl(path, {"prompt_id": 0})
    with open(path, "a") as handle:
        handle.write('{"prompt_id": 1, "tok')  # killed mid-write
    assert read_jsonl(path) == [{"prompt_id": 0}]  # readers skip it
    assert truncate_torn_tail(path) == len('{"prompt_id": 1, "tok')
    append_jsonl(path, {"prompt_id": 1})
    assert path.read_text().splitlines() == ['{"prompt_id":0}', '{"prompt_id":1}']
    assert truncate_torn_tail(path) == 0  # a clean file is left alone


def test_a_run_killed_mid_row_resumes_to_complete_with_exit_0(tmp_path):
    partial = execute(config(tmp_path), limit_new=3)
    samples = Path(partial.run_dir) / "samples.jsonl"
    with open(samples, "a") as handle:
        handle.write('{"prompt_id":3,"sample":0,"latency_s":0.1,"tok')  # what a kill during the 4th write leaves
    args = ["run", *SMALL, f"results_dir={tmp_path}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "finished: 5 new samples" in result.stdout and "8 of 8 samples of the prompt set stored" in result.stdout
    lines = samples.read_text().splitlines()
    assert [json.loads(line)["prompt_id"] for line in lines] == list(range(8))  # every line parses, none glued
    assert json.loads((samples.parent / "summary.json").read_text())["complete"] is True


def test_a_second_writer_of_the_same_run_is_refused_in_one_line(tmp_path):
    plan = resolve_run(config(tmp_path))
    execute(config(tmp_path, "data.limit=1"))
    before = (Path(plan.store.samples_path)).read_bytes()
    with plan.store.writer():  # another process would hold this lock: flock locks differ per open file
        result = runner.invoke(app, ["run", *SMALL, f"results_dir={tmp_path}"])
    line = cli_error_line(result)
    assert f"run {plan.run_id} is being written by another sjdbench process (pid {os.getpid()} on" in line
    assert "wait for it to finish" in line
    assert plan.store.samples_path.read_bytes() == before  # nothing written by the refused run
    assert (
        runner.invoke(app, ["run", *SMALL, f"results_dir={tmp_path}"]).exit_code == 0
    )  # the lock is gone with its holder


@pytest.mark.slow
def test_two_concurrent_runs_of_one_run_id_do_not_corrupt_it(tmp_path):
    """Real processes: the second is refused while the first writes; the first finishes whole."""
    args = [
        sys.executable,
        "-m",
        "sjdbench",
        "run",
        "model=debug",
        "model.options.grid_h=6",
        "model.options.grid_w=6",
        "warmup=0",
        "samples_per_prompt=8",
        f"results_dir={tmp_path}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    while time.time() < deadline and not list(tmp_path.glob("runs/*/samples.jsonl")):
        time.sleep(0.05)
    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    out, err = first.communicate(timeout=180)
    assert first.returncode == 0, err
    if second.returncode == 0:  # the first finished before the second started: nothing to refuse
        pytest.skip("the first run finished before the second one started (machine too fast or too slow)")
    assert second.returncode == 2 and second.stderr.strip().splitlines()[-1].startswith("error: run ")
    assert "is being written by another sjdbench process" in second.stderr
    rows = read_jsonl(next(tmp_path.glob("runs/*/samples.jsonl")))
    assert sorted((r["prompt_id"], r["sample"]) for r in rows) == [(p, s) for p in range(8) for s in range(8)]


@pytest.mark.parametrize("where", ["env.json", "summary.json", "store.json"])
def test_a_store_written_by_a_newer_sjdbench_is_refused(tmp_path, where):
    from sjdbench.results.store import SCHEMA

    outcome = execute(config(tmp_path, "data.limit=1"))
    target = tmp_path / "store.json" if where == "store.json" else Path(outcome.run_dir) / where
    doc = json.loads(target.read_text())
    doc["schema"] = SCHEMA + 1
    target.write_text(json.dumps(doc))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    result = runner.invoke(app, ["run", *SMALL, f"results_dir={tmp_path}"])
    line = cli_error_line(result)
    assert f"was written by a newer sjdbench (schema {SCHEMA + 1}; this one reads up to {SCHEMA})" in line
    assert "upgrade sjdbench" in line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_schema_is_recorded_everywhere(tmp_path):
    from sjdbench.results.store import SCHEMA

    outcome = execute(config(tmp_path, "data.limit=1"))
    run = Path(outcome.run_dir)
    for doc in (run / "env.json", run / "summary.json", tmp_path / "store.json"):
        assert json.loads(doc.read_text())["schema"] == SCHEMA


def test_disk_full_is_one_line_and_the_rows_so_far_survive(tmp_path, monkeypatch):
    import sjdbench.results.store as store

    real = store._write_all
    calls = {"n": 0}

    def filling_up(fd, data):
        calls["n"] += 1
        if calls["n"] > 6:  # config.yaml, env.json, store.json... then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)

    monkeypatch.setattr(store, "_write_all", filling_up)
    result = runner.invoke(app, ["run", *SMALL, f"results_dir={tmp_path}"])
    line = cli_error_line(result)
    assert (
        "No space left on device; free some space (or set results_dir elsewhere), then re-run the same command" in line
    )
    samples = next(tmp_path.glob("runs/*/samples.jsonl"))
    kept = read_jsonl(samples)
    assert len(kept) >= 1 and all(json.loads(x) for x in samples.read_text().splitlines())
    assert not list(tmp_path.rglob("*.tmp"))  # no temp files left behind
    monkeypatch.setattr(store, "_write_all", real)
    again = runner.invoke(app, ["run", *SMALL, f"results_dir={tmp_path}"])
    assert again.exit_code == 0 and f"finished: {8 - len(kept)} new samples" in again.stdout
    assert read_jsonl(samples)[: len(kept)] == kept


def _small_file_limit():
    limit = 12_000  # bytes: room for config.yaml, env.json and a few rows, not all 8
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.slow
def test_a_real_write_failure_from_the_os_is_one_line(tmp_path):
    """A file-size limit (ulimit -f) makes the kernel refuse a write half-way through a row."""
    args = [sys.executable, "-m", "sjdbench", "run", *SMALL, f"results_dir={tmp_path}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    failed = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, preexec_fn=_small_file_limit)
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
    assert lines[-1].startswith("error: cannot write ") and "File too large; raise the file size limit" in lines[-1]
    samples = next(tmp_path.glob("runs/*/samples.jsonl"))
    kept = read_jsonl(samples)
    assert 0 < len(kept) < 8
    finished = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert sorted(r["prompt_id"] for r in read_jsonl(samples)) == list(range(8))
    assert all(json.loads(x) for x in samples.read_text().splitlines())  # the half-written row was cut, not glued
