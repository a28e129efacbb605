"""Every bad input ends in one line on stderr, exit code 2, no traceback, before any model loads, and
nothing is written (or lost). In-process through typer's CliRunner; the console script's own
behaviour (usage errors, output that is not a terminal, Ctrl-C) through subprocesses."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.results.store import read_jsonl

runner = CliRunner()
DEBUG = ["model=debug", "model.options.grid_h=3", "model.options.grid_w=3", "warmup=0", "data.limit=2"]


def one_line_error(result, needle: str) -> str:
    """exit 2, exactly one stderr line `error: ...` holding `needle`, no traceback anywhere."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]
    assert "Traceback" not in result.output and result.stdout == ""
    return lines[0]


def run_cli(tmp_path, *words, command="run"):
    return runner.invoke(app, [command, *DEBUG, f"results_dir={tmp_path / 'results'}", *words])


def nothing_written(tmp_path) -> bool:
    return not (tmp_path / "results").exists()


@pytest.fixture
def no_model_loads(monkeypatch):
    """The checks must come before any model loads: loading fails the test."""
    from sjdbench.models.registry import ResolvedModel

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(ResolvedModel, "build", forbidden)


@pytest.mark.parametrize(
    "words,needle",
    [
        (["sampling.temperature=-1"], "sampling.temperature must be >= 0 (0 = greedy), got -1.0"),
        (["sampling.top_p=2"], "sampling.top_p must be in (0, 1] (1 = off), got 2.0"),
        (["sampling.top_p=0"], "sampling.top_p must be in (0, 1]"),
        (["sampling.cfg_scale=-1"], "sampling.cfg_scale must be >= 0 (1 = no guidance), got -1.0"),
        (["sampling.top_k=65"], "sampling.top_k=65 exceeds the model's 64 image tokens; use 1..64, or 0 for no top-k"),
        (["sampling.top_k=-2"], "sampling.top_k must be >= 0"),
        (["sampling.temperature=nan"], "sampling.temperature must be a finite number, got nan"),
        (["model.options.cfg_scale=-2"], "model.options.cfg_scale must be >= 0"),
        (["decoder=lantern", "decoder.verifier.delta=-0.1"], "decoder.verifier.delta must be >= 0, got -0.1"),
        (["decoder=lantern", "decoder.verifier.k=0"], "decoder.verifier.k must be >= 1, got 0"),
        (["decoder=sjd_vp", "decoder.proposal.lam=-1"], "decoder.proposal.lam must be >= 0, got -1.0"),
        (["decoder=sjd_vp", "decoder.proposal.gamma=0"], "decoder.proposal.gamma must be in (0, 1], got 0.0"),
        (["decoder=sjd_vp", "decoder.proposal.gamma=1.5"], "decoder.proposal.gamma must be in (0, 1], got 1.5"),
        (["decoder=sjd_vp", "decoder.proposal.lam=inf"], "decoder.proposal.lam must be a finite number, got inf"),
        (["device=tpu"], "device=tpu is not a device torch knows; use auto, cpu, cuda, cuda:N or mps"),
        (["device=meta"], "sjdbench does not run on 'meta' devices"),
        (["decoder=sjd,sjd_vp"], "to run several, sweep over them: sjdbench sweep decoder=sjd,sjd_vp"),
        (["decoder=[sjd,sjd_vp]"], "to run several, sweep over them: sjdbench sweep decoder=sjd,sjd_vp"),
        (
            ["decoder="],
            "decoder= needs a value; choose one of: ar, cool_sd, eagle, eagle2, eagle2_adt, eagle_chain, gsd, gsd_vp, "
            "jacobi, lantern, lantern_adt, lantern_eagle, lantern_pac, lantern_pp, lantern_vp, mc_sjd, pjd, scd_gs, "
            "sjd, sjd_adt, sjd_pac, sjd_pp, sjd_pv, sjd_vp, zipar",
        ),
        (["decoder.window==3"], "'decoder.window==3' has two '='; write decoder.window=3"),
        (
            ["decoder.window=16,32"],
            "`run` takes one value per key; to run several, use sjdbench sweep decoder.window=16,32",
        ),
        (["threads=0"], "threads must be >= 1"),
        # legal in type, meaningless in fact
        (
            ["decoder=gsd", "decoder.verifier.reading=ours", "decoder.verifier.group_size=0"],
            "decoder.verifier.group_size must be >= 1 (G tokens around the draft's rank), got 0",
        ),
        (["decoder=gsd", "decoder.verifier.p_thr=2"], "decoder.verifier.p_thr=2.0 is out of range"),
        (
            ["decoder.window=16", "decoder.window=32"],
            "decoder.window is given twice (decoder.window=16 and decoder.window=32); give it once",
        ),
        (["hydra.job.name=x"], "hydra.job.name=x: sjdbench does not read Hydra's own settings (hydra.*)"),
        (["hydra/job_logging=disabled"], "sjdbench does not read Hydra's own settings"),
        (["data.column=text"], "data.column=text does nothing: data=smoke reads smoke.txt, one prompt per line"),
        # Hydra's words, said with the fix
        (["=3"], "'=3' has no key before '='; write key=value"),
        (["decoder.window=abc"], "decoder.window must be an integer, got 'abc'"),
        (["sampling.top_p=high"], "sampling.top_p must be a number, got 'high'"),
        (["save_images=maybe"], "save_images must be true or false, got 'maybe'"),
        (["decoder=lantern", "decoder.verifier.k=1.5"], "decoder.verifier.k must be an integer, got '1.5'"),
        (["seed=null"], "seed cannot be null"),
        (["+sweep=window"], "+sweep=window configures a sweep (conf/sweep/); one run takes no grid: run it with "),
        (["décoder.window=3"], "the key décoder.window holds 'é' (character 2), which is not ASCII"),
        (["data.path=/tmp/é.txt"], "cannot read override 'data.path=/tmp/é.txt' at character 16 ('é')"),
    ],
)
def test_bad_values_are_one_line_before_the_model_loads(tmp_path, no_model_loads, words, needle):
    one_line_error(run_cli(tmp_path, *words), needle)
    assert nothing_written(tmp_path)


