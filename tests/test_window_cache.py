"""The bucketed shapes of a compiled window forward (sjdbench/models/cache.py): a window padded to a
power of two of slots and keys rounded up to a power of two show a query exactly what the unpadded,
exact window shows it, and nothing more. (The logits: model_properties.check_padded_window_equals_unpadded
for every model, and the toy's compile tests.)"""

import pytest
import torch

from sjdbench.models.cache import KEY_BUCKET, KVShape, WindowCache, slot_bucket

SHAPE = KVShape(layers=1, heads=2, head_dim=4, dtype=torch.float32)


def cache(prompt_len: int = 10, segment_len: int = 200, window: int = 16, samples: int = 2) -> WindowCache:
    made = WindowCache(samples, prompt_len, segment_len, window, SHAPE, torch.device("cpu"))
    made.key_valid[:, :prompt_len] = True
    made.key_valid[:, prompt_len : prompt_len + 150] = True  # 150 committed positions in each row
    return made


def test_slot_buckets_are_powers_of_two_up_to_the_window():
    assert [slot_bucket(n, 16) for n in (1, 2, 3, 4, 5, 8, 9, 16)] == [1, 2, 4, 4, 8, 8, 16, 16]
    assert slot_bucket(9, 12) == 12  # capped at a window that is no power of two


@pytest.mark.parametrize("pad_to", [2, 17])
def test_a_window_is_padded_only_within_the_cache_window(pad_to):
    with pytest.raises(ValueError, match="pad to between 3 and the cache's 16"):
        cache().begin_window(torch.arange(3).expand(2, 3), None, 3, pad_to)


@pytest.mark.parametrize("horizon", [1, 5, 60, 120, 180, None])
def test_bucketed_keys_and_slots_show_each_slot_what_the_exact_window_shows(horizon):
    exact_cache, bucketed_cache = cache(), cache()
    L = 3 if horizon is None else min(3, horizon)
    start = 0 if horizon is None else horizon - L
    positions = torch.arange(start, start + L).expand(2, L)  # (B, L)
    _, exact = exact_cache.begin_window(positions, None, horizon)
    slots = bucketed_cache.compiled_slots(L, horizon)
    rotary, bucketed = bucketed_cache.begin_window(positions, None, horizon, slots, bucket_keys=True)
    W, P, keys = 16, 10, exact.shape[-1]
    assert bucketed.shape[2] == slots and rotary.shape[1] == slots
    prompt_and_committed = bucketed.shape[-1] - W
    assert prompt_and_committed == bucketed_cache._key_end - W
    if horizon is None:
        assert prompt_and_committed == bucketed_cache.committed  # the whole cache, as without buckets
    else:
        exact_entries = P + max(horizon - 1, 0)
        expected = max(KEY_BUCKET, 1 << (exact_entries - 1).bit_length())
        assert prompt_and_committed == min(expected, bucketed_cache.committed) >= exact_entries
    assert torch.equal(bucketed[:, :, :L, :keys], exact)  # the real slots see what they saw
    assert not bucketed[:, :, :L, keys:].any()  # and none of the extra keys
    padding = bucketed[:, 0, L:]  # (2B, pad, keys): padding slots see only themselves
    assert torch.equal(padding.sum(-1), torch.ones_like(padding.sum(-1)))


def test_a_window_in_the_last_key_bucket_is_padded_to_the_whole_window():
    made = cache()  # prompt 10, committed region 256: the last bucket holds horizons above 119
    assert [made.compiled_slots(3, horizon) for horizon in (1, 60, 119)] == [4, 4, 4]
    assert [made.compiled_slots(3, horizon) for horizon in (120, 200, None)] == [16, 16, 16]


def test_prompts_of_other_lengths_share_the_key_bucket():
    ends = []
    for prompt_len in (3, 10, 30):
        made = cache(prompt_len=prompt_len)
        made.begin_window(torch.tensor([[20], [20]]), None, 21, 1, bucket_keys=True)
        ends.append(made._key_end)
    assert ends == [16 + 64, 16 + 64, 16 + 64]
