"""The chain's fixed-shape step (sjdbench/decoding/chain_step.py) decodes what the general loop
decodes: token for token and statistic for statistic in float64, B = 1 and 3, for every preset whose
parts take it; compiled (slow) the same."""

from __future__ import annotations

import pytest
import torch

import sjdbench.decoding.loop as loop
from sjdbench.config import build_preset
from sjdbench.decoding.loop import Request, jacobi_decode_batch
from sjdbench.decoding.topologies.chain import ChainTopology
from sjdbench.models.debug import build_debug_adapter

FIXED = ["ar", "jacobi", "sjd", "sjd_vp", "lantern", "lantern_vp", "gsd", "gsd_vp", "cool_sd"]
GENERAL = ["sjd_pp", "mc_sjd", "pjd", "zipar", "sjd_pac"]  # parts or topologies that need the general loop
PROMPTS = ["a red circle", "two blue squares on a striped background", "x", "a green triangle at the bottom"]


@pytest.fixture(autouse=True)
def fixed_step(monkeypatch):
    """On a CPU decodes keep the general loop unless asked: here the fixed step runs wherever it can."""
    monkeypatch.setattr(loop, "CHAIN_STEP", "always")


@pytest.fixture(scope="module")
def debug64():
    return build_debug_adapter(grid_h=5, grid_w=5, n_codes=32, init_std=0.5, dtype="float64")


def decode(adapter, decoder, batch: int) -> dict:
    requests = [Request(PROMPTS[i], torch.Generator().manual_seed(100 + i), key=i) for i in range(len(PROMPTS))]
    return {r.key: res for r, res in jacobi_decode_batch(adapter, requests, decoder, adapter.default_sampling, batch)}


def takes(decoder) -> bool:
    topology = decoder.topology if decoder.window > 1 else ChainTopology()
    return loop.takes_fixed_step(topology, decoder.verifier, decoder.proposal, False)


def general(monkeypatch, adapter, decoder, batch: int) -> dict:
    with monkeypatch.context() as patch:
        patch.setattr(loop, "CHAIN_STEP", "never")
        patch.setattr(adapter, "_chain_steps", {}, raising=False)
        return decode(adapter, decoder, batch)


def assert_same(got: dict, want: dict, label: str) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        assert torch.equal(got[key].tokens, want[key].tokens), (label, key)
        assert got[key].stats.to_row() == want[key].stats.to_row(), (label, key)


@pytest.mark.parametrize("preset", FIXED)
def test_the_fixed_step_decodes_what_the_general_loop_decodes(debug64, monkeypatch, preset):
    decoder = build_preset(preset, debug64)
    assert takes(decoder), f"{preset} should run on the fixed-shape chain step"
    want = general(monkeypatch, debug64, decoder, 1)
    steps: dict = {}
    monkeypatch.setattr(debug64, "_chain_steps", steps, raising=False)
    for batch in (1, 3):
        assert_same(decode(debug64, decoder, batch), want, f"{preset} B={batch}")
    assert steps, "the fixed step did not run"


@pytest.mark.parametrize(
    "policy, compile, device, runs",
    [
        ("compiled-cuda", True, "cuda", True),
        ("compiled-cuda", True, "cpu", False),  # measured slower on a CPU, compiled or not
        ("compiled-cuda", False, "cuda", False),
        ("always", False, "cpu", True),
        ("never", True, "cuda", False),
    ],
)
def test_the_step_runs_where_the_policy_says(debug64, monkeypatch, policy, compile, device, runs):
    """Which decodes take the step: by default compiled decodes on CUDA only (the adapter's device and
    compile flag are all the choice reads, so a stand-in device is enough here)."""
    monkeypatch.setattr(loop, "CHAIN_STEP", policy)
    decoder = build_preset("sjd", debug64)

    class Stand:
        pass

    adapter = Stand()
    adapter.device, adapter.compile = torch.device(device), compile
    step = loop.chain_step(adapter, decoder, decoder.topology, debug64.default_sampling, drafter=False)
    assert (step is not None) == runs
    assert step is None or step.compiled == compile


@pytest.mark.parametrize("preset", GENERAL)
def test_parts_the_step_cannot_run_keep_the_general_loop(debug64, preset):
    assert not takes(build_preset(preset, debug64))


@pytest.mark.slow  # compiling the step and the forward takes about a minute per preset on 2 cores
@pytest.mark.parametrize("preset", ["ar", "sjd", "sjd_vp", "lantern"])
def test_compiled_equals_eager_in_float64(monkeypatch, preset):
    eager = build_debug_adapter(grid_h=5, grid_w=5, n_codes=32, init_std=0.5, dtype="float64")
    decoder = build_preset(preset, eager)
    monkeypatch.setattr(loop, "CHAIN_STEP", "never")
    want = decode(eager, decoder, 1)  # the general loop, eager
    compiled = build_debug_adapter(grid_h=5, grid_w=5, n_codes=32, init_std=0.5, dtype="float64")
    compiled.compile = True
    steps: dict = {}
    monkeypatch.setattr(compiled, "_chain_steps", steps, raising=False)
    monkeypatch.setattr(loop, "CHAIN_STEP", "always")  # on a CPU the default keeps the general loop
    for batch in (1, 3):
        assert_same(decode(compiled, build_preset(preset, compiled), batch), want, f"{preset} B={batch} compiled")
    assert steps and all(step.compiled for step in steps.values())
