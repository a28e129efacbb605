"""GSD's grouping threshold in a model's own embedding units."""

from __future__ import annotations

import torch


def nearest_neighbour_threshold(
    embeddings: torch.Tensor, factor: float = 1.2, sample: int = 2048, seed: int = 0
) -> float:
    """GSD's squared-distance threshold in a model's own embedding units: `factor` times the median
    squared distance from an image token's input embedding to its nearest other image token
    (estimated on `sample` tokens). The paper's 0.5 is in Lumina-mGPT's units only; a threshold tied
    to the model's own nearest-neighbour spacing admits about one close neighbour per token on
    every model, whatever the scale of its embedding table."""
    vectors = embeddings.float()
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(vectors.shape[0], generator=generator)[:sample].to(vectors.device)
    nearest = []
    for chunk in rows.split(256):
        distance = torch.cdist(vectors[chunk], vectors).pow(2)  # (c, K)
        distance[torch.arange(chunk.numel()), chunk] = float("inf")
        nearest.append(distance.min(dim=-1).values)
    return float(factor * torch.cat(nearest).median())
