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
