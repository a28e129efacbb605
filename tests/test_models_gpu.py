"""The real models' GPU paths (skipped without CUDA): bf16 weights, no host synchronisation inside a
window forward or a commit, and the torch.compile'd window forward. Tiny random-weight architectures,
so the checks take seconds on any CUDA device."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import model_properties as props  # noqa: E402

from sjdbench.models.registry import entry  # noqa: E402

pytestmark = pytest.mark.gpu
REAL = ("lumina", "llamagen", "janus", "emu3")


def build(model: str, **options):
    resolution = 32 if model == "emu3" else 64
    return entry(model).load("cuda", weights="random", size="tiny", resolution=resolution, **options)


@pytest.mark.parametrize("model", REAL)
def test_window_forward_and_commit_never_wait_for_the_host(model):
    adapter = build(model, dtype="bf16")
    prompt, cache, _ = props.fresh(adapter, "a red cube", 16)
    tokens = props.random_image_tokens(adapter, 16, seed=0)
    positions = torch.arange(16, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any device -> host synchronisation raises
    try:
        props.one_forward(adapter, cache, tokens, positions, horizon=16)
        props.one_commit(adapter, cache, torch.arange(5, device="cuda"))
        props.one_forward(adapter, cache, tokens[5:], positions[5:], horizon=16)
        adapter.commit(cache, torch.tensor([[0, 1, -1]], device="cuda"))  # a padded row
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("model", REAL)
def test_bf16_greedy_jacobi_equals_greedy_ar(model):
    props.check_greedy_jacobi_equals_greedy_ar(build(model, dtype="bf16"))


@pytest.mark.parametrize("model", REAL)
def test_batched_forward_on_cuda_equals_each_samples_own(model):
    props.check_batched_forward_equals_unbatched(build(model, dtype="fp32"))


@pytest.mark.parametrize("model", REAL)
def test_compiled_window_forward_matches_eager(model):
    eager, compiled = build(model, dtype="fp32"), build(model, dtype="fp32", compile=True)
    outputs = []
    for adapter in (eager, compiled):
        prompt, cache, _ = props.fresh(adapter, "a red cube", 16)
        tokens = props.random_image_tokens(adapter, 12, seed=1)
        props.one_forward(adapter, cache, tokens, torch.arange(12, device="cuda"))
        props.one_commit(adapter, cache, torch.arange(4, device="cuda"))
        outputs.append(props.one_forward(adapter, cache, tokens[4:], torch.arange(4, 12, device="cuda")))
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-3, rtol=1e-3)
