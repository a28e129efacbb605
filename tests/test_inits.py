"""Fresh-draft inits on a 3x3 grid with row-end tokens (id 3): copies, chains, fallbacks, forced ids."""

import numpy as np
import torch

from sjdbench.adapter import SegmentLayout
from sjdbench.decoding.inits.neighbours import neighbour_tables
from sjdbench.decoding.parts import InitContext, SampleView
from sjdbench.decoding.registry import resolve_part
from sjdbench.decoding.state import Drafts, PendingDrafts

LAYOUT = SegmentLayout.grid(3, 3, eol_token=3)  # positions: row r col c at 4r + c, <eol> at 4r + 3
LEGAL = torch.arange(10, 20)


def Init(name: str):
    """The registered init of that name, built."""
    return resolve_part("init", name, "decoder.init").build(None)


def sample(guess: list[int], decided: int, seed: int) -> SampleView:
    """One sample whose first `decided` positions hold decided tokens and whose next positions hold
    waiting drafts: `guess` lists both, as the loop holds them."""
    n = LAYOUT.n_positions
    tokens = torch.full((n,), -1, dtype=torch.long)
    tokens[:decided] = torch.tensor(guess[:decided], dtype=torch.long)
    pending = PendingDrafts(1, n, 20, torch.device("cpu"), torch.float32)
    waiting = np.arange(decided, len(guess))
    pending.put(
        np.zeros(len(waiting), dtype=np.int64), Drafts.new(waiting, torch.tensor(guess[decided:]), None, 20, False)
    )
    decided_mask = np.zeros(n, dtype=bool)
    decided_mask[:decided] = True
    generator = torch.Generator().manual_seed(seed)
    return SampleView(0, tokens, decided_mask, decided_mask.copy(), LAYOUT, LAYOUT.forced, LEGAL, pending, generator)


def fill(name: str, positions: list[int], guess: list[int], latest: list[int] | None = None, seed: int = 0):
    """The init's drafts at `positions` for a sample whose first positions hold these guesses (the
    first one decided, the others waiting drafts) and latest argmaxes, told to it as the loop tells it."""
    left_of, above_of = neighbour_tables(LAYOUT)
    init = Init(name)
    state = init.begin(InitContext(LAYOUT, LAYOUT.forced, LEGAL, left_of, above_of, 20, torch.float32, batch=1))
    if latest:
        p = torch.nn.functional.one_hot(torch.tensor(latest), 20).float()
        init.observe_p(state, torch.zeros(len(latest), dtype=torch.long), torch.arange(len(latest)), p)
    drafts, _ = init.fill(state, sample(guess, 1, seed), np.array(positions))
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


def test_a_fill_changes_nothing_it_reads():
    """An init returns its drafts; the sample it read and its own state stay as they were (the loop
    keeps the drafts waiting), so the same draws give the same drafts again."""
    left_of, above_of = neighbour_tables(LAYOUT)
    for name in ("left", "above", "argmax_left", "random", "uniform"):
        init = Init(name)
        state = init.begin(InitContext(LAYOUT, LAYOUT.forced, LEGAL, left_of, above_of, 20, torch.float32, batch=1))
        view = sample([11, 12], 1, seed=0)
        before = (view.tokens.clone(), view.pending.position.copy(), view.guess(np.arange(8)).clone())
        first, _ = init.fill(state, view, np.array([2, 5, 6]))
        assert torch.equal(view.tokens, before[0]) and (view.pending.position == before[1]).all(), name
        assert torch.equal(view.guess(np.arange(8)), before[2]), name
        view.generator.manual_seed(0)
        assert torch.equal(init.fill(state, view, np.array([2, 5, 6]))[0], first), name


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
