"""Fréchet distance between two feature sets, each modelled as a Gaussian.

FD = |mu_a - mu_b|^2 + tr(S_a + S_b - 2 (S_a S_b)^(1/2)). FID is this on Inception features; on the
toy we use the toy CLIP's features. tr((S_a S_b)^(1/2)) is computed as the trace of the square root
of the symmetric PSD matrix S_a^(1/2) S_b S_a^(1/2) (same eigenvalues as S_a S_b), via eigh in
float64: no complex parts and no iterative sqrtm to fail on rank-deficient covariances.
"""

from __future__ import annotations

import numpy as np
import torch


def gaussian_stats(features: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """features (N, D) -> mean (D,) and unbiased covariance (D, D), float64."""
    x = torch.as_tensor(features).detach().cpu().double().numpy()
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need a (N, D) feature matrix with N >= 2, got shape {tuple(x.shape)}")
    return x.mean(0), np.cov(x, rowvar=False)


def sqrt_psd(matrix: np.ndarray) -> np.ndarray:
    """The symmetric square root of a symmetric PSD matrix (negative eigenvalues from rounding clipped)."""
    vals, vecs = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vecs * np.sqrt(np.clip(vals, 0.0, None))) @ vecs.T


def frechet_distance_from_stats(mu_a: np.ndarray, cov_a: np.ndarray, mu_b: np.ndarray, cov_b: np.ndarray) -> float:
    root_a = sqrt_psd(cov_a)
    middle = root_a @ cov_b @ root_a  # (D, D) symmetric PSD, eigenvalues of cov_a @ cov_b
    tr_sqrt = np.sqrt(np.clip(np.linalg.eigvalsh((middle + middle.T) / 2), 0.0, None)).sum()
    diff = mu_a - mu_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2.0 * tr_sqrt)


def frechet_distance(features_a: np.ndarray | torch.Tensor, features_b: np.ndarray | torch.Tensor) -> float:
    """FD between feature sets (N_a, D) and (N_b, D). Biased upwards at small N: compare sets of equal size."""
    return frechet_distance_from_stats(*gaussian_stats(features_a), *gaussian_stats(features_b))
