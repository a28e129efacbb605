"""ADT-Tree's adaptation (arXiv 2512.21857), our reading: how easy the region around the first
undecided position was, and the tree shape that follows from it. The released repository holds no
adaptive rule (docs/READINGS.md), so this is the one statement of it both trees share (`tree`: the
Jacobi tree's width; `drafter_tree`: the drafter tree's width and depth).

r = the mean number of tokens decided by the iterations that decided the first undecided position's
left and upper grid neighbours (1 in a hard region, where each iteration decided one token; larger
where iterations decided runs). A tree then narrows as r grows, round(width / r) between 1 and its
width, and deepens, round(depth * r) between its depth and a cap the topology sets (the window, the
positions left). Without a decided neighbour r is unknown and the tree keeps its configured shape.
Only decided positions are read, so a tree chosen from r is fixed before any draft it holds is
verified: recursive rejection over siblings stays exact.
"""

from __future__ import annotations

from sjdbench.decoding.parts import SampleView
from sjdbench.errors import UserError

ADAPT = ("none", "neighbours")  # none: the configured shape everywhere | neighbours: shaped by r


def check_adapt(adapt: str) -> None:
    if adapt not in ADAPT:
        raise UserError(f"adapt '{adapt}' is unknown; choose one of: {', '.join(ADAPT)}")


def neighbour_run(sample: SampleView, n: int) -> float | None:
    """r for position n: the mean run of the iterations that decided its left and upper neighbours;
    None when n is past the segment or neither neighbour is decided (the first row's start)."""
    assert sample.run is not None and sample.neighbours is not None  # the loop's views carry them
    if n >= sample.n_positions:
        return None
    left_of, above_of = sample.neighbours
    near = [int(x) for x in (left_of[n], above_of[n]) if x >= 0 and sample.run[x] > 0]
    if not near:
        return None
    return sum(int(sample.run[x]) for x in near) / len(near)


def narrowed(width: int, r: float | None) -> int:
    """round(width / r), between 1 and width: the full width where r is 1 or unknown."""
    return width if r is None else max(1, min(width, round(width / r)))


def deepened(depth: int, r: float | None, most: int) -> int:
    """round(depth * r), between depth and `most` (never below the configured depth, even where the
    cap is lower: the cap only limits how far adaptation deepens)."""
    return depth if r is None else max(depth, min(most, round(depth * r)))
