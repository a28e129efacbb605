"""scripts/gpu_check.py end to end on the CPU: `--dry-run` runs every section of the GPU check with tiny
configs and writes its JSON and markdown, without the evaluation packages; a section that fails or
overruns its share is recorded and the sections after it still run."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
SECTIONS = ("models", "toy", "step", "batched", "chi2")

# runs a Python file with the evaluation packages made unimportable: the GPU check and the CLI need neither
# (None in sys.modules: importing it fails as for a package that is not installed, and probing for it
# with importlib.util.find_spec finds nothing)
WITHOUT_EVAL_PACKAGES = """
import runpy, sys
sys.modules.update(open_clip=None, torch_fidelity=None)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_without_eval_packages(*words: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python <words>` with open_clip and torch_fidelity made unimportable (the GPU machine lacks them)."""
    command = [sys.executable, "-c", WITHOUT_EVAL_PACKAGES, *words]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@functools.cache
def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[dict, str, str]:
    out = tmp_path_factory.mktemp("gpu_check")
    # a budget no loaded test machine exhausts: the shares' own skipping is tested below
    done = run_without_eval_packages(str(SCRIPT), "--dry-run", "--budget", "400", "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (json_path,) = out.glob("*.json")
    (md_path,) = out.glob("*.md")
    assert json_path.stem == md_path.stem and json_path.stem.endswith("-cpu")
    return json.loads(json_path.read_text()), md_path.read_text(), done.stdout


@pytest.mark.slow  # the script's dry run takes about half a minute
def test_every_section_reports_numbers_or_a_reason(dry_run):
    report, _, _ = dry_run
    assert report["dry_run"] is True and report["finished_utc"]
    assert report["command"].startswith("python scripts/gpu_check.py --dry-run")
    assert report["env"]["torch"] and report["env"]["device_name"] == "cpu"
    assert list(report["sections"]) == list(SECTIONS)
    for name, record in report["sections"].items():
        assert record["status"] in ("done", "partial"), (name, record.get("reason"), record.get("traceback"))
        assert record["errors"] == [], (name, record["errors"])  # the dry run is clean: a failure is a bug
        rows = [row for table in record["tables"].values() for row in table]
        assert rows or record["skipped"], name
        assert all(skip["why"] for skip in record["skipped"]), name


@pytest.mark.slow  # the script's dry run takes about half a minute
def test_the_step_costs_are_measured_for_every_model_eager_and_compiled(dry_run):
    report, _, _ = dry_run
    record = report["sections"]["models"]
    steps = record["tables"]["steps"]
    for row in steps:
        assert math.isfinite(row["ms"]) and row["ms"] > 0
        assert row["x_AR"] == 1.0 if row["W"] == 1 else row["x_AR"] > 0
    measured = {(row["model"], row["mode"]) for row in steps}
    skipped = " ".join(skip["what"] for skip in record["skipped"])
    for build in record["tables"]["builds"]:
        assert build["size"] == "tiny"
        assert (build["model"], build["mode"]) in measured or build["model"] in skipped
    assert {mode for _, mode in measured} == {"eager", "compiled"}


@pytest.mark.slow  # the script's dry run takes about half a minute
def test_toy_step_batched_and_chi_square_rows(dry_run):
    report, _, _ = dry_run
    sections = report["sections"]
    for row in sections["toy"]["tables"]["throughput"]:
        assert row["img_per_s"] > 0 and row["NFE"] > 0
    steps = sections["step"]["tables"]["fixed_step"]
    assert steps and all(row["same_tokens"] and row["step_over_general"] > 0 for row in steps)
    presets = sections["batched"]["tables"]["presets"]
    assert presets and all(row["tokens_equal"] and row["stats_equal"] for row in presets)  # float64 on a CPU
    for row in sections["chi2"]["tables"]["tests"]:
        assert 0.0 <= row["p_value"] <= 1.0 and row["dof"] >= 1 and row["samples"] > 0
        assert row["pass"], row  # lossless presets; fixed seeds, so the outcome is deterministic


@pytest.mark.slow  # the script's dry run takes about half a minute
def test_the_markdown_holds_the_command_the_machine_and_a_table_per_section(dry_run):
    report, markdown, stdout = dry_run
    assert report["command"] in markdown
    assert f"| torch | {report['env']['torch']} |" in markdown
    for record in report["sections"].values():
        assert f"## {record['title']}" in markdown
    assert markdown.count("status: **") == len(SECTIONS)
    assert "ms per step" in markdown and "| model | mode | B | AR |" in markdown
    assert "s] models:" in stdout  # progress lines carry the elapsed seconds


def test_a_failing_or_overrunning_section_loses_nothing_else(tmp_path, monkeypatch):
    """One section raises, one sleeps past its share and is interrupted; the others still run and the
    files say which did what."""
    script = load_script()
    monkeypatch.setattr(script, "GRACE_S", 0.3)
    shares = {"models": 0.2, "toy": 0.2, "step": 0.05, "batched": 0.1, "chi2": 0.35}
    check = script.Check(script.dry_plan(), 10.0, shares, tmp_path, "python scripts/gpu_check.py --test")
    check.started = time.monotonic()  # the clock starts now: models until 2 s, toy until 4 s, ...

    def fails(section):
        raise RuntimeError("a model that does not build")

    def measures(section):
        section.add("rows", {"value": 1.5})

    def overruns(section):
        section.add("rows", {"value": 2.5})
        time.sleep(30)

    sections = {"models": overruns, "toy": fails, "step": measures, "batched": measures, "chi2": measures}
    check.run(list(SECTIONS), sections)
    report = json.loads(check.json_path.read_text())
    status = {name: record["status"] for name, record in report["sections"].items()}
    assert status == {"models": "interrupted", "toy": "failed", "step": "done", "batched": "done", "chi2": "done"}
    assert report["sections"]["models"]["tables"]["rows"] == [{"value": 2.5}]  # kept what it measured
    assert report["sections"]["models"]["elapsed_s"] < 10
    assert "a model that does not build" in report["sections"]["toy"]["reason"]
    markdown = check.md_path.read_text()
    assert "status: **failed**" in markdown and "status: **interrupted**" in markdown


def test_a_section_without_time_left_is_not_run_and_says_so(tmp_path):
    script = load_script()
    check = script.Check(script.dry_plan(), 50.0, dict(script.SHARES), tmp_path, "python scripts/gpu_check.py")
    check.started = time.monotonic() - 100  # the whole budget spent already
    check.run(["toy"], dict.fromkeys(SECTIONS, pytest.fail))
    sections = json.loads(check.json_path.read_text())["sections"]
    assert sections["models"]["status"] == "not run" and "not selected" in sections["models"]["reason"]
    assert sections["toy"]["status"] == "not run" and "no time left" in sections["toy"]["reason"]


def test_without_a_gpu_the_full_check_refuses_in_one_line(capsys):
    script = load_script()
    if script.torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert script.main([]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_bad_shares_are_refused_in_one_line(capsys):
    script = load_script()
    assert script.main(["--dry-run", "--share", "model=0.5"]) == 2
    assert (
        capsys.readouterr().err
        == "error: --share model=0.5: unknown section; choose one of: models, toy, step, batched, chi2\n"
    )
    with pytest.raises(ValueError, match="must not exceed 1"):
        script.parse_shares(["models=0.9"])
    with pytest.raises(ValueError, match="give a fraction of the budget"):
        script.parse_shares(["toy=half"])


@pytest.mark.slow  # about 13 s: a subprocess without the evaluation packages
def test_the_cli_runs_without_the_evaluation_packages(tmp_path):
    """Importing sjdbench, composing a run and decoding it need neither open_clip nor torch-fidelity."""
    sjdbench = str(ROOT / "sjdbench" / "__main__.py")
    words = ("run", "decoder=sjd", "decoder.window=4", "data.limit=1", "device=cpu", f"results_dir={tmp_path}")
    done = run_without_eval_packages(sjdbench, *words)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 new sample" in done.stdout
