"""Toy training pipeline end to end on a miniature configuration (tokenizer fit, data, train, resume, export)."""

import json

import pytest
import torch

MINI = dict(
    n_train=64,
    n_val=16,
    n_codes=32,
    kmeans_images=20,
    kmeans_iters=3,
    dim=32,
    n_layers=1,
    n_heads=2,
    batch_size=4,
    warmup=1,
    ckpt_minutes=0.0,
)


def test_train_resume_and_export(tmp_path):
    from sjdbench.models.toy.model import build_toy_adapter
    from sjdbench.toyworld.train import train_toy

    meta = train_toy(tmp_path, steps=2, seed=3, threads=1, log=lambda *_: None, **MINI)
    assert meta["train"]["steps"] == 2
    state = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert state["step"] == 2
    # rerun with more steps continues from the checkpoint
    with pytest.raises(ValueError):
        train_toy(tmp_path, steps=4, seed=4, threads=1, log=lambda *_: None, **MINI)  # other seed: refused
    meta = train_toy(tmp_path, steps=3, seed=3, threads=1, log=lambda *_: None, **MINI)
    assert torch.load(tmp_path / "ckpt.pt", weights_only=False)["step"] == 3
    assert meta["train"]["steps"] == 3
    saved = json.loads((tmp_path / "toy.json").read_text())
    assert saved["model"]["dim"] == 32 and saved["layout"]["row_end_token"] is True
    assert saved["model"]["segment_len"] == 16 * 17 and saved["train"]["precision"] == "bf16"
    with pytest.raises(ValueError, match="different configuration"):  # precision is part of the run
        train_toy(tmp_path, steps=4, seed=3, threads=1, precision="fp32", log=lambda *_: None, **MINI)
    adapter = build_toy_adapter(tmp_path)
    assert adapter.n_codes == 32 and adapter.layout.n_positions == 16 * 17
    assert (tmp_path / "loss.csv").exists()


def test_unknown_precision_is_refused(tmp_path):
    from sjdbench.toyworld.train import train_toy

    with pytest.raises(ValueError, match="valid: bf16, fp32"):
        train_toy(tmp_path, steps=1, seed=3, threads=1, precision="fp8", log=lambda *_: None, **MINI)


def test_fp32_and_bf16_training_agree_at_the_start(tmp_path):
    """bf16 autocast is a speed knob, not another model: one step from the same init lands close."""
    from sjdbench.toyworld.train import train_toy

    losses = {}
    for precision in ("fp32", "bf16"):
        meta = train_toy(
            tmp_path / precision, steps=1, seed=3, threads=1, precision=precision, log=lambda *_: None, **MINI
        )
        losses[precision] = meta["final"]["val_loss"]
    assert abs(losses["fp32"] - losses["bf16"]) < 0.02 * losses["fp32"]


def test_devices_are_checked_before_any_work(tmp_path):
    from sjdbench.toyworld.train import resolve_train_device, train_toy

    with pytest.raises(ValueError, match="valid: auto, cpu, cuda"):
        train_toy(tmp_path, steps=1, device="tpu", log=lambda *_: None, **MINI)
    assert resolve_train_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            train_toy(tmp_path, steps=1, device="cuda", log=lambda *_: None, **MINI)
    assert not any(tmp_path.iterdir())  # refused before fitting or writing anything


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_on_cuda_resumes_on_cpu(tmp_path):
    from sjdbench.models.toy.model import build_toy_adapter
    from sjdbench.toyworld.train import train_toy

    meta = train_toy(tmp_path, steps=2, seed=3, threads=1, device="cuda", log=lambda *_: None, **MINI)
    assert meta["train"]["device"] == "cuda"
    meta = train_toy(tmp_path, steps=3, seed=3, threads=1, device="cpu", log=lambda *_: None, **MINI)
    assert meta["final"]["step"] == 3 and build_toy_adapter(tmp_path).n_codes == 32


def test_exported_weights_are_readable_by_all_and_checksummed(tmp_path):
    import stat

    from sjdbench.models.toy.model import verify_weights
    from sjdbench.models.weights import recorded_checksums, sha256_file
    from sjdbench.toyworld.train import train_toy

    train_toy(tmp_path, steps=1, seed=3, threads=1, log=lambda *_: None, **MINI)
    for name in ("toy_lm.safetensors", "toy_tokenizer.safetensors"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name  # safetensors itself writes 0600
        assert recorded_checksums(tmp_path)[name] == sha256_file(tmp_path / name)
    verify_weights(tmp_path)  # what every run checks before loading


def test_checking_the_shipped_weights_leaves_the_global_random_stream_as_it_was():
    """The check builds a throwaway network (random initialisation) to read the shapes it needs."""
    from sjdbench.models.toy.model import verify_weights

    torch.manual_seed(11)
    expected = torch.rand(4)
    torch.manual_seed(11)
    verify_weights()
    assert torch.equal(torch.rand(4), expected)


def test_the_shipped_weights_are_never_overwritten_by_default(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sjdbench.cli import app
    from sjdbench.models.toy.model import WEIGHTS_DIR
    from sjdbench.toyworld.train import DEFAULT_OUT, train_toy

    before = {p.name: p.stat().st_mtime_ns for p in WEIGHTS_DIR.iterdir()}
    with pytest.raises(ValueError, match="holds the shipped toy weights; train into another folder"):
        train_toy(WEIGHTS_DIR, steps=1, log=lambda *_: None, **MINI)
    for command in ("train", "train-clip"):
        result = CliRunner().invoke(app, ["toy", command, "--out", str(WEIGHTS_DIR), "--steps", "1"])
        assert result.exit_code == 2 and "--overwrite" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert {p.name: p.stat().st_mtime_ns for p in WEIGHTS_DIR.iterdir()} == before
    assert DEFAULT_OUT.name == "toy_weights" and not DEFAULT_OUT.is_absolute()  # the default is a new folder here
    monkeypatch.chdir(tmp_path)
    train_toy(None, steps=1, seed=3, threads=1, log=lambda *_: None, **MINI)
    assert (tmp_path / "toy_weights" / "toy_lm.safetensors").exists()
