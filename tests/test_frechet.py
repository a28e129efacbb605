"""Fréchet distance: exact on Gaussians with known statistics, zero on identical sets."""

import numpy as np
import pytest

from sjdbench.eval.metrics.frechet import frechet_distance, frechet_distance_from_stats, gaussian_stats


def test_closed_form_for_commuting_covariances():
    # diagonal covariances commute: FD = |mu_a - mu_b|^2 + sum (sd_a - sd_b)^2
    mu_a, mu_b = np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.0])
    sd_a, sd_b = np.array([1.0, 2.0, 0.5]), np.array([2.0, 2.0, 1.5])
    fd = frechet_distance_from_stats(mu_a, np.diag(sd_a**2), mu_b, np.diag(sd_b**2))
    assert fd == pytest.approx(5.0 + 1.0 + 0.0 + 1.0, abs=1e-9)


def test_general_covariances_match_the_matrix_square_root():
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 5)), rng.normal(size=(5, 5))
    cov_a, cov_b = a @ a.T + 0.1 * np.eye(5), b @ b.T
    mu = rng.normal(size=5)
    reference = mu @ mu + np.trace(cov_a + cov_b - 2 * sqrtm(cov_a @ cov_b).real)
    assert frechet_distance_from_stats(mu, cov_a, np.zeros(5), cov_b) == pytest.approx(reference, rel=1e-6)


def test_identical_sets_are_at_zero_and_distance_is_symmetric():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(200, 8)), rng.normal(loc=0.5, size=(300, 8))
    assert abs(frechet_distance(x, x)) < 1e-8
    assert frechet_distance(x, y) == pytest.approx(frechet_distance(y, x), rel=1e-9)
    assert frechet_distance(x, y) > 8 * 0.25 * 0.5  # the mean shift alone is 8 * 0.25


def test_rank_deficient_sets_still_give_a_finite_distance():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(10, 32)), rng.normal(size=(10, 32))  # N < D: singular covariances
    assert np.isfinite(frechet_distance(x, y)) and frechet_distance(x, y) > 0
    with pytest.raises(ValueError, match="N >= 2"):
        gaussian_stats(x[:1])
