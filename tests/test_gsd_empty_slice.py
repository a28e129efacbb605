"""Why the released GSD code takes the plain SJD test for the 7 least likely drafts (docs/READINGS.md).

junhyukso/GSD, `scheduler/jacobi_iteration_lumina_mgpt.py`, `SpeculativeSampler.__call__`: the group
is `logit_sort[c - 7 : c + 7]` of the ascending order, c the draft's place. For c < 7 the start is
negative, Python counts it from the end, and the slice is empty on a vocabulary of 14 or more. The
sums over the empty group are 0 and raise nothing; the id check `logit_sort_idx.max()` does raise,
and the `except` around the group computation falls back to min(1, p(x)/q(x)). (That our `official`
reading then applies the plain test is checked in tests/test_official_readings.py.)
"""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("V", [14, 64, 8192])
@pytest.mark.parametrize("c", [0, 3, 6])
def test_the_slice_is_empty_its_sum_is_zero_and_its_max_raises(V, c):
    order = torch.randperm(V, generator=torch.Generator().manual_seed(V + c))  # an ascending sort's ids
    cur_idx = torch.tensor([[c]])  # torch.nonzero(...) gives the place as a (1, 1) tensor
    group = order[cur_idx - 7 : cur_idx + 7]
    assert group.numel() == 0
    assert float(torch.rand(V)[group].sum()) == 0.0  # adv_super_prob.sum(): no error, 0
    with pytest.raises(RuntimeError):
        group.max()  # logit_sort_idx.max().item() <= 10000: the error the handler catches


def test_from_place_7_on_the_slice_holds_14_ids():
    order = torch.arange(64)
    cur_idx = torch.tensor([[7]])
    assert order[cur_idx - 7 : cur_idx + 7].tolist() == list(range(14))
