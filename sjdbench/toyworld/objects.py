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
from scipy.signal import fftconvolve

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


@lru_cache(maxsize=1)
def _template_table() -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray]:
    """The padded templates as one stack (T, 128, 128) bool, in `_padded_templates` order, with their
    integral images (T, 129, 129): area[t, y, x] = pixels of template t above row y and left of
    column x, so the pixels of any crop are four look-ups."""
    templates = _padded_templates()
    names = list(templates)
    stack = np.stack([templates[name] for name in names])  # (T, 128, 128)
    area = np.zeros((len(names), 2 * SIZE + 1, 2 * SIZE + 1), dtype=np.int64)
    area[:, 1:, 1:] = stack.cumsum(1).cumsum(2)
    return names, stack, area


def find_object(image: np.ndarray, colour: str) -> Found:
    """The largest region of `colour` in image (64, 64, 3) and the shape/size it matches best: every
    template at every whole-pixel centre within SEARCH_PX of the region's centroid, scored by IoU;
    the first best in (row, column, template) order, as a scan in that order would keep it."""
    labels, n = ndimage.label(colour_mask(image, colour))
    if n == 0:
        return Found(False, None, None, 0.0, None)
    sizes = ndimage.sum_labels(np.ones_like(labels), labels, index=np.arange(1, n + 1))
    best_label = int(np.argmax(sizes)) + 1
    if sizes[best_label - 1] < MIN_PIXELS:
        return Found(False, None, None, 0.0, None)
    region = labels == best_label
    cy, cx = (int(round(float(v) + 0.5)) for v in ndimage.center_of_mass(region))
    names, stack, area = _template_table()
    centre_y = np.arange(max(cy - SEARCH_PX, 0), min(cy + SEARCH_PX, SIZE) + 1)  # (ny,)
    centre_x = np.arange(max(cx - SEARCH_PX, 0), min(cx + SEARCH_PX, SIZE) + 1)  # (nx,)
    # a template centred on pixel corner (ty, tx) is the crop canvas[SIZE - ty :, SIZE - tx :] of 64 x 64
    top, left = SIZE - centre_y, SIZE - centre_x
    ys, xs = np.nonzero(region)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1  # the region's bounding box
    # overlap[t, i, j] = pixels of the region inside template t centred at (centre_y[i], centre_x[j]):
    # one correlation of the box with the canvases over every centre at once; its sums of at most
    # 64 x 64 ones come back within far less than 0.5 of the whole numbers they are
    canvases = stack[:, top[-1] + y0 : top[0] + y1, left[-1] + x0 : left[0] + x1].astype(np.float64)
    box = region[y0:y1, x0:x1].astype(np.float64)
    overlap = fftconvolve(canvases, box[None, ::-1, ::-1], mode="valid", axes=(1, 2))  # (T, ny, nx), centres descending
    overlap = np.rint(overlap[:, ::-1, ::-1]).astype(np.int64)  # (T, ny, nx)
    bottom, right = top + SIZE, left + SIZE
    drawn = (
        area[:, bottom[:, None], right[None, :]]
        - area[:, top[:, None], right[None, :]]
        - area[:, bottom[:, None], left[None, :]]
        + area[:, top[:, None], left[None, :]]
    )  # (T, ny, nx) template pixels inside the image
    iou = (overlap / (drawn + ys.size - overlap)).transpose(1, 2, 0)  # (ny, nx, T)
    first = int(np.argmax(iou))  # the first of the largest in scan order
    best_iou = float(iou.flat[first])
    if best_iou <= 0.0:  # no template overlaps the region anywhere near its centroid (a thin ring, say)
        return Found(True, None, None, 0.0, (float(cy), float(cx)))
    iy, ix, t = np.unravel_index(first, iou.shape)
    shape, size = names[t]
    return Found(True, shape, size, best_iou, (float(centre_y[iy]), float(centre_x[ix])))


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
