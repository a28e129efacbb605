"""`argmax_left` — the argmax of the left neighbour's latest distribution (its guess if it was
never predicted)."""

from __future__ import annotations

from sjdbench.decoding.inits.neighbours import SpatialInit


class ArgmaxLeftInit(SpatialInit):
    table = "left"
    use_argmax = True
