"""HPS v2 through sjdbench equals a direct computation of the hpsv2 package's steps on a tiny random
ViT-H-14-shaped open_clip model saved in the released checkpoint layout ({"state_dict": ...}); the
checkpoint is found in the hub cache; missing or wrong weights fail at once in one line."""

import time

import eval_helpers as helpers
import numpy as np
import open_clip
import pytest
import torch
import torchvision.transforms.functional as TF
from PIL import Image
from torchvision.transforms import InterpolationMode
from typer.testing import CliRunner

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.hpsv2 import HPS_FILES, hps_weights
from sjdbench.eval.evaluators.settings import compose_eval
from sjdbench.eval.score import score_run

TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
LONG = "a very long prompt " + " ".join(f"word{i}" for i in range(90))  # more than 77 BPE tokens
TEXTS = ["a red circle", "Two  CATS on a sofa &amp; a dog", LONG, "a bus in the rain", "a kite"]
SHAPES = [(48, 40), (64, 64), (30, 50), (32, 32), (80, 20)]  # portrait, square, landscape, at size, narrow


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """Random weights in the layout of HPS_v2.1_compressed.pt: {"state_dict": <the CLIP model's>}."""
    torch.manual_seed(0)
    model = open_clip.create_model("ViT-H-14", pretrained=None, **TINY)
    path = tmp_path_factory.mktemp("hps") / "tiny_hps.pt"
    torch.save({"state_dict": model.state_dict()}, path)
    return path


@pytest.fixture
def run(tmp_path):
    run = helpers.synthetic_run(tmp_path / "results", "debug-sjd-00000000000d", [0] * len(TEXTS), texts=TEXTS)
    rng = np.random.default_rng(2)
    for sample, shape in zip(run.samples, SHAPES):
        helpers.save_png(sample.image, rng.integers(0, 256, (*shape, 3), dtype=np.uint8))
    return run


def settings(weights, *extra):
    config = compose_eval([f"eval.hpsv2.weights={weights}", "eval.device=cpu", *extra])
    config.hpsv2.model_kwargs = TINY
    return config