def test_a_key_given_twice_is_refused_by_every_door(tmp_path, no_model_loads):
    """run, sweep and the Python API refuse `decoder.window=16 decoder.window=32` naming both words,
    where Hydra would keep the last one without a word."""
    import sjdbench
    from sjdbench.errors import UserError

    needle = "decoder.window is given twice (decoder.window=16 and decoder.window=32); give it once"
    one_line_error(run_cli(tmp_path, "decoder.window=16", "decoder.window=32"), needle)
    sweep = run_cli(tmp_path, "decoder.window=16", "decoder.window=32", command="sweep")
    assert sweep.exit_code == 2 and needle in sweep.stderr and "Traceback" not in sweep.output
    with pytest.raises(UserError, match="decoder.window is given twice"):
        sjdbench.build_decoder("sjd", window=16, **{"decoder.window": 32})
    assert nothing_written(tmp_path)


@pytest.mark.parametrize(
    "words,needle",
    [
        (["train", "--steps", "-1"], "--steps must be at least 1 (optimizer steps), got -1"),
        (["train", "--minutes", "-1"], "--minutes must be at least 0.1 (the time budget), got -1"),
        (["train", "--threads", "0"], "--threads must be at least 1 (CPU threads), got 0"),
        (["train", "--out", "/dev/null", "--steps", "1"], "--out /dev/null is a file, not a folder"),
        (["train-clip", "--steps", "0"], "--steps must be at least 1"),
        (["train-clip", "--threads", "0"], "--threads must be at least 1"),
        (["calibrate", "--n", "0"], "--n must be at least 1 (held-out captions), got 0"),
        (["calibrate", "--top-k", "-3"], "--top-k must be at least 0 (0 = off), got -3"),
    ],
)
def test_toy_commands_check_their_options_before_starting(tmp_path, monkeypatch, words, needle):
    """`toy train --steps -1` trained nothing and exported an untrained model; `--threads 0` and
    `--out /dev/null` ended in a traceback or a bare OS error."""
    import sjdbench.toyworld.train as train_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train_module, "train_toy", lambda *a, **k: pytest.fail("training started"))
    one_line_error(runner.invoke(app, ["toy", *words]), needle)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_results_dir_is_refused_not_read_as_the_default(tmp_path, no_model_loads, monkeypatch):
    """`results_dir=$OUT` with OUT unset would otherwise send the run to ./results (another store)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SJDBENCH_RESULTS", str(tmp_path / "env-store"))
    for words in (["results_dir="], ["results_dir= "]):
        one_line_error(runner.invoke(app, ["run", *DEBUG, *words]), "results_dir= is empty (an unset shell variable?)")
    one_line_error(runner.invoke(app, ["eval", "--results-dir", ""]), "results_dir= is empty")
    one_line_error(runner.invoke(app, ["report", "results_dir="]), "results_dir= is empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_gpu(tmp_path, no_model_loads):
    one_line_error(run_cli(tmp_path, "device=cuda:1"), "no CUDA device is visible; use device=cpu")


def test_prompt_file_that_is_not_utf8(tmp_path, no_model_loads):
    path = tmp_path / "latin1.txt"
    path.write_bytes("a red caf\xe9 at the top\n".encode("latin-1"))
    one_line_error(
        run_cli(tmp_path, "data=file", f"data.path={path}"),
        f"prompt file {path} is not UTF-8 text (byte 0xe9 on line 1); re-save it as UTF-8",
    )
    tsv = tmp_path / "latin1.tsv"
    tsv.write_bytes("Prompt\tCategory\na caf\xe9\tx\n".encode("latin-1"))
    one_line_error(
        run_cli(tmp_path, "data=file", f"data.path={tsv}", "data.column=Prompt"),
        "is not UTF-8 text (byte 0xe9 on line 2)",
    )
    assert nothing_written(tmp_path)


def test_tsv_with_a_byte_order_mark_reads_its_columns(tmp_path):
    tsv = tmp_path / "parti.tsv"
    tsv.write_bytes("\ufeffPrompt\tCategory\na red circle\tx\n".encode("utf-8"))
    result = run_cli(tmp_path, "data=file", f"data.path={tsv}", "data.column=Prompt")
    assert result.exit_code == 0, result.output
    wrong = run_cli(tmp_path, "data=file", f"data.path={tsv}", "data.column=caption")
    one_line_error(wrong, "has no column 'caption'; columns are: Prompt, Category (set data.column)")


def test_results_dir_that_is_a_file_or_under_one(tmp_path, no_model_loads):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for target, needle in (
        (blocker, "is a file, not a folder"),
        (blocker / "sub", f"is under {blocker}, which is a file"),
    ):
        result = runner.invoke(app, ["run", *DEBUG, f"results_dir={target}"])
        one_line_error(result, needle)
    assert blocker.read_text() == "not a folder"


def test_read_only_results_dir_is_refused_before_loading(tmp_path, no_model_loads, monkeypatch):
    """As root, permissions do not stop writes (read-only mounts do), so access(2) is simulated here;
    the next test checks a real read-only folder where the user is not root."""
    import sjdbench.results.store as store

    monkeypatch.setattr(store, "_writable", lambda folder: False)
    one_line_error(run_cli(tmp_path), "is not writable")
    assert nothing_written(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_results_dir_for_real(tmp_path, no_model_loads):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = runner.invoke(app, ["run", *DEBUG, f"results_dir={locked / 'results'}"])
        one_line_error(result, "is not writable")
    finally:
        locked.chmod(0o755)


def _toy_copy(tmp_path) -> Path:
    from sjdbench.models.toy.model import WEIGHTS_DIR

    copy = tmp_path / "weights"
    shutil.copytree(WEIGHTS_DIR, copy)
    return copy


def test_truncated_weight_file_is_named(tmp_path, no_model_loads):
    copy = _toy_copy(tmp_path)
    lm = copy / "toy_lm.safetensors"
    lm.write_bytes(lm.read_bytes()[: lm.stat().st_size // 2])
    result = runner.invoke(
        app, ["run", "model=toy", f"model.options.weights_dir={copy}", f"results_dir={tmp_path / 'results'}"]
    )
    one_line_error(result, f"{lm} is truncated: its tensors need")
    assert nothing_written(tmp_path)


def test_corrupt_weight_file_fails_its_checksum(tmp_path, no_model_loads):
    copy = _toy_copy(tmp_path)
    lm = copy / "toy_lm.safetensors"
    data = bytearray(lm.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside a tensor: loads fine, samples wrong
    lm.write_bytes(bytes(data))
    result = runner.invoke(
        app, ["run", "model=toy", f"model.options.weights_dir={copy}", f"results_dir={tmp_path / 'results'}"]
    )
    one_line_error(result, f"{lm} is corrupt: sha256")
    assert "differs from the recorded" in result.stderr


def test_weights_that_do_not_fit_the_config_name_the_shape(tmp_path, no_model_loads):
    copy = _toy_copy(tmp_path)
    meta = json.loads((copy / "toy.json").read_text())
    meta["model"]["dim"] = 128
    (copy / "toy.json").write_text(json.dumps(meta))
    result = runner.invoke(
        app, ["run", "model=toy", f"model.options.weights_dir={copy}", f"results_dir={tmp_path / 'results'}"]
    )
    line = one_line_error(result, "toy_lm.safetensors: tensor")
    assert "has shape [613, 192], the model's config needs [613, 128]" in line


def test_sweep_validates_every_point_before_running_anything(tmp_path, no_model_loads):
    for grid, needle in (
        (["device=tpu"], "device=tpu is not a device torch knows"),
        (["decoder=sjd", "sampling.temperature=1,-1"], "sampling.temperature must be >= 0"),
        (["decoder=sjd,sjd_vp", "sampling.top_k=65"], "exceeds the model's 64 image tokens"),
        (["decoder=[sjd,sjd_vp]"], "to sweep over them write decoder=sjd,sjd_vp (no brackets)"),
    ):
        result = runner.invoke(app, ["sweep", *DEBUG, f"results_dir={tmp_path / 'results'}", *grid])
        one_line_error(result, needle)
    assert nothing_written(tmp_path)


# -- a model that returns NaN / inf logits ------------------------------------------------------------

POISONED_PROMPT = "a small yellow square at the top left"  # smoke prompt 1 starts with this


class PoisonedLogits:
    """The debug model, except that for one prompt the logits predicting one position are bad."""

    def __init__(self, inner, position: int, value: float) -> None:
        self._inner, self._position, self._value, self._poisoned = inner, position, value, False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def encode_prompt(self, text):
        self._poisoned = text.startswith(POISONED_PROMPT)
        return self._inner.encode_prompt(text)

    def forward(self, cache, window):
        logits = self._inner.forward(cache, window).clone()  # (B, 2, L, V)
        positions = window.positions
        logits[..., :2] = float("-inf")  # masking ids (here <pad>, <bos>) with -inf is fine, not flagged
        if self._poisoned:
            logits[0][:, positions[0] + 1 == self._position] = self._value
        return logits


def poisoned_model():
    """The debug model's registry entry with two more options: where its logits go bad, and to what."""
    from sjdbench.models import debug

    @dataclasses.dataclass
    class PoisonedOptions(debug.DebugOptions):
        poison_at: int = 5
        value: float = float("nan")

    def build(options, device):
        return PoisonedLogits(debug.build(options, device), options.poison_at, float(options.value))

    return dataclasses.replace(debug.MODEL, options=PoisonedOptions, build=build)


