"""k-nearest-neighbour manifolds of feature sets: improved precision and recall (Kynkäänniemi et al.,
NeurIPS 2019).

A set's manifold is the union of balls around its features, each ball's radius the distance from its
centre to the centre's k-th nearest neighbour in the same set (k = 3 in the paper). A feature lies on a
manifold when it falls inside at least one ball, distance <= radius (the authors' reference code; the
strict < of some ports only differs on exact ties, i.e. duplicated images):

- precision: the share of generated features on the reference manifold (how many images look real);
- recall: the share of reference features on the generated manifold (how much of the reference's
  variety the generator covers).

Both depend on the two set sizes (more features give smaller balls), so they compare only at the same
N against the same reference. Distances are Euclidean, from |x|^2 - 2 x.y + |y|^2 in float64 clipped
at 0, a block of rows at a time, on the device the features are given on.
"""

from __future__ import annotations

import torch

_BLOCK_ELEMENTS = 1 << 25  # float64 distances held at once (256 MiB)


def pairwise_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(A, D), (B, D) -> (A, B) Euclidean distances in float64."""
    a, b = a.double(), b.double()
    squared = (a * a).sum(1, keepdim=True) - 2.0 * (a @ b.T) + (b * b).sum(1)[None]
    return squared.clamp_min(0.0).sqrt()


def _blocks(n_rows: int, n_columns: int):
    step = max(1, _BLOCK_ELEMENTS // max(n_columns, 1))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def knn_radii(features: torch.Tensor, k: int) -> torch.Tensor:
    """(N, D) -> (N,) float64: each feature's distance to its k-th nearest neighbour in the set.

    That is the (k + 1)-th smallest distance of its row, the first being the feature itself (0);
    a duplicate of the feature counts as a neighbour, as in the reference code."""
    n = features.shape[0]
    if n < k + 1:
        raise ValueError(f"a k = {k} manifold needs at least {k + 1} features, got {n}")
    radii = torch.empty(n, dtype=torch.float64, device=features.device)
    for rows in _blocks(n, n):
        radii[rows] = torch.kthvalue(pairwise_distances(features[rows], features), k + 1, dim=1).values
    return radii


def on_manifold(queries: torch.Tensor, centres: torch.Tensor, radii: torch.Tensor) -> torch.Tensor:
    """(Q, D) queries, (M, D) centres with their (M,) radii -> (Q,) bool: inside at least one ball."""
    inside = torch.empty(queries.shape[0], dtype=torch.bool, device=queries.device)
    for rows in _blocks(queries.shape[0], centres.shape[0]):
        inside[rows] = (pairwise_distances(queries[rows], centres) <= radii[None]).any(1)
    return inside
