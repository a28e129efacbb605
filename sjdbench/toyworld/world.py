"""The toy world: seeded 64x64 scenes from a small caption grammar.

A scene is 1-3 shaded objects (shape, colour, size, position or relation) in front of a textured
background. The background's entropy comes from spatially dependent structure (smooth random
fields, oriented stripes and waves with random frequency and phase, gradients, shading), never from
i.i.d. pixel noise: per-pixel noise would make neighbouring tokens independent given the row above
and make speculative Jacobi decoding unrealistically fast. Everything is a pure function of the
numpy Generator, so `dataset(seed, n)` is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import numpy as np

SIZE = 64

COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.12, 0.12),
    "green": (0.15, 0.65, 0.2),
    "blue": (0.15, 0.3, 0.85),
    "yellow": (0.95, 0.85, 0.15),
    "orange": (0.95, 0.55, 0.1),
    "purple": (0.55, 0.2, 0.7),
    "white": (0.93, 0.93, 0.93),
    "black": (0.1, 0.1, 0.1),
    "pink": (0.95, 0.55, 0.7),
    "cyan": (0.2, 0.8, 0.85),
}
SHAPES = ("circle", "square", "triangle", "diamond", "cross", "ring")
# Half-extents in pixels: whole patches, so every bounding box lies on the 4x4 patch grid (4 and 6
# tokens across). Smaller objects become the same few codes whatever their shape.
SIZES = {"small": 8.0, "big": 12.0}
# textures: (caption word, weight)
TEXTURES = {"striped": 0.3, "wavy": 0.2, "cloudy": 0.3, "gradient": 0.2}
ROW_WORDS = ("top", "middle", "bottom")
COL_WORDS = ("left", "center", "right")
# Objects sit exactly at their cell's centre, on patch corners. Why no jitter: an object's first
# token row must be a clear object code for an AR model to learn *where* objects start. With
# sub-patch offsets the first row was a faint edge code hardly different from the background, and
# a 2M-parameter model never learned to place objects from the caption (its start-token
# probabilities did not depend on the position words at all).
CELL_CENTRES = (16.0, 32.0, 48.0)


@dataclass
class Obj:
    shape: str
    colour: str
    size: str
    cell: tuple[int, int]  # (row, col) in the 3x3 layout grid
    centre: tuple[float, float]  # (y, x) in pixels
    angle: float  # rotation in radians; the world draws 0 (upright shapes, see _draw_scene)
    light: tuple[float, float]  # direction of the shading gradient
    relation: str | None = None  # e.g. "left of" the previous object; None = absolute position


@dataclass
class Background:
    texture: str
    colour: str
    params: dict = field(default_factory=dict)


@dataclass
class Scene:
    objects: list[Obj]
    background: Background


def _position_phrase(cell: tuple[int, int]) -> str:
    r, c = cell
    if (r, c) == (1, 1):
        return "in the center"
    if r == 1:
        return f"on the {COL_WORDS[c]}"
    if c == 1:
        return f"at the {ROW_WORDS[r]}"
    return f"at the {ROW_WORDS[r]} {COL_WORDS[c]}"


def _relation(a: tuple[int, int], b: tuple[int, int]) -> str | None:
    """Relation of cell b to cell a when it is unambiguous (same row or same column)."""
    if a[0] == b[0]:
        return "left of" if b[1] < a[1] else "right of"
    if a[1] == b[1]:
        return "above" if b[0] < a[0] else "below"
    return None


def _sample_background(rng: np.random.Generator, colour: str) -> Background:
    names = list(TEXTURES)
    weights = np.array([TEXTURES[n] for n in names])
    texture = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    p: dict = {"contrast": float(rng.uniform(0.25, 0.45))}
    if texture == "striped":
        p.update(
            theta=float(rng.uniform(0, np.pi)),
            freq=float(rng.uniform(2.0, 6.0)),
            phase=float(rng.uniform(0, 2 * np.pi)),
        )
    elif texture == "wavy":
        p.update(
            theta=float(rng.uniform(0, np.pi)),
            freq=float(rng.uniform(2.0, 5.0)),
            phase=float(rng.uniform(0, 2 * np.pi)),
            warp_freq=float(rng.uniform(1.0, 3.0)),
            warp_amp=float(rng.uniform(0.5, 1.5)),
            warp_phase=float(rng.uniform(0, 2 * np.pi)),
        )
    elif texture == "cloudy":
        n_modes = 6
        p.update(
            kx=rng.uniform(-3.0, 3.0, n_modes).tolist(),
            ky=rng.uniform(-3.0, 3.0, n_modes).tolist(),
            phase=rng.uniform(0, 2 * np.pi, n_modes).tolist(),
            amp=rng.uniform(0.3, 1.0, n_modes).tolist(),
        )
    else:  # gradient
        p.update(theta=float(rng.uniform(0, 2 * np.pi)), curve=float(rng.uniform(0.6, 1.6)))
    # every texture gets a soft low-frequency shading field on top (lighting)
    p.update(shade_k=rng.uniform(-1.2, 1.2, 2).tolist(), shade_phase=float(rng.uniform(0, 2 * np.pi)))
    return Background(texture, colour, p)


MAX_CAPTION = 150


def sample_scene(rng: np.random.Generator) -> Scene:
    """A random scene whose caption fits in MAX_CAPTION characters (redrawn from the same rng if not)."""
    while True:
        scene = _draw_scene(rng)
        if len(caption(scene)) <= MAX_CAPTION:
            return scene


def _draw_scene(rng: np.random.Generator) -> Scene:
    n_obj = int(rng.choice([1, 2, 3], p=[0.4, 0.4, 0.2]))
    colour_names = list(COLOURS)
    bg_colour = colour_names[int(rng.integers(len(colour_names)))]
    cells = [(int(i) // 3, int(i) % 3) for i in rng.choice(9, size=n_obj, replace=False)]
    objects: list[Obj] = []
    for i, cell in enumerate(cells):
        colour = bg_colour
        while colour == bg_colour:
            colour = colour_names[int(rng.integers(len(colour_names)))]
        size = "big" if rng.random() < 0.5 else "small"
        centre = (CELL_CENTRES[cell[0]], CELL_CENTRES[cell[1]])
        light_angle = rng.uniform(0, 2 * np.pi)
        relation = None
        if i > 0 and rng.random() < 0.6:
            relation = _relation(cells[i - 1], cell)
        objects.append(
            Obj(
                shape=SHAPES[int(rng.integers(len(SHAPES)))],
                colour=colour,
                size=size,
                cell=cell,
                centre=centre,
                # upright: a rotated square is a diamond, and rotation multiplies the outlines to learn
                angle=0.0,
                light=(float(np.sin(light_angle)), float(np.cos(light_angle))),
                relation=relation,
            )
        )
    return Scene(objects, _sample_background(rng, bg_colour))


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def caption(scene: Scene) -> str:
    parts = []
    for i, o in enumerate(scene.objects):
        noun = f"{o.size} {o.colour} {o.shape}"
        if o.relation is not None:
            prev = scene.objects[i - 1]
            parts.append(f"{_article(noun)} {noun} {o.relation} the {prev.shape}")
        else:
            parts.append(f"{_article(noun)} {noun} {_position_phrase(o.cell)}")
    if len(parts) == 1:
        objects = parts[0]
    elif len(parts) == 2:
        objects = f"{parts[0]} and {parts[1]}"
    else:
        objects = f"{parts[0]}, {parts[1]} and {parts[2]}"
    bg = scene.background
    return f"{objects}, on {_article(bg.colour)} {bg.colour} {bg.texture} background"


_YY, _XX = np.meshgrid(np.arange(SIZE, dtype=np.float64) + 0.5, np.arange(SIZE, dtype=np.float64) + 0.5, indexing="ij")
_UY, _UX = _YY / SIZE, _XX / SIZE  # unit coordinates


def _background_field(bg: Background) -> np.ndarray:
    """A field in [-1, 1] (64, 64) with smooth spatial structure."""
    p = bg.params
    if bg.texture == "striped":
        t = np.cos(p["theta"]) * _UX + np.sin(p["theta"]) * _UY
        f = np.sin(2 * np.pi * p["freq"] * t + p["phase"])
    elif bg.texture == "wavy":
        t = np.cos(p["theta"]) * _UX + np.sin(p["theta"]) * _UY
        s = -np.sin(p["theta"]) * _UX + np.cos(p["theta"]) * _UY
        warp = p["warp_amp"] * np.sin(2 * np.pi * p["warp_freq"] * s + p["warp_phase"])
        f = np.sin(2 * np.pi * p["freq"] * t + warp + p["phase"])
    elif bg.texture == "cloudy":
        f = np.zeros((SIZE, SIZE))
        for kx, ky, ph, a in zip(p["kx"], p["ky"], p["phase"], p["amp"]):
            f += a * np.sin(2 * np.pi * (kx * _UX + ky * _UY) + ph)
        f = f / (np.abs(f).max() + 1e-6)
    else:
        t = np.cos(p["theta"]) * (_UX - 0.5) + np.sin(p["theta"]) * (_UY - 0.5)  # in about [-0.7, 0.7]
        t = np.clip(t / 0.71 * 0.5 + 0.5, 0, 1) ** p["curve"]
        f = 2 * t - 1
    return f


def _object_mask(o: Obj) -> tuple[np.ndarray, np.ndarray]:
    """Boolean mask (64, 64) of the object's pixels and local coordinates normalised by its size."""
    r = SIZES[o.size]
    dy, dx = _YY - o.centre[0], _XX - o.centre[1]
    ca, sa = np.cos(o.angle), np.sin(o.angle)
    u, v = (ca * dx + sa * dy) / r, (-sa * dx + ca * dy) / r  # rotated, unit half-extent
    if o.shape == "circle":
        mask = u**2 + v**2 <= 1.0
    elif o.shape == "ring":
        d = u**2 + v**2
        mask = (d <= 1.0) & (d >= 0.45**2)
    elif o.shape == "square":
        mask = (np.abs(u) <= 1.0) & (np.abs(v) <= 1.0)
    elif o.shape == "diamond":
        mask = np.abs(u) + np.abs(v) <= 1.0
    elif o.shape == "cross":
        mask = ((np.abs(u) <= 0.34) & (np.abs(v) <= 1.0)) | ((np.abs(v) <= 0.34) & (np.abs(u) <= 1.0))
    else:  # triangle, pointing up: apex at v=-1, base at v=1
        mask = (v <= 1.0) & (v >= -1.0) & (np.abs(u) <= (v + 1.0) / 2.0)
    return mask, np.stack([u, v])


