"""The toy tokenizer: a k-means codebook over 4x4 RGB patches (64x64 image -> 16x16 codes).

Centroids live in [0, 1] RGB space, flattened patch-major as (4, 4, 3) -> 48 values. Codes are the
nearest centroid in squared Euclidean distance; decoding pastes the centroids back. Lloyd's k-means
with a seeded k-means++-style start leaves some centroids close to each other (near-duplicate codes),
the ambiguity that relaxed verifiers exploit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

PATCH = 4
GRID = 16
IMAGE = PATCH * GRID
DIM = PATCH * PATCH * 3


def patches(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 (B, 64, 64, 3) -> float (B, 16, 16, 48) in [0, 1]."""
    x = torch.as_tensor(np.asarray(images)).float() / 255.0
    B = x.shape[0]
    x = x.view(B, GRID, PATCH, GRID, PATCH, 3).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, GRID, GRID, DIM)


def unpatch(p: torch.Tensor) -> np.ndarray:
    """float (B, 16, 16, 48) in [0, 1] -> uint8 (B, 64, 64, 3)."""
    B = p.shape[0]
    x = p.view(B, GRID, GRID, PATCH, PATCH, 3).permute(0, 1, 3, 2, 4, 5).reshape(B, IMAGE, IMAGE, 3)
    return (x.clamp(0, 1) * 255.0 + 0.5).to(torch.uint8).numpy()


def _nearest(x: torch.Tensor, centroids: torch.Tensor, chunk: int = 65536) -> tuple[torch.Tensor, torch.Tensor]:
    """Index and squared distance of the nearest centroid for each row of x (N, D)."""
    c_sq = (centroids**2).sum(1)
    idx, dist = [], []
    for i in range(0, x.shape[0], chunk):
        xb = x[i : i + chunk]
        d = (xb**2).sum(1, keepdim=True) - 2 * xb @ centroids.T + c_sq[None]
        m, a = d.min(1)
        idx.append(a)
        dist.append(m.clamp_min(0))
    return torch.cat(idx), torch.cat(dist)


def fit_kmeans(x: torch.Tensor, k: int, iters: int, seed: int) -> torch.Tensor:
    """Lloyd's k-means on x (N, D); greedy D^2-sampled start; empty clusters re-seeded far away."""
    g = torch.Generator().manual_seed(seed)
    N = x.shape[0]
    # k-means++ start on a subsample (cheap and seeded)
    sub = x[torch.randperm(N, generator=g)[: min(N, 40 * k)]]
    centroids = [sub[torch.randint(len(sub), (1,), generator=g)].squeeze(0)]
    d2 = ((sub - centroids[0]) ** 2).sum(1)
    for _ in range(1, k):
        j = int(torch.multinomial(d2 + 1e-12, 1, generator=g).item())
        centroids.append(sub[j])
        d2 = torch.minimum(d2, ((sub - sub[j]) ** 2).sum(1))
    c = torch.stack(centroids)
    for _ in range(iters):
        idx, dist = _nearest(x, c)
        sums = torch.zeros_like(c).index_add_(0, idx, x)
        counts = torch.bincount(idx, minlength=k).float()
        empty = counts == 0
        c = torch.where(empty[:, None], c, sums / counts.clamp_min(1)[:, None])
        if empty.any():  # move empty centroids onto the worst-represented points
            worst = dist.topk(int(empty.sum())).indices
            c[empty] = x[worst]
    return c


class PatchTokenizer:
    """encode: uint8 (B, 64, 64, 3) -> codes (B, 16, 16); decode: codes -> uint8 images."""

    def __init__(self, centroids: torch.Tensor) -> None:
        self.centroids = centroids.float().contiguous()  # (K, 48)

    @property
    def n_codes(self) -> int:
        return int(self.centroids.shape[0])

    def codebook(self) -> torch.Tensor:
        return self.centroids

    def encode(self, images: np.ndarray | torch.Tensor) -> torch.Tensor:
        p = patches(images)
        B = p.shape[0]
        idx, _ = _nearest(p.reshape(-1, DIM), self.centroids)
        return idx.view(B, GRID, GRID)

    def decode(self, codes: torch.Tensor | np.ndarray) -> np.ndarray:
        codes = torch.as_tensor(codes).long().cpu()
        single = codes.dim() == 2
        if single:
            codes = codes[None]
        out = unpatch(self.centroids[codes])
        return out[0] if single else out

    def save(self, path: str | Path) -> None:
        save_file({"centroids": self.centroids}, str(path))

    @classmethod
    def load(cls, path: str | Path) -> PatchTokenizer:
        return cls(load_file(str(path))["centroids"])

    @classmethod
    def fit(cls, images: np.ndarray, k: int = 512, iters: int = 20, seed: int = 0) -> PatchTokenizer:
        x = patches(images).reshape(-1, DIM)
        return cls(fit_kmeans(x, k, iters, seed))

    def near_duplicate_pairs(self, threshold: float) -> int:
        """Number of code pairs whose centroids are within RMS per-value distance `threshold` (0..1 scale)."""
        d = torch.cdist(self.centroids, self.centroids) / DIM**0.5
        return int((torch.triu(d < threshold, diagonal=1)).sum())


def roundtrip_error(tok: PatchTokenizer, images: np.ndarray) -> dict:
    """Mean absolute and RMS pixel error (0..255 scale) of encode -> decode."""
    rec = tok.decode(tok.encode(images)).astype(np.float64)
    diff = rec - images.astype(np.float64)
    return {"mae": float(np.abs(diff).mean()), "rmse": float(np.sqrt((diff**2).mean()))}
