"""The real models from the command line: listing, the top-level model keys, one-line errors for
missing or unreachable weights, and an end-to-end run of each model with random weights of a
shrunken architecture (what `model.weights=random model.size=tiny` is for on a CPU)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.config import compose_run
from sjdbench.errors import UserError

pytest.importorskip("transformers")

runner = CliRunner()
REAL = ("emu3", "janus", "llamagen", "lumina")


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_list_model_shows_the_four():
    result = runner.invoke(app, ["list", "model"])
    assert result.exit_code == 0
    assert all(name in result.output for name in REAL)


def test_top_level_model_keys_reach_the_builder_options():
    config = compose_run(["model=lumina", "model.weights=random", "model.size=tiny", "model.resolution=64"])
    assert config.model.options["weights"] == "random" and config.model.options["resolution"] == 64
    assert config.model.options["size"] == "tiny" and config.model.options["vqgan_dir"] is None
    toy = compose_run(["model=toy"])
    assert "weights" not in toy.model.options  # unset keys are not passed to models that do not take them


def test_model_key_a_model_does_not_take_is_one_line(tmp_path):
    line = one_line_error(runner.invoke(app, ["run", "model=toy", "model.weights=random", f"results_dir={tmp_path}"]))
    assert "model 'toy' does not take weights" in line


def test_contradicting_spellings_are_refused():
    with pytest.raises(UserError, match="contradicts"):
        compose_run(["model=janus", "model.size=1B", "+model.options.size=7B"])


@pytest.mark.parametrize("model", REAL)
def test_missing_local_weights_are_one_line(model, tmp_path):
    line = one_line_error(
        runner.invoke(
            app,
            ["run", f"model={model}", f"model.path={tmp_path}", "data.limit=1", f"results_dir={tmp_path / 'results'}"],
        )
    )
    assert f"model '{model}'" in line and str(tmp_path) in line and "download" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("model", ["janus", "emu3", "llamagen"])
def test_offline_without_cached_weights_is_one_line(model, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # nothing cached, whatever this machine holds
    line = one_line_error(runner.invoke(app, ["run", f"model={model}", "data.limit=1", f"results_dir={tmp_path}"]))
    assert "hf download" in line and ("model.path=DIR" in line or "model.options.t5_path=DIR" in line)


@pytest.mark.parametrize("model", REAL)
def test_random_tiny_model_runs_end_to_end(model, tmp_path):
    """sjdbench run model=<m> model.weights=random model.size=tiny model.resolution=32|64 data.limit=1"""
    resolution = 32 if model == "emu3" else 64  # Emu3's 184622-id vocabulary is the slow part on CPU
    args = [
        "run",
        f"model={model}",
        "model.weights=random",
        "model.size=tiny",
        f"model.resolution={resolution}",
        "data.limit=1",
        "device=cpu",
        "warmup=0",
        "decoder=sjd",
        f"results_dir={tmp_path}",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    run_dir = next((tmp_path / "runs").iterdir())
    env = json.loads((run_dir / "env.json").read_text())
    assert env["weights"].startswith("random weights (tiny)")  # the run says its tokens mean nothing
    assert set(env["sampling"]) == {"cfg_scale", "temperature", "top_k", "top_p", "guidance"}  # guidance: the CFG rule
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and not summary["complete"] and summary["model"] == model  # 1 prompt of the set
    assert (run_dir / "images" / "000000_0.png").exists()
