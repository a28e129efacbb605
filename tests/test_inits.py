"""Fresh-draft inits on a 3x3 grid with row-end tokens (id 3): copies, chains, fallbacks, forced ids."""

import numpy as np
import torch

from sjdbench.adapter import SegmentLayout
from sjdbench.decoding.inits.neighbours import InitContext, neighbour_tables
from sjdbench.decoding.parts import resolve_part

LAYOUT = SegmentLayout.grid(3, 3, eol_token=3)  # positions: row r col c at 4r + c, <eol> at 4r + 3
LEGAL = torch.arange(10, 20)


def Init(name: str):
    """The registered init of that name, built."""
    return resolve_part("init", name, "decoder.init").build(None)


def context(guess: list[int], latest: list[int] | None = None) -> InitContext:
    left_of, above_of = neighbour_tables(LAYOUT)
    n = LAYOUT.n_positions
    full = torch.full((n,), -1)
    full[: len(guess)] = torch.tensor(guess)
    argmax = torch.full((n,), -1)
    if latest:
        argmax[: len(latest)] = torch.tensor(latest)
    return InitContext(LAYOUT, LAYOUT.forced, left_of, above_of, LEGAL, full, argmax)


def test_neighbour_tables():
    left_of, above_of = neighbour_tables(LAYOUT)
    assert left_of.tolist()[:8] == [-1, 0, 1, -1, -1, 4, 5, -1]
    assert above_of.tolist()[4:8] == [0, 1, 2, -1]


def test_left_copies_and_chains_through_fresh_slots():
    ctx = context([11])
    drafts = Init("left").fill([1, 2, 3, 4, 5], ctx, torch.Generator().manual_seed(0))
    assert drafts[:3].tolist() == [11, 11, 3]  # chain from position 0; <eol> forced
    assert drafts[4] == drafts[3 + 1]  # position 5 copies the (random) draft at row start 4
    assert int(drafts[3]) in LEGAL.tolist()
    assert torch.equal(ctx.guess[1:6], drafts)


def test_above_copies_row_above():
    ctx = context([11, 12, 13, 3])
    drafts = Init("above").fill([4, 5, 6, 7, 8], ctx, torch.Generator().manual_seed(0))
    assert drafts.tolist()[:4] == [11, 12, 13, 3]
    assert drafts[4] == 11  # position 8 (row 2, col 0) copies position 4, itself fresh


def test_argmax_left_prefers_the_latest_distribution():
    ctx = context([11, 12], latest=[15, 16])
    drafts = Init("argmax_left").fill([2], ctx, torch.Generator().manual_seed(0))
    assert drafts.tolist() == [16]
    ctx = context([11, 12])
    assert Init("argmax_left").fill([2], ctx, torch.Generator().manual_seed(0)).tolist() == [12]


def test_random_is_legal_and_seeded():
    a = Init("random").fill(list(range(1, 12)), context([11]), torch.Generator().manual_seed(3))
    b = Init("random").fill(list(range(1, 12)), context([11]), torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    forced = LAYOUT.forced[1:12]
    assert torch.equal(a[forced >= 0], forced[forced >= 0])
    assert np.isin(a[forced < 0].numpy(), LEGAL.numpy()).all()
