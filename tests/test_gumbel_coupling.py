"""SCD-GS's Gumbel coupling: the draw is the released code's, a position's vector is fixed, batched
equals unbatched, and the knob refuses what it cannot mean. (Exactness: tests/test_exactness.py,
`scd_gs`, in the slow suite.)"""

from __future__ import annotations

import pytest
import torch

from sjdbench.decoding.parts import ProposalContext, WaitingDrafts
from sjdbench.decoding.proposals.coupled import CoupledConfig, CoupledProposal, gumbel, position_gumbel
from sjdbench.decoding.randomness import Draws
from sjdbench.errors import UserError


def released_draw(probs: torch.Tensor, random_table: torch.Tensor, b: int, s: int) -> int:
    """A restatement of junhyukso/SCD's `_sample_from_probs_with_global_rand` (GS scheduler):
    Gumbel-max over log probs with the table's uniforms for (batch b, slot s), eps 1e-9 inside."""
    eps = 1e-9
    u = random_table[b, s, : probs.shape[-1]]
    return int((probs[b, s].log() - torch.log(-torch.log(u + eps) + eps)).argmax())


def test_our_gumbel_max_draw_is_the_released_one_on_identical_inputs():
    torch.manual_seed(0)
    B, L, V = 3, 5, 50
    probs = torch.softmax(torch.randn(B, L, V, dtype=torch.float64) * 2, -1)
    probs[..., :7] = 0  # top-k style holes: never drawn by either
    probs = probs / probs.sum(-1, keepdim=True)
    table = torch.rand(B, L, V, dtype=torch.float64)
    ours = (probs.log() + gumbel(table)).argmax(-1)
    theirs = torch.tensor([[released_draw(probs, table, b, s) for s in range(L)] for b in range(B)])
    assert torch.equal(ours, theirs)
    assert (ours >= 7).all()


def _context(generators, counts, positions, keys):
    samples = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    draws = Draws(generators, counts, torch.device("cpu"))
    return ProposalContext(samples, torch.tensor(positions), None, None, draws, torch.tensor(keys)[samples])


def test_a_positions_vector_is_fixed_and_batched_equals_unbatched():
    g = position_gumbel(torch.tensor([11, 11, 12]), torch.tensor([5, 5, 5]), 20)
    assert torch.equal(g[0], g[1]) and not torch.equal(g[0], g[2])
    proposal = CoupledProposal(CoupledConfig(coupling="gumbel"))
    V = 30
    p = torch.softmax(torch.randn(5, V, dtype=torch.float64), -1)
    waiting = WaitingDrafts(torch.zeros(5, dtype=torch.long), p.clone(), torch.zeros(5, dtype=torch.bool))
    gens = [torch.Generator().manual_seed(101), torch.Generator().manual_seed(202)]
    both, refs = proposal.propose(p, waiting, _context(gens, [3, 2], [4, 5, 6, 4, 5], [31, 32]))
    assert torch.equal(refs, p)  # q := p: each draft is a draw from the p it was made from
    alone_a, _ = proposal.propose(p[:3], waiting, _context(gens[:1], [3], [4, 5, 6], [31]))
    alone_b, _ = proposal.propose(p[3:], waiting, _context(gens[1:], [2], [4, 5], [32]))
    assert torch.equal(both, torch.cat([alone_a, alone_b]))
    # the same p at the same position gives the same draft: a redraft moves only where p moved
    again, _ = proposal.propose(p, waiting, _context(gens, [3, 2], [4, 5, 6, 4, 5], [31, 32]))
    assert torch.equal(both, again)


def test_gumbel_draws_follow_p():
    V, n = 4, 20_000
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    g = position_gumbel(torch.full((n,), 7), torch.arange(n), V)
    counts = torch.bincount((p.log() + g).argmax(-1), minlength=V).double() / n
    assert torch.allclose(counts, p, atol=0.015)


@pytest.mark.parametrize(
    "knobs,message",
    [
        (dict(coupling="gumble"), "coupling 'gumble' is unknown; choose one of: maximal, gumbel"),
        (dict(coupling="gumbel", tau=0.5), "coupling=gumbel keeps no old draft to test"),
        (dict(coupling="gumbel", reference="old_q"), "coupling=gumbel keeps no old draft to test"),
    ],
)
def test_meaningless_gumbel_settings_are_refused(knobs, message):
    with pytest.raises(UserError, match=message):
        CoupledConfig(**knobs).check()


def test_the_gumbel_coupling_is_declared_lossless():
    assert CoupledProposal.lossless(CoupledConfig(coupling="gumbel"))
