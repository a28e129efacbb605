"""An oracle object finder for the toy world: did a sample draw the captioned objects?

The toy CLIP reads colours and backgrounds well but shapes only weakly (docs/TOY.md), so it cannot
tell whether a generated image shows "a circle" or a circle-coloured blob. The world's geometry is
known exactly, so we can check directly: find the pixels that have the object's colour (any shading
of it), take the largest connected region, and match it against the world's own masks of every
shape and size near that region. The same finder run on the renders themselves gives the ceiling
(occlusion and image borders hide parts of objects), and on the tokenizer's round trips the ceiling
of what a model over these codes can show.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import cast

import numpy as np
from scipy import ndimage

from sjdbench.toyworld.world import CELL_CENTRES, COLOURS, SHAPES, SIZE, SIZES, Obj, Scene, _object_mask

# A pixel x has an object's colour c when it is a shading of it: x ~ s * c with s in the world's
# lighting range (1 +- 0.22, widened for patch quantisation) and a small residual off that line.
SHADE_RANGE = (0.65, 1.35)
MAX_RESIDUAL = 0.09  # RMS per channel, 0..1 scale
MIN_PIXELS = 12  # smaller regions are specks, not objects
SEARCH_PX = 5  # template centres tried around the region's centroid, in pixels each way


@dataclass
class Found:
    """What the finder saw for one captioned object."""

    present: bool  # a region of the object's colour exists
    shape: str | None  # best-matching shape (None when absent)
    size: str | None
    iou: float  # IoU of the region with the best template
    centre: tuple[float, float] | None  # (y, x) of the best template


def colour_mask(image: np.ndarray, colour: str) -> np.ndarray:
    """(64, 64) bool: pixels of image (64, 64, 3) uint8 that are a shading of the named colour."""
    x = image.astype(np.float64) / 255.0  # (64, 64, 3)
    c = np.array(COLOURS[colour])
    s = (x @ c) / (c @ c)  # (64, 64) projection on the colour's line
    residual = np.sqrt(((x - s[..., None] * c) ** 2).mean(-1))
    return (s >= SHADE_RANGE[0]) & (s <= SHADE_RANGE[1]) & (residual <= MAX_RESIDUAL)


@lru_cache(maxsize=1)
def _padded_templates() -> dict[tuple[str, str], np.ndarray]:
    """Every (shape, size) mask drawn at the centre of a 128x128 canvas, so that a crop is that
    mask at any integer centre in the 64x64 image (world centres are whole pixels)."""
    out = {}
    for shape in SHAPES:
        for size in SIZES:
            m, _ = _object_mask(Obj(shape, "red", size, (0, 0), (SIZE / 2, SIZE / 2), 0.0, (0.0, 1.0)))
            canvas = np.zeros((2 * SIZE, 2 * SIZE), dtype=bool)
            canvas[SIZE // 2 : SIZE // 2 + SIZE, SIZE // 2 : SIZE // 2 + SIZE] = m
            out[(shape, size)] = canvas
    return out


def _template_at(canvas: np.ndarray, cy: int, cx: int) -> np.ndarray:
    """(64, 64) crop of a padded template so that its centre lands on pixel corner (cy, cx)."""
    return canvas[SIZE - cy : 2 * SIZE - cy, SIZE - cx : 2 * SIZE - cx]


def find_object(image: np.ndarray, colour: str) -> Found:
    """The largest region of `colour` in image (64, 64, 3) and the shape/size it matches best."""
    labels, n = ndimage.label(colour_mask(image, colour))
    if n == 0:
        return Found(False, None, None, 0.0, None)
    sizes = ndimage.sum_labels(np.ones_like(labels), labels, index=np.arange(1, n + 1))
    best_label = int(np.argmax(sizes)) + 1
    if sizes[best_label - 1] < MIN_PIXELS:
        return Found(False, None, None, 0.0, None)
    region = labels == best_label
    cy, cx = (int(round(float(v) + 0.5)) for v in ndimage.center_of_mass(region))
    best: tuple[float, str | None, str | None, tuple[float, float] | None] = (0.0, None, None, None)
    for ty in range(max(cy - SEARCH_PX, 0), min(cy + SEARCH_PX, SIZE) + 1):
        for tx in range(max(cx - SEARCH_PX, 0), min(cx + SEARCH_PX, SIZE) + 1):
            for (shape, size), canvas in _padded_templates().items():
                m = _template_at(canvas, ty, tx)
                iou = np.count_nonzero(m & region) / np.count_nonzero(m | region)
                if iou > best[0]:
                    best = (iou, shape, size, (float(ty), float(tx)))
    best_iou, best_shape, best_size, best_centre = best
    # a region that no template overlaps anywhere near its centroid (a thin ring, say) still has a place
    centre = best_centre if best_centre is not None else (float(cy), float(cx))
    return Found(True, best_shape, best_size, float(best_iou), centre)


def _cell_of(centre: tuple[float, float]) -> tuple[int, int]:
    """The layout cell whose centre is nearest to a pixel position."""
    centres = np.array(CELL_CENTRES)
    return int(np.abs(centres - centre[0]).argmin()), int(np.abs(centres - centre[1]).argmin())


def object_report(images: np.ndarray, scenes: list[Scene]) -> dict:
    """Rates over all captioned objects of `scenes`, as found in `images` (n, 64, 64, 3) uint8.

    present: a region of the object's colour exists; shape: that region matches the captioned shape
    best (chance 1/6); size: ... and size (chance 1/12); cell: for objects whose caption gives an
    absolute position, the region lies in that cell of the 3x3 layout (chance about 1/9).
    Absent objects count as misses everywhere.
    """
    n_obj = n_abs = present = shape_ok = size_ok = cell_ok = 0
    for image, scene in zip(images, scenes):
        for obj in scene.objects:
            found = find_object(image, obj.colour)
            n_obj += 1
            present += found.present
            shape_ok += found.shape == obj.shape
            size_ok += found.shape == obj.shape and found.size == obj.size
            if obj.relation is None:
                n_abs += 1
                # a present object's centre is its best template's (the finder sets both together)
                cell_ok += found.present and _cell_of(cast(tuple[float, float], found.centre)) == obj.cell
    return {
        "objects": n_obj,
        "present": present / n_obj,
        "shape": shape_ok / n_obj,
        "shape_and_size": size_ok / n_obj,
        "cell": cell_ok / max(n_abs, 1),
        "objects_with_absolute_position": n_abs,
    }
