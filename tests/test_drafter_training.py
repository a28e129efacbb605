"""`sjdbench toy train-drafter`: self-distilled data and EAGLE-1 training for any model with hidden
states (the debug model here, the toy in a slow test), seeded and resumable, exported with checksums
where it cannot replace the shipped drafter by accident; and the shipped toy drafter itself."""

from __future__ import annotations

import json

import pytest
import torch

from sjdbench.errors import UserError
from sjdbench.models.debug import build_debug_adapter
from sjdbench.models.drafter.files import load_trained
from sjdbench.models.drafter.sources import available, default_source, load_drafter
from sjdbench.models.toy.model import WEIGHTS_DIR
from sjdbench.models.weights import WeightsError, recorded_checksums, sha256_file
from sjdbench.run import drafter_data
from sjdbench.run.drafter_train import make_batch
from sjdbench.run.drafter_training import train_for_model

DEBUG = ["model=debug", "model.options.grid_h=2", "model.options.grid_w=3", "model.options.n_codes=8"]


def train_debug(out, **kw):
    args = dict(out=out, steps=3, samples=4, held_out=2, device="cpu", threads=1, log=lambda *_: None)
    return train_for_model(DEBUG, **{**args, **kw})


def test_debug_drafter_trains_exports_and_loads(tmp_path):
    meta = train_debug(tmp_path / "d")
    folder = tmp_path / "d"
    weights, info = folder / "debug_drafter.safetensors", folder / "debug_drafter.json"
    assert recorded_checksums(folder)["debug_drafter.safetensors"] == sha256_file(weights)
    written = json.loads(info.read_text())
    assert written["train"]["steps"] == 3 and written["data"]["train_samples"] == 4
    assert [row["step"] for row in written["curve"]] == [3] or written["curve"][-1]["step"] == 3
    assert written["target"]["model"] == "debug" and written["target"]["options"]["grid_w"] == 3
    assert 0.0 <= written["final"]["top1_agreement_cfg"] <= 1.0 and meta["final"]["steps"] == 3
    adapter = build_debug_adapter(grid_h=2, grid_w=3, n_codes=8)
    drafter = load_drafter(adapter, "debug", {}, source=str(folder))
    assert drafter.name == "debug_drafter" and drafter.net.cfg.hidden_size == adapter.hidden_size
    assert available("debug", {}, source=str(folder))[0]


def test_training_is_seeded_and_a_rerun_resumes_to_the_same_weights(tmp_path):
    train_debug(tmp_path / "a")
    train_debug(tmp_path / "b")
    first = load_trained(tmp_path / "a", "debug_drafter")[0].state_dict()
    second = load_trained(tmp_path / "b", "debug_drafter")[0].state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    lines: list[str] = []
    train_debug(tmp_path / "a", log=lines.append)  # data and checkpoint found: nothing redone
    assert any("resuming" in line and "step 3 of 3" in line for line in lines)
    assert not any("self-distilled data" in line for line in lines)
    again = load_trained(tmp_path / "a", "debug_drafter")[0].state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_another_configuration_does_not_resume_silently(tmp_path):
    train_debug(tmp_path / "a")
    with pytest.raises(ValueError, match="different configuration; use --no-resume"):
        train_debug(tmp_path / "a", seed=5, samples=4)


def test_the_shipped_drafter_is_never_replaced_by_accident():
    with pytest.raises(UserError, match="holds the shipped toy drafter"):
        train_for_model([], out=WEIGHTS_DIR, steps=1, samples=1)


def test_only_model_words_are_taken():
    with pytest.raises(UserError, match="model=NAME and model.\\* overrides only, not decoder=eagle"):
        train_for_model(["model=debug", "decoder=eagle"], steps=1)


