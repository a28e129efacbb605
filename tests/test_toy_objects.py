"""The oracle object finder that checks whether toy samples draw the captioned shapes."""

import numpy as np
import pytest

from sjdbench.toyworld import world
from sjdbench.toyworld.objects import COLOURS, colour_mask, find_object, object_report

PLAIN = {"contrast": 0.3, "theta": 0.5, "curve": 1.0, "shade_k": [0.3, 0.2], "shade_phase": 0.0}


def _single(shape: str, size: str, centre=(32.0, 28.0), colour="red") -> world.Scene:
    obj = world.Obj(shape, colour, size, (1, 1), centre, 0.0, (0.6, 0.8))
    return world.Scene([obj], world.Background("gradient", "blue", PLAIN))


@pytest.mark.parametrize("shape", world.SHAPES)
@pytest.mark.parametrize("size", list(world.SIZES))
def test_every_shape_and_size_is_recognised_on_a_render(shape, size):
    found = find_object(world.render(_single(shape, size)), "red")
    assert (found.shape, found.size) == (shape, size)
    assert found.iou > 0.95 and found.centre == (32.0, 28.0)


def test_the_shaded_object_has_its_colour_and_the_background_does_not():
    image = world.render(_single("square", "big"))
    mask = colour_mask(image, "red")
    assert mask[32, 28] and not mask[2, 2]
    assert not colour_mask(image, "green").any()


def test_missing_object_is_a_miss():
    image = world.render(world.Scene([], world.Background("gradient", "blue", PLAIN)))
    assert not find_object(image, "red").present
    report = object_report(image[None], [_single("circle", "big")])
    assert report["present"] == 0.0 and report["shape"] == 0.0 and report["cell"] == 0.0


def test_report_on_held_out_renders_is_near_perfect_and_swaps_are_caught():
    images, scenes = world.render_scenes(90210, 0, 32)
    report = object_report(images, scenes)
    assert report["present"] == 1.0
    assert report["shape"] >= 0.8 and report["cell"] >= 0.8  # misses: occluded or cut by the border
    swapped = [world.with_attribute(s, 0, "shape", world.attribute_alternatives(s, 0, "shape")[0]) for s in scenes]
    assert object_report(images, swapped)["shape"] < report["shape"] - 0.3


def test_calibration_reports_objects_for_renders_round_trips_and_samples():
    import torch

    from sjdbench.models.toy.model import build_toy_adapter
    from sjdbench.run.toy_calibration import objects_calibration

    torch.set_num_threads(2)
    res = objects_calibration(build_toy_adapter(), 2)  # decodes 2 AR samples through the runner
    assert res["n_images"] == 2
    assert res["renders"]["present"] == 1.0
    for key in ("renders", "roundtrip", "ar"):
        assert res[key]["objects"] == res["renders"]["objects"] and 0.0 <= res[key]["shape"] <= 1.0


def test_toy_fd_ranks_renders_round_trips_and_noise():
    """Toy Fréchet distance to reference renders: other renders lowest, pure noise far above."""
    from sjdbench.models.toy.model import load_toy_tokenizer
    from sjdbench.run.toy_calibration import fd_calibration
    from sjdbench.toyworld.clip import load_toy_clip

    images, _ = world.render_batch(90210, 0, 48)
    tok = load_toy_tokenizer()
    noise = np.random.default_rng(0).integers(0, 256, images.shape, dtype=np.uint8)
    fd = fd_calibration(
        load_toy_clip(), {"renders": images, "roundtrip": tok.decode(tok.encode(images)), "noise": noise}, 256
    )
    assert fd["n_reference"] == 256
    assert fd["renders"] < fd["noise"] and fd["roundtrip"] < fd["noise"]
    assert fd["renders"] <= fd["roundtrip"] * 1.05


def test_a_region_no_template_overlaps_is_present_with_its_centroid_as_centre():
    """A thin frame along the image border: red is there, no shape matches it, and the cell check
    still has a centre to read (it raised a TypeError on None before)."""
    image = np.zeros((64, 64, 3), np.uint8)
    red = (np.array(COLOURS["red"]) * 255).astype(np.uint8)
    image[0, :] = image[-1, :] = image[:, 0] = image[:, -1] = red
    found = find_object(image, "red")
    assert found.present and found.shape is None and found.iou == 0.0
    assert found.centre == (32.0, 32.0)


def _scan(image: np.ndarray, colour: str) -> tuple:
    """The finder's template search written as the plain scan it stands for: every template at every
    centre within SEARCH_PX of the region's centroid, in (row, column, template) order, keeping the
    first strictly better IoU."""
    from scipy import ndimage

    from sjdbench.toyworld.objects import MIN_PIXELS, SEARCH_PX, _padded_templates

    labels, n = ndimage.label(colour_mask(image, colour))
    sizes = ndimage.sum_labels(np.ones_like(labels), labels, index=np.arange(1, n + 1)) if n else []
    if n == 0 or max(sizes) < MIN_PIXELS:
        return (False, None, None, 0.0, None)
    region = labels == int(np.argmax(sizes)) + 1
    cy, cx = (int(round(float(v) + 0.5)) for v in ndimage.center_of_mass(region))
    best = (0.0, None, None, None)
    for ty in range(max(cy - SEARCH_PX, 0), min(cy + SEARCH_PX, 64) + 1):
        for tx in range(max(cx - SEARCH_PX, 0), min(cx + SEARCH_PX, 64) + 1):
            for (shape, size), canvas in _padded_templates().items():
                m = canvas[64 - ty : 128 - ty, 64 - tx : 128 - tx]
                iou = np.count_nonzero(m & region) / np.count_nonzero(m | region)
                if iou > best[0]:
                    best = (iou, shape, size, (float(ty), float(tx)))
    return (True, best[1], best[2], best[0], best[3] or (float(cy), float(cx)))


def test_the_template_search_equals_the_plain_scan():
    """The finder scores every template at every centre at once (a correlation and integral images);
    what it finds must be what the scan finds, ties included, on renders, their noisy copies and
    objects cut by the image border."""
    images, _ = world.render_scenes(7, 0, 6)
    rng = np.random.default_rng(0)
    noisy = [np.clip(im.astype(int) + rng.integers(-60, 60, im.shape), 0, 255).astype(np.uint8) for im in images]
    border = [world.render(_single(shape, "big", centre=(2.0, 61.0))) for shape in world.SHAPES]
    for image in [*images, *noisy, *border]:
        for colour in COLOURS:
            found = find_object(image, colour)
            assert (found.present, found.shape, found.size, found.iou, found.centre) == _scan(image, colour)
