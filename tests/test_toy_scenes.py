"""Toy captions back to scenes: the parser inverts the caption grammar, relational cells follow
their posterior under the world's layout process, and reference renders are reproducible."""

import numpy as np
import pytest

from sjdbench.eval.evaluators.toy_scenes import (
    NotAToyCaption,
    parse_caption,
    reference_renders,
    relational_cells,
    scene_for_caption,
)
from sjdbench.toyworld import world


def test_every_world_caption_parses_back_and_a_drawn_scene_has_the_same_caption():
    for i in range(600):
        scene = world.sample_scene(np.random.default_rng([7, i]))
        text = world.caption(scene)
        parsed = parse_caption(text)
        for original, read in zip(scene.objects, parsed.objects, strict=True):
            assert (read.shape, read.colour, read.size, read.relation) == (
                original.shape,
                original.colour,
                original.size,
                original.relation,
            )
            if read.cell is not None:
                assert read.cell == original.cell
        assert (parsed.background_colour, parsed.texture) == (scene.background.colour, scene.background.texture)
        assert world.caption(scene_for_caption(parsed, np.random.default_rng([8, i]))) == text


def test_relational_cells_follow_the_world_layout_posterior():
    """'right of the A' then an absolute C at the bottom centre: C is in the same column as B's cell
    (0, 1), which the world captions absolutely only 40 % of the time, so (0, 1) is less likely."""
    parsed = parse_caption(
        "a big red circle at the top left, a small blue square right of the circle and "
        "a big green ring at the bottom, on a white striped background"
    )
    assignments, weights = relational_cells(parsed)
    exact = {cells[1]: w for cells, w in zip(assignments, weights)}
    assert exact[(0, 1)] == pytest.approx(0.4 / 1.4) and exact[(0, 2)] == pytest.approx(1.0 / 1.4)

    # Monte Carlo of the world's layout process (cells without replacement; a later object aligned
    # with the previous one gets a relation with probability 0.6), conditioned on this caption
    rng = np.random.default_rng(0)
    draws = 400_000
    cells = np.argsort(rng.random((draws, 9)), axis=1)[:, :3]  # 3 distinct cells per draw
    rows, cols = cells // 3, cells % 3
    coin = rng.random((draws, 3)) < 0.6
    aligned_1 = (rows[:, 1] == rows[:, 0]) | (cols[:, 1] == cols[:, 0])
    aligned_2 = (rows[:, 2] == rows[:, 1]) | (cols[:, 2] == cols[:, 1])
    relation_1 = aligned_1 & coin[:, 1]
    relation_2 = aligned_2 & coin[:, 2]
    right_of = (rows[:, 1] == rows[:, 0]) & (cols[:, 1] > cols[:, 0])
    match = (cells[:, 0] == 0) & relation_1 & right_of & ~relation_2 & (cells[:, 2] == 7)  # cell 7 = (2, 1)
    share_01 = np.mean(cells[match, 1] == 1)
    assert match.sum() > 300
    assert share_01 == pytest.approx(0.4 / 1.4, abs=4 * np.sqrt(0.2 / match.sum()))


@pytest.mark.parametrize(
    "text",
    [
        "a photo of a cat",
        "a big red circle in the middle, on a blue striped background",
        "a big red blob in the center, on a blue striped background",
        "a big red circle in the center and a small blue square below the ring, on a blue striped background",
    ],
)
def test_text_outside_the_grammar_is_not_a_toy_caption(text):
    with pytest.raises(NotAToyCaption):
        parse_caption(text)


def test_reference_renders_are_reproducible_and_differ_across_draws():
    captions = [
        "a big red circle in the center, on a blue striped background",
        "a small yellow square at the top left, on a white cloudy background",
    ]
    first = reference_renders(captions, 2, seed=3)
    assert first.shape == (4, 64, 64, 3) and first.dtype == np.uint8
    assert np.array_equal(first, reference_renders(captions, 2, seed=3))
    assert not np.array_equal(first[0], first[1])  # another background draw of the same caption
