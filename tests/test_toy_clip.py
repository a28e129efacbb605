"""The shipped toy CLIP, and its training entry point."""

import numpy as np
import pytest
import torch

from sjdbench.toyworld.clip import CLIP_FILE, WEIGHTS_DIR, clip_score, image_features, load_toy_clip
from sjdbench.toyworld.world import render_batch


def test_toy_clip_scores_matched_above_shuffled():
    torch.set_num_threads(2)
    assert (WEIGHTS_DIR / CLIP_FILE).exists()
    load_toy_clip()
    images, caps = render_batch(31337, 0, 24)
    matched = clip_score(images, caps)
    shuffled = clip_score(images, list(np.roll(caps, 3)))
    assert matched.shape == (24,)
    assert matched.mean() > shuffled.mean() + 5.0
    assert (matched > shuffled).mean() > 0.75
    feats = image_features(images)
    assert tuple(feats.shape) == (24, 64)
    torch.testing.assert_close(feats.norm(dim=-1), torch.ones(24), atol=1e-4, rtol=0)


@pytest.mark.slow  # about 5 s: scores 256 renders
def test_toy_clip_detects_swapped_colours_and_shapes():
    """Hard-negative training: the true caption beats copies with one object's colour (shape) changed."""
    from sjdbench.toyworld.clip import attribute_accuracy
    from sjdbench.toyworld.world import render_scenes

    torch.set_num_threads(2)
    images, scenes = render_scenes(4711, 0, 96)
    clip = load_toy_clip()
    colour = attribute_accuracy(clip, images, scenes, "colour")
    shape = attribute_accuracy(clip, images, scenes, "shape")
    assert colour["n"] == shape["n"] == sum(len(s.objects) for s in scenes)
    assert colour["accuracy"] > 0.85  # shipped: 0.97 on 256 held-out renders; chance 0.11
    assert shape["accuracy"] > 0.65  # shipped: 0.82 on 256 held-out renders; chance 0.17


@pytest.mark.slow  # about 8 s: a short training
def test_train_toy_clip_writes_loadable_weights(tmp_path):
    from sjdbench.toyworld.clip import CLIP_FILE, CLIP_META, train_toy_clip

    meta = train_toy_clip(tmp_path, steps=2, batch_size=8, threads=1, device="cpu", log=lambda *_: None)
    assert meta["train"]["steps"] == 2 and meta["train"]["device"] == "cpu"
    assert (tmp_path / CLIP_FILE).exists() and (tmp_path / CLIP_META).exists()
    feats = load_toy_clip(tmp_path).image_features(np.zeros((2, 64, 64, 3), dtype=np.uint8))
    assert tuple(feats.shape) == (2, 64)
    with pytest.raises(ValueError, match="valid: auto, cpu, cuda"):
        train_toy_clip(tmp_path, steps=1, device="tpu", log=lambda *_: None)