def released_transform(image: Image.Image, size: int) -> torch.Tensor:
    """The package's validation transform, step by step with torchvision: RGB, ToTensor, the longer
    side to `size` (bicubic on the tensor), zero padding around the centre, OpenAI normalisation."""
    x = TF.to_tensor(image.convert("RGB"))
    height, width = x.shape[1:]
    scale = size / float(max(height, width))
    if scale != 1.0:
        new = (round(height * scale), round(width * scale))
        x = TF.resize(x, list(new), InterpolationMode.BICUBIC)
        pad_h, pad_w = size - new[0], size - new[1]
        x = TF.pad(x, [pad_w // 2, pad_h // 2, pad_w - pad_w // 2, pad_h - pad_h // 2], fill=0)
    mean, std = open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD
    return TF.normalize(x, list(mean), list(std))


def direct_scores(checkpoint, texts, images) -> np.ndarray:
    """The score as hpsv2.score computes it: the checkpoint's state_dict into ViT-H-14, then the
    diagonal of image_features @ text_features.T of the L2-normalised embeddings."""
    model = open_clip.create_model("ViT-H-14", pretrained=None, output_dict=True, **TINY)
    model.load_state_dict(torch.load(checkpoint, weights_only=True)["state_dict"])
    model.eval()
    tokenizer = open_clip.get_tokenizer("ViT-H-14")
    scores = []
    with torch.no_grad():
        for image, text in zip(images, texts):
            out = model(released_transform(image, 32)[None], tokenizer([text]))
            scores.append(float(torch.diagonal(out["image_features"] @ out["text_features"].T)[0]))
    return np.asarray(scores)


def test_hpsv2_equals_the_direct_computation(run, tiny_checkpoint):
    doc = score_run(run, "hpsv2", settings(tiny_checkpoint)).doc
    images = [Image.open(s.image) for s in run.samples]
    expected = direct_scores(tiny_checkpoint, TEXTS, images)
    got = np.array([row["value"] for row in doc["per_sample"]])
    assert got == pytest.approx(expected, abs=1e-5)
    assert doc["value"] == pytest.approx(expected.mean(), abs=1e-5)
    assert doc["extra"]["mean_cosine"] == pytest.approx(expected.mean(), abs=1e-5)
    assert doc["ci95"][0] <= doc["value"] <= doc["ci95"][1] and doc["n"] == len(TEXTS)
    assert doc["lower_is_better"] is False and doc["metric"] == "HPS v2.1 (cosine per sample)"


def test_the_benchmark_scale_is_100_times_the_cosine(run, tiny_checkpoint):
    cosine = score_run(run, "hpsv2", settings(tiny_checkpoint)).doc
    hundred = score_run(run, "hpsv2", settings(tiny_checkpoint, "eval.hpsv2.scale=100cos")).doc
    assert hundred["value"] == pytest.approx(100 * cosine["value"], rel=1e-12)
    assert hundred["protocol_hash"] != cosine["protocol_hash"]


def test_protocol_records_checkpoint_transform_precision_and_truncation(run, tiny_checkpoint):
    from sjdbench.eval.evaluators.hashing import file_sha256

    doc = score_run(run, "hpsv2", settings(tiny_checkpoint)).doc
    protocol = doc["protocol"]
    assert protocol["weights_file"] == "tiny_hps.pt" and protocol["weights_sha256"] == file_sha256(tiny_checkpoint)
    assert "HPS_v2.1_compressed.pt" in protocol["checkpoint"] and protocol["backbone"] == "open_clip ViT-H-14"
    assert "zero-padded to 32x32" in protocol["image_transform"] and "antialias=True" in protocol["image_transform"]
    assert protocol["precision"] == "float32" and protocol["prompt"] == "as given, no prefix"
    assert protocol["score"] == "cosine per sample" and protocol["context_length"] == 77
    assert doc["extra"]["truncated_prompts"] == 1 and doc["extra"]["truncated_prompt_ids"] == [2]


def test_the_checkpoint_is_found_in_the_hub_cache(tmp_path, tiny_checkpoint):
    snapshot = tmp_path / "hub" / "models--xswu--HPSv2" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--xswu--HPSv2" / "refs").mkdir()
    (tmp_path / "hub" / "models--xswu--HPSv2" / "refs" / "main").write_text("0" * 40)
    (snapshot / "HPS_v2.1_compressed.pt").write_bytes(tiny_checkpoint.read_bytes())
    assert hps_weights("v2.1", None, str(tmp_path / "hub")) == snapshot / "HPS_v2.1_compressed.pt"


@pytest.mark.parametrize("version", ["v2.1", "v2.0"])
def test_missing_hps_weights_fail_at_once_naming_the_file_and_the_command(tmp_path, monkeypatch, version):
    monkeypatch.setenv("HPS_ROOT", str(tmp_path / "hps-root"))
    start = time.perf_counter()
    with pytest.raises(UserError) as error:
        hps_weights(version, None, str(tmp_path / "empty-hub"))
    assert time.perf_counter() - start < 2.0
    message = str(error.value)
    assert f"hf download xswu/HPSv2 {HPS_FILES[version]}" in message and str(tmp_path / "empty-hub") in message
    assert str(tmp_path / "hps-root") in message and "eval.hpsv2.weights=" in message and "\n" not in message


def test_a_file_that_is_not_an_hps_checkpoint_fails_in_one_line(run, tmp_path):
    wrong = tmp_path / "wrong.pt"
    torch.save({"state_dict": {"visual.proj": torch.zeros(2, 2)}}, wrong)
    with pytest.raises(UserError) as error:
        score_run(run, "hpsv2", settings(wrong))
    assert "is not an HPS checkpoint" in str(error.value) and "\n" not in str(error.value)
    (tmp_path / "text.pt").write_text("not a checkpoint")
    with pytest.raises(UserError, match="is not an HPS checkpoint"):
        score_run(run, "hpsv2", settings(tmp_path / "text.pt"))


def test_eval_cli_reports_missing_hps_weights_in_one_line(run, tmp_path, monkeypatch):
    from sjdbench.cli import app

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HPS_ROOT", str(tmp_path / "hps-root"))
    result = CliRunner().invoke(app, ["eval", str(run.dir), "eval.evaluators=[hpsv2]"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "HPS_v2.1_compressed.pt" in result.output and "hf download" in result.output


def test_bad_hps_settings_list_the_valid_choices():
    with pytest.raises(UserError, match="unknown eval.hpsv2.version 'v3'; choose one of: v2.1, v2.0"):
        compose_eval(["eval.hpsv2.version=v3"])
    with pytest.raises(UserError, match="unknown eval.hpsv2.scale 'x'; choose one of: cosine, 100cos"):
        compose_eval(["eval.hpsv2.scale=x"])
