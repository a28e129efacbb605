"""Batched decoding: B samples in lockstep equal their unbatched decodes token for token wherever the
batched forward returns the same logits, i.e. always in float64; in float32 the forward's last bits
depend on the batch (matmul blocking), and a draw whose uniform lands that close to a boundary may
flip (benchmarks/bench_batch_float32.py measures how often)."""

from __future__ import annotations

import pytest
import torch

from sjdbench.config import build_preset
from sjdbench.decoding.loop import Request, jacobi_decode, jacobi_decode_batch
from sjdbench.models.debug import build_debug_adapter

PRESETS = [
    "ar",
    "jacobi",
    "sjd",
    "sjd_pp",
    "mc_sjd",
    "sjd_vp",
    "lantern",
    "lantern_vp",
    "gsd",
    "gsd_vp",
    "sjd_pac",
    "lantern_pac",
    "pjd",
    "zipar",
]
PROMPTS = [
    "a red circle",
    "two blue squares on a striped background",
    "x",
    "a green triangle at the bottom",
    "yy",
    "a small yellow square at the top left",
    "b",
    "three circles",
]


@pytest.fixture(scope="module")
def debug64():
    return build_debug_adapter(grid_h=5, grid_w=5, n_codes=32, init_std=0.5, dtype="float64")


def requests(n: int) -> list[Request]:
    return [Request(PROMPTS[i % len(PROMPTS)], torch.Generator().manual_seed(100 + i), key=i) for i in range(n)]


@pytest.mark.parametrize("preset", PRESETS)
def test_batched_equals_unbatched_in_float64(debug64, preset):
    """Every preset, B = 1, 3 and 8 over 8 samples of different prompts (so samples finish at different
    iterations, leave the batch and let the next one in): tokens and every statistic equal the
    sample decoded alone."""
    decoder = build_preset(preset, debug64)
    alone = {
        i: jacobi_decode(debug64, r.prompt, decoder, debug64.default_sampling, r.generator)
        for i, r in enumerate(requests(len(PROMPTS)))
    }
    nfe = {alone[i].stats.nfe for i in alone}
    assert len(nfe) > 1 or preset in ("ar", "zipar"), "every sample finished at the same iteration"
    for batch in (1, 3, 8):
        got = {
            r.key: res
            for r, res in jacobi_decode_batch(debug64, requests(len(PROMPTS)), decoder, debug64.default_sampling, batch)
        }
        assert sorted(got) == sorted(alone)
        for i, result in got.items():
            assert torch.equal(result.tokens, alone[i].tokens), (preset, batch, i)
            assert result.stats.to_row() == alone[i].stats.to_row(), (preset, batch, i)


def test_a_batch_larger_than_the_requests_and_an_empty_list(debug64):
    decoder = build_preset("sjd", debug64)
    got = list(jacobi_decode_batch(debug64, requests(2), decoder, debug64.default_sampling, 16))
    assert len(got) == 2
    assert list(jacobi_decode_batch(debug64, [], decoder, debug64.default_sampling, 4)) == []


def test_a_batch_larger_than_the_run_allocates_only_what_it_decodes(tmp_path, monkeypatch):
    """batch_size=64 on a one-sample run (the trial's 100000 allocated caches for 100000 samples): its
    note says at most 1 decodes together, and no decode, the warm-up's included, asks the model for
    more (the cache for B is allocated up front)."""
    import sjdbench.run.runner as runner_module
    from sjdbench.config import compose_run

    asked: list[int] = []
    real = runner_module.jacobi_decode_batch

    def recording(adapter, requests, decoder, sampling, batch_size):
        asked.append(min(batch_size, len(requests)))
        return real(adapter, requests, decoder, sampling, batch_size)

    monkeypatch.setattr(runner_module, "jacobi_decode_batch", recording)
    words = ["model=debug", "model.options.grid_h=3", "model.options.grid_w=3", "data.limit=1", "warmup=2"]
    outcome = runner_module.execute(compose_run([*words, "batch_size=64", f"results_dir={tmp_path}"]))
    assert outcome.new_samples == 1 and asked == [1, 1, 1]  # two warm-up decodes, then the sample
