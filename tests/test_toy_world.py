"""The toy world renderer and the patch tokenizer."""

import numpy as np

from sjdbench.toyworld.world import MAX_CAPTION, caption, dataset, render, render_batch, sample_scene


def test_same_seed_same_scene():
    a = sample_scene(np.random.default_rng(123))
    b = sample_scene(np.random.default_rng(123))
    assert caption(a) == caption(b)
    assert np.array_equal(render(a), render(b))
    img, cap = next(iter(dataset(5, 1)))
    img2, cap2 = next(iter(dataset(5, 1)))
    assert cap == cap2 and np.array_equal(img, img2)


def test_images_and_captions():
    images, caps = render_batch(0, 0, 64)
    assert images.shape == (64, 64, 64, 3) and images.dtype == np.uint8
    assert all(len(c) <= MAX_CAPTION for c in caps)
    assert len(set(caps)) == len(caps)
    assert all("background" in c for c in caps)
    # different seeds give different scenes
    other, _ = render_batch(1, 0, 8)
    assert not np.array_equal(images[:8], other)


def test_background_structure_is_spatial():
    """Neighbouring pixels are strongly correlated (no i.i.d. pixel noise)."""
    images, _ = render_batch(3, 0, 32)
    x = images.astype(np.float64)
    horiz = np.abs(x[:, :, 1:] - x[:, :, :-1]).mean()
    shuffled = np.abs(x[:, :, 1:] - x[:, :, np.random.default_rng(0).permutation(63)]).mean()
    assert horiz < 0.25 * shuffled


def test_tokenizer_roundtrip_bound():
    from sjdbench.models.toy.model import load_toy_tokenizer
    from sjdbench.models.toy.tokenizer import roundtrip_error

    tok = load_toy_tokenizer()
    assert tok.n_codes >= 512 and tuple(tok.codebook().shape) == (tok.n_codes, 48)
    images, _ = render_batch(777, 0, 64)
    codes = tok.encode(images)
    assert codes.shape == (64, 16, 16) and int(codes.max()) < tok.n_codes
    assert tok.decode(codes[0]).shape == (64, 64, 3)
    err = roundtrip_error(tok, images)
    # measured on held-out renders: MAE ~9.5, RMSE ~16 (0..255 scale)
    assert err["mae"] < 13.0 and err["rmse"] < 22.0
    # decode(encode(decode(c))) == c: centroids are their own nearest code
    again = tok.encode(tok.decode(codes[:4]))
    assert (again == codes[:4]).float().mean() > 0.99


def test_tokenizer_fit_is_seeded():
    from sjdbench.models.toy.tokenizer import PatchTokenizer

    images, _ = render_batch(0, 0, 100)
    a = PatchTokenizer.fit(images, k=64, iters=5, seed=1)
    b = PatchTokenizer.fit(images, k=64, iters=5, seed=1)
    assert np.array_equal(a.codebook().numpy(), b.codebook().numpy())


def test_attribute_swaps_change_exactly_one_attribute():
    from sjdbench.toyworld.clip import hard_negative_captions, swapped_captions
    from sjdbench.toyworld.world import COLOURS, SHAPES, attribute_alternatives, caption, render_scenes

    images, scenes = render_scenes(8, 0, 12)
    assert images.shape == (12, 64, 64, 3)
    for scene in scenes:
        for k, obj in enumerate(scene.objects):
            shapes = attribute_alternatives(scene, k, "shape")
            colours = attribute_alternatives(scene, k, "colour")
            assert sorted(shapes + [obj.shape]) == sorted(SHAPES)
            assert obj.colour not in colours and scene.background.colour not in colours
            assert len(colours) == len(COLOURS) - 2
            caps = swapped_captions(scene, k, "shape")
            assert caps[0] == caption(scene) and len(set(caps)) == len(SHAPES)
    negatives = hard_negative_captions(scenes, np.random.default_rng(0))
    assert len(negatives) == 12 * 2
    true = {caption(s) for s in scenes}
    assert not true & set(negatives)
    # a shape swap keeps the caption's words except the shape words
    for scene, neg in zip(scenes, negatives[:12]):  # attribute-major: the 12 shape swaps come first
        diff = [(a, b) for a, b in zip(caption(scene).split(), neg.split()) if a != b]
        assert diff and all(a.strip(",") in SHAPES and b.strip(",") in SHAPES for a, b in diff)
