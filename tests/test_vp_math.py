"""VP maths against hand-computed values."""

import math

import pytest
import torch

from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.proposals.vp import VPConfig, ewa_reference, fuse
from sjdbench.decoding.settings import DecodeSettings

ONE = torch.tensor([0])  # sample 0 of a batch of one


def history_with(trajectory: list[list[float]]) -> ProbabilityHistory:
    """One position (0) observed over iterations, oldest first."""
    history = ProbabilityHistory(1, 4, 8, len(trajectory[0]), torch.device("cpu"), torch.float32)
    for probs in trajectory:
        history.push(ONE, torch.tensor([0]), torch.tensor([probs]))
    return history


TRAJ = [[0.1, 0.5, 0.4], [0.2, 0.5, 0.3], [0.3, 0.4, 0.3], [0.4, 0.35, 0.25]]  # token 0 rises 3 times


def test_ewa_reference_weights_gamma_powers():
    history = history_with(TRAJ)
    pbar, has = ewa_reference(history, ONE, torch.tensor([0]), depth=3, gamma=0.5)
    # previous iterations newest first: TRAJ[2] (w=1), TRAJ[1] (w=0.5), TRAJ[0] (w=0.25); normalised by 1.75
    expected = [(1 * a + 0.5 * b + 0.25 * c) / 1.75 for a, b, c in zip(TRAJ[2], TRAJ[1], TRAJ[0])]
    assert has.tolist() == [True]
    assert torch.allclose(pbar[0], torch.tensor(expected), atol=1e-6)


def test_ewa_reference_uses_only_available_history():
    history = history_with(TRAJ[:2])
    pbar, has = ewa_reference(history, ONE, torch.tensor([0]), depth=4, gamma=0.5)
    assert torch.allclose(pbar[0], torch.tensor(TRAJ[0]))  # one past observation, weight 1
    fresh = history_with(TRAJ[:1])
    _, has = ewa_reference(fresh, ONE, torch.tensor([0]), depth=4, gamma=0.5)
    assert has.tolist() == [False]


def observations(steps: int, reading: str = "increases") -> int:
    """The observations growth over N = steps needs in that reading (what the loop asks the history)."""
    return DecodeSettings(growth_steps=steps, growth_reading=reading).growth_observations


def test_growth_mask_both_readings():
    history = history_with(TRAJ)
    pos = torch.tensor([0])
    # N = 3 strict increases need 4 observations: only token 0 rose 0.1<0.2<0.3<0.4
    assert observations(3) == 4 and history.growth_mask(ONE, pos, observations(3)).tolist() == [[True, False, False]]
    # N = 4 increases needs 5 observations: none yet
    assert history.growth_mask(ONE, pos, observations(4)).tolist() == [[False, False, False]]
    # "N observations" reading: N = 3 -> last 3 observations, 2 increases
    assert observations(3, "observations") == 3
    assert history.growth_mask(ONE, pos, observations(3, "observations")).tolist() == [[True, False, False]]
    # a tie is not growth: token 1 went 0.5 -> 0.5
    tied = history_with([[0.2, 0.5, 0.3], [0.3, 0.5, 0.2]])
    assert tied.growth_mask(ONE, pos, observations(1)).tolist() == [[True, False, False]]


def test_history_rows_are_positions_modulo_the_ring():
    """Position p keeps row p % 4 while no other position of that residue is observed; once one is
    (the old position is decided by then: a topology observes within its span), the row starts afresh."""
    history = history_with(TRAJ)  # position 0, 4 observations
    one = torch.zeros(1, dtype=torch.long)
    history.push(one, torch.tensor([1]), torch.tensor([[0.5, 0.25, 0.25]]))  # another row: 0 keeps its history
    assert history.observations(torch.zeros(2, dtype=torch.long), torch.tensor([1, 0])).tolist() == [1, len(TRAJ)]
    three = torch.zeros(3, dtype=torch.long)
    history.push(three, torch.tensor([2, 3, 1]), torch.full((3, 3), 1 / 3))
    history.push(torch.zeros(2, dtype=torch.long), torch.tensor([4, 1]), torch.full((2, 3), 1 / 3))  # 4 takes 0's row
    four = torch.zeros(4, dtype=torch.long)
    assert history.observations(four, torch.tensor([4, 1, 0, 2])).tolist() == [1, 3, 0, 1]
    assert history.trajectory(0, 0, 0) == [] and len(history.trajectory(0, 1, 0)) == 3
    recent, valid = history.last(torch.zeros(2, dtype=torch.long), torch.tensor([0, 1]), 2)
    assert valid.tolist() == [[False, False], [True, True]]


def test_history_keeps_samples_apart():
    """Two samples of a batch observing the same position have rows of their own."""
    history = ProbabilityHistory(2, 4, 8, 3, torch.device("cpu"), torch.float32)
    both = torch.tensor([0, 1])
    history.push(both, torch.tensor([2, 2]), torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]]))
    history.push(torch.tensor([0]), torch.tensor([2]), torch.tensor([[0.3, 0.4, 0.3]]))
    assert history.observations(both, torch.tensor([2, 2])).tolist() == [2, 1]
    assert history.trajectory(0, 2, 0) == pytest.approx([0.2, 0.3]) and history.trajectory(1, 2, 0) == pytest.approx(
        [0.6]
    )


def test_score_and_fusion_renormalise():
    p = torch.tensor([[0.4, 0.35, 0.25]])
    pbar = torch.tensor([[0.2, 0.5, 0.3]])
    growth = torch.tensor([[True, False, False]])
    fused = fuse(p, pbar, growth, VPConfig(fusion_top_k=0))
    # log p'(0) = log 0.4 + (log 0.4 - log 0.2) -> p'(0) ∝ 0.4^2 / 0.2 = 0.8; others keep p
    unnorm = torch.tensor([0.8, 0.35, 0.25])
    assert torch.allclose(fused[0], unnorm / unnorm.sum(), atol=1e-6)
    # lambda scales the score: p'(0) ∝ 0.4 * (0.4/0.2)^0.5
    half = fuse(p, pbar, growth, VPConfig(fusion_top_k=0, lam=0.5))
    unnorm = torch.tensor([0.4 * math.sqrt(2), 0.35, 0.25])
    assert torch.allclose(half[0], unnorm / unnorm.sum(), atol=1e-6)


def test_fusion_respects_top_k_and_support():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    pbar = torch.tensor([[0.25, 0.15, 0.1, 0.5]])
    growth = torch.ones(1, 4, dtype=torch.bool)
    fused = fuse(p, pbar, growth, VPConfig(fusion_top_k=1))
    unnorm = torch.tensor([0.5 * 2, 0.3, 0.2, 0.0])  # only the top-1 candidate is fused
    assert torch.allclose(fused[0], unnorm / unnorm.sum(), atol=1e-6)
    assert fused[0, 3] == 0  # never leaves p's support


def test_prior_and_none_fusion_modes():
    p = torch.tensor([[0.4, 0.35, 0.25]])
    pbar = torch.tensor([[0.2, 0.5, 0.3]])
    growth = torch.tensor([[True, False, False]])
    assert torch.equal(fuse(p, pbar, growth, VPConfig(fusion="none")), p)
    prior = fuse(p, pbar, growth, VPConfig(fusion="prior", fusion_top_k=0))
    unnorm = torch.tensor([2.0, 1.0, 1.0])  # exp(M S): gain 2 on the rising token, 1 elsewhere
    assert torch.allclose(prior[0], unnorm / unnorm.sum(), atol=1e-6)
