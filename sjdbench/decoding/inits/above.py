"""`above` — copy the token one row up (the SJD paper's best variant; SJD++'s spatial prior)."""

from __future__ import annotations

from sjdbench.decoding.inits.neighbours import SpatialInit


class AboveInit(SpatialInit):
    table = "above"
