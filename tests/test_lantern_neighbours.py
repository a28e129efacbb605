"""LANTERN's neighbour table against the released computation, ties included.

The released table (jadohu/LANTERN, `entrypoints/generate_codebook.py`) is, on the CPU:
`cdist` of the raw codebook with itself, the diagonal filled with infinity, `topk` of all K - 1
other codes (smallest first), saved whole; the decoders read its first k or k + 1 columns. It is
restated below from that description. Float32 distances tie (always for duplicated codes), and
`topk` orders tied values by its selection algorithm, which depends on how many values it is asked
for, so asking for k directly gives another order on many rows (the check that the cases below
contain such rows keeps the comparison from being vacuous).
"""

from __future__ import annotations

import pytest
import torch

from sjdbench.decoding.verifiers.lantern import neighbour_table


def released_table(codebook: torch.Tensor) -> torch.Tensor:
    """(K, K - 1): the released computation, the whole distance matrix at once."""
    distances = torch.cdist(codebook, codebook, p=2)
    distances.fill_diagonal_(float("inf"))
    return torch.topk(distances, codebook.shape[0] - 1, dim=-1, largest=False).indices


def topk_of_k(codebook: torch.Tensor, k: int) -> torch.Tensor:
    """The table asked for k neighbours directly (sjdbench's earlier computation)."""
    distances = torch.cdist(codebook, codebook)
    distances.fill_diagonal_(float("inf"))
    return distances.topk(k, dim=-1, largest=False).indices


def duplicated_codebook(K: int = 1536, D: int = 8, copies: int = 3, seed: int = 0) -> torch.Tensor:
    """K codes, each of K / copies vectors repeated `copies` times (shuffled): every row has exact ties."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(K // copies, D, generator=g)
    return base.repeat(copies, 1)[torch.randperm(K, generator=g)]


def rounded_codebook(K: int = 2048, D: int = 8, seed: int = 1) -> torch.Tensor:
    """Random codes on a coarse grid (VQ codebooks after training hold many near-equal entries): ties
    without duplicates."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(K, D, generator=g) * 4).round() / 4


@pytest.mark.parametrize("make", [duplicated_codebook, rounded_codebook], ids=["duplicated", "rounded"])
@pytest.mark.parametrize("k", [1, 16, 1001])
def test_table_is_the_released_ranking_tie_for_tie(make, k):
    codebook = make()
    released = released_table(codebook)[:, :k]
    ours = neighbour_table(codebook, k).long()
    assert torch.equal(ours, released)


@pytest.mark.parametrize("make", [duplicated_codebook, rounded_codebook], ids=["duplicated", "rounded"])
def test_these_codebooks_have_ties_that_asking_for_k_orders_differently(make):
    codebook = make()
    released = released_table(codebook)[:, :1001]
    direct = topk_of_k(codebook, 1001)
    differing_rows = int((direct != released).any(-1).sum())
    assert differing_rows > 100, differing_rows


def test_a_book_larger_than_one_block_and_the_cache(tmp_path):
    """Several 1024-row blocks, and the cached file holds the same table under a new name."""
    codebook = duplicated_codebook(K=2500, D=4, copies=5, seed=3)
    released = released_table(codebook)[:, :40]
    assert torch.equal(neighbour_table(codebook, 40, tmp_path, "t").long(), released)
    (cached,) = tmp_path.glob("lantern-t-K2500-k40-of2499-*.pt")
    assert torch.equal(torch.load(cached).long(), released)
    assert torch.equal(neighbour_table(codebook, 40, tmp_path, "t").long(), released)  # read back


@pytest.mark.slow
def test_random_8192_by_256_codebook():
    """Lumina-mGPT's and Anole's codebook shape (8192 x 256): every row, at k + 1 = 1001."""
    codebook = torch.randn(8192, 256, generator=torch.Generator().manual_seed(0))
    assert torch.equal(neighbour_table(codebook, 1001).long(), released_table(codebook)[:, :1001])
