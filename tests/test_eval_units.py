"""Small parts of the evaluation: bootstrap over prompts, named image preprocessing, object counts."""

import numpy as np

from sjdbench.eval.evaluators.imaging import bilinear, centre_crop, for_inception, resize_for_clip
from sjdbench.eval.evaluators.toy import OBJECT_FIELDS, object_counts
from sjdbench.eval.metrics.bootstrap import bootstrap_ci, prompt_groups
from sjdbench.toyworld import world


def test_prompt_groups_keep_samples_of_a_prompt_together():
    groups = prompt_groups(np.array([3, 3, 5, 7, 5]))
    assert [g.tolist() for g in groups] == [[0, 1], [2, 4], [3]]


def test_bootstrap_interval_covers_the_mean_at_about_the_nominal_rate():
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(200):
        values = rng.normal(1.0, 2.0, size=40)
        lo, hi = bootstrap_ci(lambda rows: values[rows].mean(), prompt_groups(np.arange(40)), 400, seed=trial)
        hits += lo <= 1.0 <= hi
    assert 0.88 <= hits / 200 <= 0.99  # percentile intervals run a little narrow at n = 40


def test_paired_interval_is_tighter_than_the_unpaired_spread():
    rng = np.random.default_rng(1)
    difficulty = rng.normal(0, 10, size=50)  # shared by both runs, cancels when paired
    a, b = difficulty + rng.normal(0, 1, 50), difficulty + 0.5 + rng.normal(0, 1, 50)
    groups = prompt_groups(np.arange(50))
    paired = bootstrap_ci(lambda rows: (b[rows] - a[rows]).mean(), groups, 1000)
    alone = bootstrap_ci(lambda rows: b[rows].mean(), groups, 1000)
    assert paired[0] < 0.5 < paired[1] and paired[1] - paired[0] < (alone[1] - alone[0]) / 5


def test_bootstrap_needs_two_prompts_and_some_resamples():
    assert bootstrap_ci(lambda rows: 0.0, prompt_groups(np.array([1, 1])), 100) is None
    assert bootstrap_ci(lambda rows: 0.0, prompt_groups(np.array([1, 2])), 0) is None


def test_preprocessing_presets_keep_constant_images_and_reach_inception_size():
    image = np.full((30, 50, 3), (200, 17, 90), dtype=np.uint8)
    for preset in ("sjd", "clean"):
        out = for_inception(image, preset)
        assert out.shape == (299, 299, 3) and out.dtype == np.uint8
        assert (out == np.array([200, 17, 90], dtype=np.uint8)).all()
    assert for_inception(image, "raw") is image
    assert resize_for_clip(image, "crop_lanczos256").shape == (256, 256, 3)


def test_clean_preset_crops_the_centre_and_sjd_squashes_the_whole_image():
    image = np.zeros((20, 60, 3), dtype=np.uint8)
    image[:, :20] = 255  # a white left third: cropped away by `clean`, squashed in by `sjd`
    assert centre_crop(image).shape == (20, 20, 3) and centre_crop(image).max() == 0
    assert for_inception(image, "clean").max() == 0
    assert for_inception(image, "sjd")[:, :90].min() > 200


def test_bilinear_matches_torch_interpolate_rounded():
    import torch
    import torch.nn.functional as F

    image = np.random.default_rng(2).integers(0, 256, (37, 23, 3), dtype=np.uint8)
    reference = (
        F.interpolate(
            torch.tensor(image, dtype=torch.float64).permute(2, 0, 1)[None],
            size=(299, 299),
            mode="bilinear",
            align_corners=False,
        )[0]
        .permute(1, 2, 0)
        .round()
        .clamp(0, 255)
        .byte()
        .numpy()
    )
    assert np.array_equal(bilinear(image, 299), reference)


def test_object_counts_are_perfect_on_renders_and_catch_a_swapped_shape():
    images, scenes = world.render_scenes(4242, 0, 12)
    totals, swapped = np.zeros(len(OBJECT_FIELDS)), np.zeros(len(OBJECT_FIELDS))
    for image, scene in zip(images, scenes):
        totals += object_counts(image, world.caption(scene))
        other = world.attribute_alternatives(scene, 0, "shape")[0]
        swapped += object_counts(image, world.caption(world.with_attribute(scene, 0, "shape", other)))
    fields = dict(zip(OBJECT_FIELDS, totals))
    assert fields["present"] == fields["objects"]
    assert fields["colour"] >= 0.85 * fields["objects"]  # occlusion and borders hide some shapes
    assert fields["cell"] >= 0.85 * fields["positioned"]
    swapped_fields = dict(zip(OBJECT_FIELDS, swapped))
    assert swapped_fields["colour"] <= fields["colour"] - 0.7 * len(scenes)  # object 0 of every caption now wrong
    assert swapped_fields["present"] == fields["present"] and swapped_fields["cell"] == fields["cell"]
