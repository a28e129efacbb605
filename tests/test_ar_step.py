"""The lean step of a one-slot decoder (`BatchDecode.step_ar`, the AR baseline) decides what the
loop's six general steps decide for it: the same tokens and every statistic, alone and in a batch
whose samples start and finish at different iterations, sampled and greedy; and its bad logits stop
the decode with the same error."""

from __future__ import annotations

import pytest
import torch

import sjdbench.decoding.loop as loop
from sjdbench.config import build_preset
from sjdbench.decoding.loop import Request, jacobi_decode_batch
from sjdbench.errors import NonFiniteLogits
from sjdbench.models.debug import build_debug_adapter
from sjdbench.models.toy.model import build_toy_adapter

PROMPTS = ["a red circle", "two blue squares on a striped background", "x", "a green triangle at the bottom"]


def decode(adapter, decoder, batch: int, path: str, monkeypatch, sampling=None) -> dict:
    monkeypatch.setattr(loop, "AR_STEP", path)
    requests = [Request(p, torch.Generator().manual_seed(100 + i), key=i) for i, p in enumerate(PROMPTS)]
    sampling = sampling or adapter.default_sampling
    return {r.key: out for r, out in jacobi_decode_batch(adapter, requests, decoder, sampling, batch)}


@pytest.mark.parametrize("model", ["debug", "toy"])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_lean_step_decides_what_the_general_steps_decide(model, batch, monkeypatch):
    adapter = build_debug_adapter(grid_h=5, grid_w=5, n_codes=32, init_std=0.5) if model == "debug" else None
    adapter = adapter or build_toy_adapter()
    decoder = build_preset("ar", adapter)
    lean = decode(adapter, decoder, batch, "lean", monkeypatch)
    general = decode(adapter, decoder, batch, "general", monkeypatch)
    assert lean.keys() == general.keys() == set(range(len(PROMPTS)))
    for key, out in general.items():
        assert torch.equal(lean[key].tokens, out.tokens), (model, batch, key)
        assert lean[key].stats.to_row() == out.stats.to_row(), (model, batch, key)
        assert out.stats.nfe == adapter.layout.n_positions  # one forward per position, the prefill's included


def test_every_one_slot_decoder_takes_the_lean_step_greedy_too(monkeypatch):
    """`decoder.window=1` makes any chain preset AR; greedy sampling goes through the same step."""
    from dataclasses import replace

    adapter = build_debug_adapter(grid_h=4, grid_w=4, n_codes=16, init_std=0.5)
    taken = []
    step_ar = loop.BatchDecode.step_ar
    monkeypatch.setattr(loop.BatchDecode, "step_ar", lambda self: taken.append(1) or step_ar(self))
    greedy = replace(adapter.default_sampling, temperature=0.0)
    for preset, sampling in (("sjd_pp", None), ("ar", greedy)):
        decoder = build_preset(preset, adapter, "decoder.window=1")
        taken.clear()
        lean = decode(adapter, decoder, 2, "lean", monkeypatch, sampling)
        assert taken, preset  # the lean step ran
        taken.clear()
        general = decode(adapter, decoder, 2, "general", monkeypatch, sampling)
        assert not taken, preset
        for key, out in general.items():
            assert torch.equal(lean[key].tokens, out.tokens) and lean[key].stats.to_row() == out.stats.to_row()


class BadAt:
    """The debug adapter whose window logits turn NaN where they predict one position."""

    def __init__(self, inner, position: int) -> None:
        self._inner, self._position = inner, position

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def forward(self, cache, window):
        logits = self._inner.forward(cache, window).clone()  # (B, 2, L, V)
        logits[(window.positions + 1 == self._position)[:, None].expand_as(logits[..., 0])] = float("nan")
        return logits


@pytest.mark.parametrize("path", ["lean", "general"])
def test_bad_logits_name_the_same_prompt_and_position_either_way(path, monkeypatch):
    adapter = BadAt(build_debug_adapter(grid_h=4, grid_w=4, n_codes=16, init_std=0.5), position=7)
    with pytest.raises(NonFiniteLogits) as raised:
        decode(adapter, build_preset("ar", adapter), 3, path, monkeypatch)
    assert raised.value.position == 7 and raised.value.prompt == PROMPTS[0]
