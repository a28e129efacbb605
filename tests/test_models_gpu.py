"""The real models' GPU paths (skipped without CUDA): bf16 weights, no host synchronisation inside a
window forward or a commit, and the torch.compile'd window forward. Tiny random-weight architectures,
so the checks take seconds on any CUDA device."""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("transformers")

import model_properties as props  # noqa: E402

pytestmark = pytest.mark.gpu
BUILDERS = {
    "lumina": "build_lumina_adapter",
    "llamagen": "build_llamagen_adapter",
    "janus": "build_janus_adapter",
    "emu3": "build_emu3_adapter",
}


def build(model: str, **options):
    builder = getattr(importlib.import_module(f"sjdbench.models.{model}"), BUILDERS[model])
    resolution = 32 if model == "emu3" else 64
    return builder(weights="random", size="tiny", resolution=resolution, device="cuda", **options)


@pytest.mark.parametrize("model", BUILDERS)
def test_window_forward_and_commit_never_wait_for_the_host(model):
    adapter = build(model, dtype="bf16")
    prompt = adapter.encode_prompt("a red cube")
    cache = adapter.new_cache(prompt, extra=16)
    adapter.prefill(prompt, cache)
    tokens = props.random_image_tokens(adapter, 16, seed=0)
    positions = torch.arange(16, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any device -> host synchronisation raises
    try:
        adapter.forward(tokens, positions, cache)
        adapter.commit(cache, torch.arange(5, device="cuda"))
        adapter.forward(tokens[5:], positions[5:], cache)
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("model", BUILDERS)
def test_bf16_greedy_jacobi_equals_greedy_ar(model):
    props.check_greedy_jacobi_equals_greedy_ar(build(model, dtype="bf16"))


@pytest.mark.parametrize("model", BUILDERS)
def test_compiled_window_forward_matches_eager(model):
    eager, compiled = build(model, dtype="fp32"), build(model, dtype="fp32", compile=True)
    outputs = []
    for adapter in (eager, compiled):
        prompt = adapter.encode_prompt("a red cube")
        cache = adapter.new_cache(prompt, extra=16)
        adapter.prefill(prompt, cache)
        tokens = props.random_image_tokens(adapter, 12, seed=1)
        adapter.forward(tokens, torch.arange(12, device="cuda"), cache)
        adapter.commit(cache, torch.arange(4, device="cuda"))
        outputs.append(adapter.forward(tokens[4:], torch.arange(4, 12, device="cuda"), cache))
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-3, rtol=1e-3)
