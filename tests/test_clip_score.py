"""CLIP-Score through sjdbench equals a hand computation on a tiny random open_clip model loaded
from a local weights file; its protocol is recorded; missing real weights fail at once."""

import time

import eval_helpers as helpers
import numpy as np
import open_clip
import pytest
import torch
from PIL import Image

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.clip_score import resolve_weights
from sjdbench.eval.evaluators.settings import compose_eval
from sjdbench.eval.score import score_run

MODEL = "ViT-B-32-quickgelu"
TINY = {
    "embed_dim": 16,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
LONG = "a very long prompt " + " ".join(f"word{i}" for i in range(90))  # more than 77 BPE tokens
TEXTS = ["a red circle", "two cats on a sofa", LONG, "a bus in the rain", "a kite"]


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    torch.manual_seed(0)
    model = open_clip.create_model(MODEL, pretrained=None, **TINY)
    path = tmp_path_factory.mktemp("clip") / "tiny_clip.pt"
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture
def run(tmp_path):
    run = helpers.synthetic_run(tmp_path / "results", "debug-sjd-00000000000c", [0] * len(TEXTS), texts=TEXTS)
    rng = np.random.default_rng(1)
    for sample in run.samples:
        helpers.save_png(sample.image, rng.integers(0, 256, (48, 40, 3), dtype=np.uint8))
    return run


def settings(weights, *extra):
    config = compose_eval([f"eval.clip.model={MODEL}", f"eval.clip.pretrained={weights}", "eval.device=cpu", *extra])
    config.clip.model_kwargs = TINY
    return config


def hand_cosines(weights, texts, images, prefix=""):
    model, _, transform = open_clip.create_model_and_transforms(MODEL, pretrained=str(weights), **TINY)
    model.eval()
    tokenizer = open_clip.get_tokenizer(MODEL)
    with torch.no_grad():
        image = model.encode_image(torch.stack([transform(Image.fromarray(i)) for i in images]))
        text = model.encode_text(tokenizer([prefix + t for t in texts]))
    image = image / image.norm(dim=-1, keepdim=True)
    text = text / text.norm(dim=-1, keepdim=True)
    return (image.double() * text.double()).sum(-1).numpy()


def test_clip_score_equals_the_hand_computation(run, tiny_weights):
    doc = score_run(run, "clip_score", settings(tiny_weights)).doc
    images = [np.asarray(Image.open(s.image)) for s in run.samples]
    cosines = hand_cosines(tiny_weights, TEXTS, images)
    expected = 100 * np.maximum(cosines, 0)
    got = np.array([row["value"] for row in doc["per_sample"]])
    assert got == pytest.approx(expected, abs=1e-4)
    assert doc["value"] == pytest.approx(expected.mean(), abs=1e-4)
    assert doc["extra"]["mean_cosine"] == pytest.approx(cosines.mean(), abs=1e-6)
    assert doc["ci95"][0] <= doc["value"] <= doc["ci95"][1]


def test_lantern_scale_uses_the_prefix_and_the_raw_cosine(run, tiny_weights):
    doc = score_run(
        run,
        "clip_score",
        settings(
            tiny_weights,
            "eval=lantern",
            f"eval.clip.pretrained={tiny_weights}",
            f"eval.clip.model={MODEL}",
            "eval.clip.image_resize=none",
        ),
    ).doc
    images = [np.asarray(Image.open(s.image)) for s in run.samples]
    cosines = hand_cosines(tiny_weights, TEXTS, images, prefix="A photo depicts ")
    assert doc["value"] == pytest.approx(cosines.mean(), abs=1e-5)
    assert doc["protocol"]["prefix"] == "A photo depicts " and doc["protocol"]["score"] == "raw cosine per sample"


def test_protocol_records_backbone_weights_transform_and_truncation(run, tiny_weights):
    from sjdbench.eval.evaluators.hashing import file_sha256

    doc = score_run(run, "clip_score", settings(tiny_weights, "eval.clip.image_resize=bilinear299")).doc
    protocol = doc["protocol"]
    assert protocol["backbone"] == MODEL and protocol["weights_file"] == "tiny_clip.pt"
    assert protocol["weights_sha256"] == file_sha256(tiny_weights)
    assert protocol["image_resize_before_clip"] == "bilinear299" and "Resize" in protocol["clip_transform"]
    assert protocol["context_length"] == 77 and protocol["n"] == len(TEXTS)
    assert doc["extra"]["truncated_prompts"] == 1 and doc["extra"]["truncated_prompt_ids"] == [2]
    assert {"torch", "open_clip_torch", "numpy"} <= set(protocol["versions"])


def test_scores_are_not_recomputed_and_other_protocols_get_their_own_file(run, tiny_weights):
    first = score_run(run, "clip_score", settings(tiny_weights))
    again = score_run(run, "clip_score", settings(tiny_weights))
    assert again.status == "present" and again.path == first.path
    other = score_run(run, "clip_score", settings(tiny_weights, "eval.clip.prefix=A photo of "))
    assert other.status == "scored" and other.path != first.path


def test_missing_clip_weights_fail_at_once_naming_the_file_and_where(tmp_path):
    start = time.perf_counter()
    with pytest.raises(UserError) as error:
        resolve_weights("ViT-B-16-quickgelu", "openai", str(tmp_path / "empty-cache"))
    assert time.perf_counter() - start < 2.0
    message = str(error.value)
    assert "timm/vit_base_patch16_clip_224.openai" in message and "ViT-B-16.pt" in message
    assert "eval.clip.pretrained=" in message and str(tmp_path / "empty-cache") in message and "\n" not in message


def test_unknown_tag_lists_the_valid_ones():
    with pytest.raises(UserError, match="tags: openai"):
        resolve_weights("ViT-B-16-quickgelu", "laion9000", None)


def test_scoring_switches_the_hub_offline_even_after_it_was_imported(monkeypatch):
    import os

    from huggingface_hub import constants

    from sjdbench.eval.evaluators.hashing import env_flag_offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    env_flag_offline()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.HF_HUB_OFFLINE is True
