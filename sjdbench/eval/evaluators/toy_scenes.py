"""Toy-world captions back to scenes: what a caption asks for, and renders that satisfy it.

The toy evaluators score a sample against its caption, so they need the caption's objects (shape,
colour, size, cell or relation) and, for a Fréchet distance, reference renders of the same caption.
A caption fixes the objects' attributes and their absolute cells; it leaves open the cells of
objects placed by a relation ("below the diamond"), the background's texture parameters and the
lighting. `scene_for_caption` draws those from the world's own conditional distribution: the
relational cells exactly from their posterior (cells are drawn uniformly without replacement, and
a later object in the same row or column as the previous one is captioned by a relation with
probability 0.6), the background by the world's own sampler. So its renders are draws from
p(image | caption) of the world, the distribution a perfect toy model would sample.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import numpy as np

from sjdbench.toyworld import world

RELATIONS = ("left of", "right of", "above", "below")
RELATION_PROBABILITY = 0.6  # world._draw_scene: a later object aligned with the previous one gets a relation
_SUFFIX = re.compile(r"^(?P<objects>.+), on an? (?P<colour>\w+) (?P<texture>\w+) background$")
_OBJECT = re.compile(
    r"^an? (?P<size>\w+) (?P<colour>\w+) (?P<shape>\w+) "
    r"(?:(?P<absolute>in the center|on the (?:left|right)|at the (?:top|bottom)(?: (?:left|right))?)"
    rf"|(?P<relation>{'|'.join(RELATIONS)}) the (?P<other>\w+))$"
)


class NotAToyCaption(ValueError):
    """The text is not a caption of the toy grammar."""


@dataclass(frozen=True)
class CaptionedObject:
    shape: str
    colour: str
    size: str
    cell: tuple[int, int] | None  # absolute cell, None when placed by a relation
    relation: str | None  # relation to the previous object


@dataclass(frozen=True)
class ParsedCaption:
    objects: tuple[CaptionedObject, ...]
    background_colour: str
    texture: str


def _cell_of_phrase(phrase: str) -> tuple[int, int]:
    if phrase == "in the center":
        return (1, 1)
    words = phrase.split()
    if words[0] == "on":  # "on the left|right": middle row
        return (1, world.COL_WORDS.index(words[2]))
    row = world.ROW_WORDS.index(words[2])
    return (row, world.COL_WORDS.index(words[3]) if len(words) > 3 else 1)


def _split_objects(text: str) -> list[str]:
    """'A', 'A and B' or 'A, B and C' (object phrases contain neither commas nor ' and ')."""
    head, _, last = text.rpartition(" and ")
    if not head:
        return [text]
    return [*head.split(", "), last]


def parse_caption(text: str) -> ParsedCaption:
    """The objects and background a toy caption asks for; NotAToyCaption for anything else."""
    match = _SUFFIX.match(text.strip())
    if not match or match["colour"] not in world.COLOURS or match["texture"] not in world.TEXTURES:
        raise NotAToyCaption(f"not a toy-world caption (no '..., on a <colour> <texture> background'): {text!r}")
    objects: list[CaptionedObject] = []
    for phrase in _split_objects(match["objects"]):
        m = _OBJECT.match(phrase)
        if not m or m["size"] not in world.SIZES or m["colour"] not in world.COLOURS or m["shape"] not in world.SHAPES:
            raise NotAToyCaption(f"not a toy-world object phrase: {phrase!r} in {text!r}")
        if m["relation"] and (not objects or objects[-1].shape != m["other"]):
            raise NotAToyCaption(f"'{m['relation']} the {m['other']}' does not name the previous object in {text!r}")
        cell = _cell_of_phrase(m["absolute"]) if m["absolute"] else None
        objects.append(CaptionedObject(m["shape"], m["colour"], m["size"], cell, m["relation"]))
    if not 1 <= len(objects) <= 3:
        raise NotAToyCaption(f"a toy caption has 1 to 3 objects, this one {len(objects)}: {text!r}")
    return ParsedCaption(tuple(objects), match["colour"], match["texture"])


def _satisfies(relation: str, previous: tuple[int, int], cell: tuple[int, int]) -> bool:
    return world._relation(previous, cell) == relation


def relational_cells(parsed: ParsedCaption) -> tuple[list[tuple[tuple[int, int], ...]], np.ndarray]:
    """Every assignment of cells to the objects, with its posterior weight (summing to 1).

    Prior: distinct cells, uniform. Likelihood of the caption's form: a relation object must stand in
    that relation (factor 0.6); an absolute object after an aligned previous object was captioned
    absolutely with probability 0.4, otherwise with probability 1.
    """
    free = [i for i, o in enumerate(parsed.objects) if o.cell is None]
    taken = {o.cell for o in parsed.objects if o.cell is not None}
    if len(taken) < len(parsed.objects) - len(free):
        raise NotAToyCaption("two objects of the caption share a cell")
    options = [c for c in itertools.product(range(3), range(3)) if c not in taken]
    assignments, weights = [], []
    for chosen in itertools.permutations(options, len(free)):
        placed = dict(zip(free, chosen))
        cells = [o.cell if o.cell is not None else placed[i] for i, o in enumerate(parsed.objects)]
        weight = 1.0
        for i, obj in enumerate(parsed.objects[1:], start=1):
            aligned = world._relation(cells[i - 1], cells[i]) is not None
            if obj.relation is not None:
                weight *= RELATION_PROBABILITY if _satisfies(obj.relation, cells[i - 1], cells[i]) else 0.0
            elif aligned:
                weight *= 1.0 - RELATION_PROBABILITY
        if weight > 0:
            assignments.append(tuple(cells))
            weights.append(weight)
    if not assignments:
        raise NotAToyCaption("no layout satisfies the caption's relations")
    w = np.asarray(weights)
    return assignments, w / w.sum()


def scene_for_caption(parsed: ParsedCaption, rng: np.random.Generator) -> world.Scene:
    """A scene drawn from the world's distribution given the caption (caption(scene) reproduces it)."""
    assignments, weights = relational_cells(parsed)
    cells = assignments[int(rng.choice(len(assignments), p=weights))]
    objects = []
    for obj, cell in zip(parsed.objects, cells):
        light_angle = rng.uniform(0, 2 * math.pi)
        objects.append(
            world.Obj(
                shape=obj.shape,
                colour=obj.colour,
                size=obj.size,
                cell=cell,
                centre=(world.CELL_CENTRES[cell[0]], world.CELL_CENTRES[cell[1]]),
                angle=0.0,
                light=(float(np.sin(light_angle)), float(np.cos(light_angle))),
                relation=obj.relation,
            )
        )
    while True:  # the world's background sampler, conditioned on the captioned texture by rejection
        background = world._sample_background(rng, parsed.background_colour)
        if background.texture == parsed.texture:
            return world.Scene(objects, background)


def reference_renders(captions: list[str], per_caption: int, seed: int) -> np.ndarray:
    """(len(captions) * per_caption, 64, 64, 3) uint8: renders k of caption i at row i * per_caption + k."""
    parsed = [parse_caption(c) for c in captions]
    images = [
        world.render(scene_for_caption(p, np.random.default_rng([seed, i, k])))
        for i, p in enumerate(parsed)
        for k in range(per_caption)
    ]
    return np.stack(images)