@pytest.mark.parametrize("value,temperature", [("nan", "1"), ("inf", "1"), ("nan", "0")])
def test_nan_or_inf_logits_stop_the_run_naming_prompt_and_position(tmp_path, monkeypatch, value, temperature):
    from sjdbench.models import debug

    monkeypatch.setattr(debug, "MODEL", poisoned_model())
    words = [
        "decoder=sjd",
        "decoder.window=4",
        f"+model.options.value={value}",
        "+model.options.poison_at=5",
        f"sampling.temperature={temperature}",
    ]
    result = run_cli(tmp_path, *words)
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors == result.stderr.strip().splitlines()[-1:]  # after the progress lines
    line = errors[0]
    assert "prompt 1 ('a small yellow square at the top left a…') sample 0 of run debug-sjd-" in line
    assert "segment position 5: the model returned NaN/inf logits; nothing was sampled from them" in line
    rows = read_jsonl(next((tmp_path / "results" / "runs").glob("*/samples.jsonl")))
    assert [r["prompt_id"] for r in rows] == [0]  # the clean prompt before it is kept, nothing of the bad one
    summary = json.loads(next((tmp_path / "results" / "runs").glob("*/summary.json")).read_text())
    assert summary["n_samples"] == 1 and summary["complete"] is False