def test_entries_pair_a_token_with_the_hidden_state_before_it():
    seq = drafter_data.Sequence(
        tokens=torch.tensor([1, 5, 9, 20, 21, 22]),
        hidden=torch.arange(6.0)[:, None].expand(6, 4).half(),
        rotary=torch.tensor([0, 1, 2, 3, 4, 5]),
        first_segment=3,
        row=0,
    )
    batch = make_batch([seq], 0.0, None)
    assert batch["tokens"][0].tolist() == [5, 9, 20, 21, 22]
    assert batch["features"][0, :, 0].tolist() == [0, 1, 2, 3, 4]  # slot k's hidden state with token k + 1
    assert batch["target"][0, :, 0].tolist() == [1, 2, 3, 4, 5]
    assert batch["rotary"][0].tolist() == [0, 1, 2, 3, 4]
    assert batch["loss_mask"][0].tolist() == [0, 0, 1, 1, 1]  # the entries of tokens 20, 21, 22: segment 0..2


@pytest.mark.slow
def test_toy_drafter_trains_a_few_steps(tmp_path):
    meta = train_for_model(
        [], out=tmp_path / "t", steps=2, samples=2, held_out=1, device="cpu", threads=1, log=lambda *_: None
    )
    assert meta["config"]["hidden_size"] == 192 and meta["data"]["train_samples"] == 2
    assert (tmp_path / "t" / "toy_drafter.safetensors").exists()


def test_the_shipped_toy_drafter_loads_offline_and_is_checksummed():
    from sjdbench.models.toy.model import build_toy_adapter

    assert default_source("toy", {}) == str(WEIGHTS_DIR)
    ok, where = available("toy", {})
    assert ok, where
    sums = recorded_checksums(WEIGHTS_DIR)
    assert sums["toy_drafter.safetensors"] == sha256_file(WEIGHTS_DIR / "toy_drafter.safetensors")
    drafter = load_drafter(build_toy_adapter(), "toy", {})
    meta = json.loads((WEIGHTS_DIR / "toy_drafter.json").read_text())
    assert meta["final"]["top1_agreement_cfg"] > 0.3  # far above chance (1/512) on held-out samples
    assert drafter.net.parameter_count() < 1_000_000


def test_a_corrupt_shipped_drafter_is_refused_in_one_line(tmp_path):
    import shutil

    for name in ("toy_drafter.safetensors", "toy_drafter.json", "checksums.json"):
        shutil.copy(WEIGHTS_DIR / name, tmp_path / name)
    data = bytearray((tmp_path / "toy_drafter.safetensors").read_bytes())
    data[-10] ^= 0xFF
    (tmp_path / "toy_drafter.safetensors").write_bytes(bytes(data))
    with pytest.raises(WeightsError) as error:
        load_trained(tmp_path, "toy_drafter")
    assert "sha256" in str(error.value) and "\n" not in str(error.value)


def test_models_without_a_released_drafter_say_how_to_train_one():
    ok, line = available("janus", {})
    assert not ok and "sjdbench toy train-drafter model=janus" in line
    assert default_source("llamagen", {"resolution": 512}) == "jadohu/llamagen2_drafter"
    assert default_source("anole", {}) == "jadohu/anole_drafter"


def test_the_command_refuses_the_package_folder_in_one_line():
    from typer.testing import CliRunner

    from sjdbench.cli.commands import app

    before = {p.name: p.stat().st_mtime_ns for p in WEIGHTS_DIR.iterdir()}
    result = CliRunner().invoke(app, ["toy", "train-drafter", "--out", str(WEIGHTS_DIR), "--steps", "1"])
    assert result.exit_code == 2 and "shipped toy drafter" in result.output
    assert {p.name: p.stat().st_mtime_ns for p in WEIGHTS_DIR.iterdir()} == before


@pytest.mark.parametrize(
    "options, line",
    [
        (["--steps", "-1"], "--steps must be at least 1 (optimizer steps), got -1"),
        (["--minutes", "0"], "--minutes must be at least 0.1 (the time budget), got 0"),
        (["--threads", "0"], "--threads must be at least 1 (CPU threads), got 0"),
        (["--samples", "0"], "--samples must be at least 1 (self-distilled training samples), got 0"),
    ],
)
def test_the_command_refuses_meaningless_counts_before_it_starts(tmp_path, options, line):
    from typer.testing import CliRunner

    from sjdbench.cli.commands import app

    result = CliRunner().invoke(app, ["toy", "train-drafter", "--out", str(tmp_path / "d"), *options])
    assert result.exit_code == 2 and line in result.output
    assert not (tmp_path / "d").exists()  # nothing generated or trained