def render(scene: Scene) -> np.ndarray:
    """The scene as a (64, 64, 3) uint8 RGB image."""
    bg = scene.background
    p = bg.params
    base = np.array(COLOURS[bg.colour])
    f = _background_field(bg)
    shade = 0.12 * np.sin(2 * np.pi * (p["shade_k"][0] * _UX + p["shade_k"][1] * _UY) + p["shade_phase"])
    # mix the base colour towards a darker and a lighter tone of itself along the field
    dark, light = base * 0.45, base + (1.0 - base) * 0.5
    c = p["contrast"] * f
    img = np.where(
        c[..., None] >= 0, base + c[..., None] * (light - base) / 0.45, base - c[..., None] * (dark - base) / 0.45
    )
    img = img * (1.0 + shade[..., None])
    for o in scene.objects:  # later objects occlude earlier ones
        mask, (u, v) = _object_mask(o)
        # soft shadow offset down-right, then the shaded object
        shadow, _ = _object_mask(
            Obj(o.shape, o.colour, o.size, o.cell, (o.centre[0] + 2, o.centre[1] + 2), o.angle, o.light)
        )
        img[shadow & ~mask] *= 0.6
        lit = 1.0 + 0.22 * (o.light[0] * v + o.light[1] * u)
        col = np.array(COLOURS[o.colour])[None, :] * lit[mask][:, None]
        img[mask] = col
    return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def render_scenes(seed: int, start: int, n: int) -> tuple[np.ndarray, list[Scene]]:
    """Like `render_batch`, but returns the scenes themselves (for attribute-swapped captions)."""
    scenes = [sample_scene(np.random.default_rng([seed, i])) for i in range(start, start + n)]
    return np.stack([render(s) for s in scenes]), scenes


