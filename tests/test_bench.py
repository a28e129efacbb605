"""`make bench` runs: the benchmark script decodes through the runner's timed decode and prints every
table it promises (its timings are not checked: they belong to the machine, not to the code)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_decoders.py"


@pytest.mark.slow  # about 9 s: runs the benchmark script
def test_bench_script_runs_and_prints_latency_overhead_and_window_cost(tmp_path):
    fragment = tmp_path / "docs" / "bench_decoders.md"
    args = [
        sys.executable,
        str(SCRIPT),
        "--model",
        "debug",
        "--decoders",
        "sjd",
        "lantern",
        "--windows",
        "3",
        "5",
        "--prompts",
        "2",
        "--overhead-prompts",
        "1",
        "--steps",
        "--markdown",
        str(fragment),
    ]
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=SCRIPT.parents[1],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# model=debug compiled=False prompts=2 tokens/image=72 device=cpu threads=1")
    header = next(line for line in lines if line.startswith("decoder"))
    assert header.split() == ["decoder", "W", "NFE", "step", "x", "speedup", "lat", "ms", "outside", "ms/it"]
    steps_at = lines.index(next(line for line in lines if line.startswith("# the machinery's ms/it by loop step")))
    rows = [line.split() for line in lines[:steps_at] if line.split() and line.split()[0] in ("ar", "sjd", "lantern")]
    assert [(r[0], r[1]) for r in rows] == [("ar", "1"), ("sjd", "3"), ("sjd", "5"), ("lantern", "3"), ("lantern", "5")]
    assert rows[0][3:5] == ["1.00", "1.00"]  # AR: step compression and speedup 1 by definition
    for row in rows:
        share = float(row[6].rstrip("%"))
        assert 0 < share < 100 and float(row[7]) > 0  # a share of wall time and a time per iteration
    # --steps: the machinery's time per iteration split by loop step; the steps and the rest add up to it
    at = steps_at
    assert lines[at + 1].split() == [
        "decoder",
        "W",
        "lean",
        "plan",
        "forward",
        "verify",
        "commit",
        "advance",
        "observe",
        "propose",
        "rest",
    ]
    split = [line.split() for line in lines[at + 2 : at + 2 + len(rows)]]
    assert [(s[0], s[1]) for s in split] == [(r[0], r[1]) for r in rows]
    names = ["lean", "plan", "forward", "verify", "commit", "advance", "observe", "propose", "rest"]
    for row, parts in zip(rows, split):
        values = dict(zip(names, map(float, parts[2:])))
        assert abs(sum(values.values()) - float(row[7])) < 0.01  # printed to 3 decimals, ms/it to 2
        assert values["advance"] == 0 and values["rest"] > -0.01  # no drafter; the steps lie inside the decode
        if row[0] == "ar":  # AR's lean step is its whole iteration
            assert values["lean"] > 0 and all(values[step] == 0 for step in names[1:-1])
        else:
            assert values["lean"] == 0 and all(values[step] > 0 for step in names[1:-1] if step != "advance")
    cost = next(line for line in lines if line.startswith("# window forward cost"))
    assert "W=3:" in cost and "W=5:" in cost
    # --markdown: the printed table, as printed, in a docs fragment that names the command and the machine
    text = fragment.read_text()
    assert "Measured with `python benchmarks/bench_decoders.py --model debug" in text and "CPUs" in text
    block = text.split("```text\n", 1)[1].split("\n```", 1)[0]
    assert block.splitlines() == lines


@pytest.mark.slow  # about 5 s
def test_benchmarks_take_their_presets_from_the_decoder_config_group(tmp_path, monkeypatch):
    """The benchmarks and the study compare every preset of the `decoder` group but AR, so a preset
    added there (here, in an SJDBENCH_CONFIG_PATH directory) joins them without an edit."""
    from sjdbench.config.identity import decoder_presets, preset_decoder
    from sjdbench.config.schema import group_choices

    assert decoder_presets() == [name for name in group_choices("decoder") if name != "ar"]
    (tmp_path / "decoder").mkdir()
    (tmp_path / "decoder" / "sjd_wide.yaml").write_text(
        "defaults:\n  - proposal: resample\n  - verifier: exact\n  - init: random\n  - topology: chain\n"
        "  - _self_\n\nname: sjd_wide\nwindow: 64\n"
    )
    monkeypatch.setenv("SJDBENCH_CONFIG_PATH", str(tmp_path))
    preset_decoder.cache_clear()
    try:
        assert "sjd_wide" in decoder_presets()
    finally:
        preset_decoder.cache_clear()
    for name in ("bench_decoders.py", "bench_topologies.py"):
        text = (SCRIPT.parent / name).read_text()
        assert "decoder_presets()" in text and '"jacobi",' not in text, name
    assert "decoder_presets()" in (SCRIPT.parents[1] / "scripts" / "study.py").read_text()


@pytest.mark.slow  # about 10 s: runs the benchmark script
def test_chain_step_bench_pairs_the_two_paths_and_checks_their_tokens():
    """bench_chain_step.py decodes each batch with the fixed step and with the general loop, refuses
    to print a ratio if their tokens differ, and prints one ratio per (preset, B)."""
    script = SCRIPT.parent / "bench_chain_step.py"
    args = [sys.executable, str(script), "--model", "debug", "--eager", "--presets", "sjd", "ar", "--batches", "1", "2"]
    args += ["--repeats", "1"]
    result = subprocess.run(
        args, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# debug, eager, device cpu")
    rows = [line.split() for line in lines if line.split() and line.split()[0] in ("sjd", "ar")]
    assert [(r[0], r[1]) for r in rows] == [("sjd", "1"), ("sjd", "2"), ("ar", "1"), ("ar", "2")]
    assert all(float(r[2]) > 0 for r in rows)


@pytest.mark.slow  # about 10 s: decodes one toy image with a trained drafter, twice
def test_a_trained_drafters_forwards_count_as_model_time_not_machinery():
    """The overhead pass times the target's forwards (also those returning hidden states) and the
    drafter's network forwards; before, a drafter preset's share outside the forwards read 100 %."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_decoders", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from sjdbench.config import compose_run, decoder_spec
    from sjdbench.models.registry import build_adapter
    from sjdbench.run.runner import resolve_sampling, timed_decode

    config = compose_run(["model=toy", "decoder=eagle", "decoder.window=4", "device=cpu"])
    adapter = build_adapter("toy", dict(config.model.options), "cpu")
    decoder = decoder_spec(config).build(adapter)
    sampling = resolve_sampling(adapter.default_sampling, config.sampling)
    timer = bench.ForwardTimer(adapter, "cpu")
    timed_decode(timer, "a red circle", decoder, sampling, 0, "cpu")
    target_only = timer.seconds
    assert target_only > 0  # the forwards returning hidden states are timed
    timer.seconds = 0.0
    with bench.drafter_forwards_timed(timer):
        timed = timed_decode(timer, "a red circle", decoder, sampling, 0, "cpu")
    assert timed.result.stats.drafter_forwards > 0
    assert target_only < timer.seconds < timed.latency_s  # the drafter's forwards added, machinery left over


@pytest.mark.slow  # about 10 s: three AR loops on the debug model
def test_baseline_bench_runs_the_three_ar_loops_to_the_same_tokens():
    """benchmarks/bench_baseline.py exits non-zero if any loop's tokens differ; it prints one row per loop."""
    script = SCRIPT.parent / "bench_baseline.py"
    args = [sys.executable, str(script), "--model", "debug", "--prompts", "2", "--rounds", "1", "--threads", "1"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=SCRIPT.parents[1])
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {
        line.split()[0]: line.split()[1:]
        for line in result.stdout.splitlines()
        if line.split()[:1] in (["loop"], ["general"], ["bare"])
    }
    assert set(rows) == {"loop", "general", "bare"}
    assert rows["bare"][1] == "1.000" and all(float(v) > 0 for row in rows.values() for v in row)