# -- the console script itself ------------------------------------------------------------------------


def sjdbench(*args, cwd=None, timeout=120, **kwargs):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "60"}  # a narrow "terminal" must not wrap errors
    return subprocess.run(
        [sys.executable, "-m", "sjdbench", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        **kwargs,
    )


def test_errors_are_one_physical_line_when_output_is_not_a_terminal(tmp_path):
    for args, needle in (
        (
            ["run", "decoder=nothing_like_it"],
            "unknown decoder 'nothing_like_it'; choose one of: ar, cool_sd, eagle, eagle2, eagle2_adt, eagle_chain,",
        ),
        (["sweep", "--executor"], "Option '--executor' requires an argument. (see `sjdbench sweep --help`)"),
        (["run", "device=tpu", "model=debug"], "device=tpu is not a device torch knows"),
    ):
        result = sjdbench(*args, cwd=tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and needle in lines[0], (result.returncode, result.stderr)
        assert len(lines[0]) > 60  # longer than the terminal width, still one line
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # about 7 s; one-line errors off a terminal stay in make test
def test_progress_lines_when_output_is_not_a_terminal(tmp_path):
    result = sjdbench("run", *DEBUG, f"results_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert "loading model debug on cpu" in result.stderr and "loaded debug in" in result.stderr
    assert "debug / sjd: 0/2 samples done, 2 to decode" in result.stderr
    assert "debug / sjd: 2/2 samples" in result.stderr
    assert "run debug-sjd-" in result.stdout and "2 of 8 samples of the prompt set stored" in result.stdout


@pytest.mark.slow  # about 25 s; test_runner.py::test_kill_during_run_then_resume keeps resume in make test
def test_ctrl_c_says_how_far_it_got_and_the_rerun_resumes(tmp_path):
    # 8 prompts x 10 samples: long enough (seconds) that the interrupt lands mid-run on a fast machine
    args = [
        sys.executable,
        "-m",
        "sjdbench",
        "run",
        "model=debug",
        "model.options.grid_h=6",
        "model.options.grid_w=6",
        "samples_per_prompt=10",
        "warmup=0",
        f"results_dir={tmp_path}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # a shell runs background jobs with SIGINT ignored, and children inherit that: restore the default
    proc = subprocess.Popen(
        args,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline, samples = time.time() + 90, None
    while time.time() < deadline:
        found = list(tmp_path.glob("runs/*/samples.jsonl"))
        if found and len(read_jsonl(found[0])) >= 1:
            samples = found[0]
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert samples is not None, err
    done = len(read_jsonl(samples))
    assert proc.returncode == 130, err
    assert f"interrupted after {done}/80 samples — re-run the same command to resume" in err
    assert "Traceback" not in err
    summary = json.loads((samples.parent / "summary.json").read_text())  # the store reads true after Ctrl-C
    assert summary["n_samples"] == done and summary["complete"] is False
    finished = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    rows = read_jsonl(samples)
    assert sorted((r["prompt_id"], r["sample"]) for r in rows) == [(p, s) for p in range(8) for s in range(10)]
    assert json.loads((samples.parent / "summary.json").read_text())["complete"] is True