def attribute_alternatives(scene: Scene, k: int, attribute: str) -> list[str]:
    """Values object k's shape or colour could take instead (colours: never its own or the background's)."""
    obj = scene.objects[k]
    if attribute == "shape":
        return [v for v in SHAPES if v != obj.shape]
    if attribute == "colour":
        return [v for v in COLOURS if v not in (obj.colour, scene.background.colour)]
    raise ValueError(f"unknown attribute {attribute!r}; valid: shape, colour")


def with_attribute(scene: Scene, k: int, attribute: str, value: str) -> Scene:
    """A copy of the scene whose object k has another shape or colour (for captions, not rendering)."""
    objects = list(scene.objects)
    changes: dict[str, Any] = {attribute: value}
    objects[k] = replace(objects[k], **changes)
    return Scene(objects, scene.background)


def dataset(seed: int, n: int) -> Iterator[tuple[np.ndarray, str]]:
    """n deterministic (image, caption) pairs; scene i depends only on (seed, i)."""
    for i in range(n):
        scene = sample_scene(np.random.default_rng([seed, i]))
        yield render(scene), caption(scene)


def render_batch(seed: int, start: int, n: int) -> tuple[np.ndarray, list[str]]:
    """Scenes start..start+n-1 of `dataset(seed, .)` as (n, 64, 64, 3) uint8 and captions."""
    images, scenes = render_scenes(seed, start, n)
    return images, [caption(s) for s in scenes]


def grammar_words() -> list[str]:
    """Every word the caption grammar can produce, in a fixed order (<unk> first)."""
    fixed = [
        "a",
        "an",
        "at",
        "the",
        "on",
        "in",
        "of",
        "and",
        ",",
        "left",
        "right",
        "above",
        "below",
        "background",
        *ROW_WORDS,
        *COL_WORDS,
    ]
    from sjdbench.models.toy.text import UNK

    words = [UNK]
    for w in [*fixed, *SIZES, *COLOURS, *SHAPES, *TEXTURES]:
        if w not in words:
            words.append(w)
    return words
