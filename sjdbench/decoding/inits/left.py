"""`left` — copy the left neighbour on the 2-D grid (LlamaGen's `repeat_horizon` in the SJD code)."""

from __future__ import annotations

from sjdbench.decoding.inits.neighbours import SpatialInit


class LeftInit(SpatialInit):
    table = "left"
