"""Fresh-draft inits on a 3x3 grid with row-end tokens (id 3): copies, chains, fallbacks, forced ids."""

import numpy as np
import torch

from sjdbench.adapter import SegmentLayout
from sjdbench.decoding.inits.neighbours import neighbour_tables
from sjdbench.decoding.parts import InitContext
from sjdbench.decoding.registry import resolve_part

LAYOUT = SegmentLayout.grid(3, 3, eol_token=3)  # positions: row r col c at 4r + c, <eol> at 4r + 3
LEGAL = torch.arange(10, 20)


def Init(name: str):
    """The registered init of that name, built."""
    return resolve_part("init", name, "decoder.init").build(None)


def context(name: str, guess: list[int], latest: list[int] | None = None):
    """The init and its state for one sample whose first positions hold these guesses (and latest
    argmaxes), told to it the way the loop tells it."""
    left_of, above_of = neighbour_tables(LAYOUT)
    init = Init(name)
    state = init.begin(InitContext(LAYOUT, LAYOUT.forced, LEGAL, left_of, above_of, 20, torch.float32, batch=1))
    one = torch.zeros(len(guess), dtype=torch.long)
    init.observe(state, one, torch.arange(len(guess)), torch.tensor(guess))
    if latest:
        p = torch.nn.functional.one_hot(torch.tensor(latest), 20).float()
        init.observe_p(state, torch.zeros(len(latest), dtype=torch.long), torch.arange(len(latest)), p)
    return init, state


def fill(name: str, positions: list[int], guess: list[int], latest: list[int] | None = None, seed: int = 0):
    init, state = context(name, guess, latest)
    drafts, _ = init.fill(state, 0, np.array(positions), torch.Generator().manual_seed(seed))
    return drafts, state


def test_neighbour_tables():
    left_of, above_of = neighbour_tables(LAYOUT)
    assert left_of.tolist()[:8] == [-1, 0, 1, -1, -1, 4, 5, -1]
    assert above_of.tolist()[4:8] == [0, 1, 2, -1]


def test_left_copies_and_chains_through_fresh_slots():
    drafts, state = fill("left", [1, 2, 3, 4, 5], [11])
    assert drafts[:3].tolist() == [11, 11, 3]  # chain from position 0; <eol> forced
    assert drafts[4] == drafts[3 + 1]  # position 5 copies the (random) draft at row start 4
    assert int(drafts[3]) in LEGAL.tolist()
    assert torch.equal(state.guess[0, 1:6], drafts)


def test_above_copies_row_above():
    drafts, _ = fill("above", [4, 5, 6, 7, 8], [11, 12, 13, 3])
    assert drafts.tolist()[:4] == [11, 12, 13, 3]
    assert drafts[4] == 11  # position 8 (row 2, col 0) copies position 4, itself fresh


def test_argmax_left_prefers_the_latest_distribution():
    drafts, _ = fill("argmax_left", [2], [11, 12], latest=[15, 16])
    assert drafts.tolist() == [16]
    assert fill("argmax_left", [2], [11, 12])[0].tolist() == [12]


def test_random_is_legal_and_seeded():
    a, _ = fill("random", list(range(1, 12)), [11], seed=3)
    b, _ = fill("random", list(range(1, 12)), [11], seed=3)
    assert torch.equal(a, b)
    forced = LAYOUT.forced[1:12]
    assert torch.equal(a[forced >= 0], forced[forced >= 0])
    assert np.isin(a[forced < 0].numpy(), LEGAL.numpy()).all()
